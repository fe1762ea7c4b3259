"""The zoo's ``triage`` app: a support desk on the OpenAI Agents SDK, where a triage agent looks the
customer up and hands the case off to a specialist (billing, technical, refunds), and the refunds
desk hands large refunds on to a supervisor.

Every agent works with real function tools over a small local world drawn from the seed (customers,
orders with their card captures, invoices, service status, a knowledge base) and answers in JSON,
as a real back office would. The scripted LLM's replies are computed from the conversation each
agent is shown: the triage agent routes on what the customer wrote, the specialist takes the
customer and the order from the triage agent's case note, the refund amount comes from the policy
tool's answer, and the final message reports what the tools returned. So a fault planted in any
message, tool call or tool result changes what follows. Two checks in the app can catch one: the
refund tool rejects an amount above what was captured (the refunds agent then re-checks the policy)
and an unknown order number makes the agent list the customer's orders and pick the one the
customer described; when such a check recovers, the run passes (``masked``).

The run is right when the back office ends in the state the case calls for (exactly one refund of
the right amount on the right order; nothing refunded for billing and technical cases) and the final
message states the expected figure or identifiers.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from otel_blame.demo.scripted_llm import Reply
from otel_blame.inject.demo_app import apply_corrections
from otel_blame.inject.zoo._resources import AppResources

FAULTS: tuple[str, ...] = (
    "number",
    "drop_instruction",
    "contradict_instruction",
    "fabricated_fact",
    "skipped_policy_step",
    "premature_handoff",
    "lost_context",
    "tool_error",
    "wrong_tool_result",
    "wrong_tool_argument",
    "wrong_tool",
)
APPROVAL_LIMIT = 250.0
RETURN_WINDOW_DAYS = 30
MAX_TURNS = 30
DESKS = ("billing", "technical", "refunds")

# --- the world: what the back office knows, drawn from the seed ----------------------------------

FIRST_NAMES = ("Maya", "Jonas", "Priya", "Tomasz", "Aiko", "Lucia", "Omar", "Grace", "Felix", "Nadia")
LAST_NAMES = ("Okafor", "Lindqvist", "Raman", "Nowak", "Tanaka", "Ferreira", "Haddad", "Kim", "Moreau")
PLANS = {"Starter": 19.0, "Pro": 49.0, "Business": 199.0}
PRODUCTS = (
    ("USB-C docking station", 129.0),
    ("27-inch monitor arm", 89.5),
    ("noise-cancelling headset", 179.99),
    ("mechanical keyboard", 109.0),
    ("4K webcam", 149.0),
    ("ergonomic mouse", 59.99),
    ("laptop stand", 44.9),
    ("portable SSD 2 TB", 219.0),
)
SERVICES = {
    "exports": (
        "S3 export",
        ("502",),
        "KB-1193",
        "Retry failed exports from the Exports page once the incident is",
    ),
    "webhooks": (
        "webhook delivery",
        ("timeout", "504"),
        "KB-2207",
        "Re-enable the paused endpoint under Settings",
    ),
    "sso": ("single sign-on", ("SAML", "403"), "KB-3051", "Re-upload the identity provider certificate"),
}


@dataclass
class Line:
    description: str
    unit_price: float
    quantity: int

    @property
    def total(self) -> float:
        return round(self.unit_price * self.quantity, 2)


@dataclass
class Customer:
    id: str
    name: str
    email: str
    plan: str
    since: str
    card_last4: str


@dataclass
class Order:
    id: str
    customer_id: str
    placed: str
    delivered: str
    lines: list[Line]
    shipping: float
    captures: list[float]

    @property
    def total(self) -> float:
        return round(sum(line.total for line in self.lines) + self.shipping, 2)

    @property
    def days_since_delivery(self) -> int:
        return 4 + int(self.id[-3:]) % 21  # within the return window


@dataclass
class Invoice:
    id: str
    customer_id: str
    period: str
    lines: list[Line]
    status: str  # "paid" | "open" | "overdue"

    @property
    def total(self) -> float:
        return round(sum(line.total for line in self.lines), 2)


@dataclass
class Article:
    id: str
    title: str
    applies_to: list[str]
    steps: list[str]


@dataclass
class Refund:
    id: str
    order_id: str
    amount: float
    approval_id: str | None


@dataclass
class World:
    customers: list[Customer]
    orders: list[Order]
    invoices: list[Invoice]
    status: dict[str, dict[str, Any]]
    articles: list[Article]
    refunds: list[Refund] = field(default_factory=list)
    approvals: dict[str, tuple[str, float]] = field(default_factory=dict)  # approval id -> order, amount

    # -- what the tools answer (JSON, as the back office's API would) --
    def customer_by_email(self, email: str) -> Customer | None:
        return next((c for c in self.customers if c.email.lower() == email.strip().lower()), None)

    def order(self, order_id: str) -> Order | None:
        return next((o for o in self.orders if o.id == order_id.strip().upper()), None)

    def refunded(self, order_id: str) -> float:
        return round(sum(r.amount for r in self.refunds if r.order_id == order_id), 2)

    def refund_policy(self, order: Order, reason: str) -> dict[str, Any]:
        """What the written policy allows for ``reason`` on ``order``."""
        text = reason.lower()
        answer: dict[str, Any] = {
            "order_id": order.id,
            "reason": reason,
            "days_since_delivery": order.days_since_delivery,
            "return_window_days": RETURN_WINDOW_DAYS,
        }
        if "duplicate" in text or "twice" in text:
            if len(order.captures) < 2:
                return answer | {"eligible": False, "basis": "only one capture was made for this order"}
            amount = order.captures[-1]
            basis = "duplicate capture refunded in full (policy 2.1)"
        elif "damaged" in text or "defective" in text or "broken" in text:
            line = next((li for li in order.lines if li.description.lower() in text), None)
            if line is None:
                return answer | {"eligible": False, "basis": "the damaged item is not a line of this order"}
            amount = line.total
            basis = f"damaged item at its line total, {line.quantity} x {line.unit_price:.2f} (policy 3.2)"
        else:
            return answer | {"eligible": False, "basis": "no refundable reason given (policy 1.4)"}
        return answer | {
            "eligible": True,
            "refundable_amount": round(amount, 2),
            "currency": "USD",
            "basis": basis,
            "requires_approval": amount > APPROVAL_LIMIT,
            "approval_limit": APPROVAL_LIMIT,
        }


def _date(rng: random.Random, month: int) -> str:
    return f"2026-{month:02d}-{rng.randint(1, 28):02d}"


@dataclass(frozen=True)
class Case:
    """One customer request and what a correct desk ends with."""

    kind: str  # refund_duplicate | refund_damaged | billing | technical
    desk: str
    message: str
    expected: str  # what the final message must state: figures and identifiers, joined by " / "
    order_id: str | None = None
    refund: float | None = None  # the refund the case calls for

    def verdict(self, world: World, final: str) -> tuple[bool, str | None]:
        """Whether the desk ended right, and if not, why (the run's outcome reason)."""
        refunds = [(r.order_id, r.amount) for r in world.refunds]
        if self.refund is not None:
            if refunds != [(self.order_id, self.refund)]:
                return (
                    False,
                    f"expected one refund of ${self.refund:.2f} on {self.order_id}, the ledger has {refunds}",
                )
        elif refunds:
            return False, f"no refund was due, the ledger has {refunds}"
        stated = self.expected.split(" / ") + [r.id for r in world.refunds]  # and the refund's reference
        missing = [part for part in stated if part not in final]
        if missing:
            return False, f"the final answer does not state {', '.join(missing)}"
        return True, None


def _world_and_case(seed: int) -> tuple[World, Case]:
    rng = random.Random(seed)
    customers = []
    for _ in range(6):
        first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
        customers.append(
            Customer(
                id=f"C-{rng.randint(1000, 9999)}",
                name=f"{first} {last}",
                email=f"{first.lower()}.{last.lower()}{rng.randint(1, 99)}@example.com",
                plan=rng.choice(list(PLANS)),
                since=_date(rng, rng.randint(1, 12)).replace("2026", str(rng.randint(2019, 2024))),
                card_last4=f"{rng.randint(1000, 9999)}",
            )
        )
    orders = []
    for customer in customers:
        for _ in range(rng.randint(2, 3)):
            products = rng.sample(PRODUCTS, rng.randint(1, 3))
            lines = [Line(name, price, rng.randint(1, 2)) for name, price in products]
            order = Order(
                id=f"ORD-{rng.randint(10000, 99999)}",
                customer_id=customer.id,
                placed=_date(rng, 3),
                delivered=_date(rng, 4),
                lines=lines,
                shipping=rng.choice((0.0, 7.5, 12.0)),
                captures=[],
            )
            order.captures = [order.total]
            orders.append(order)
    invoices = []
    for customer in customers:
        fee = PLANS[customer.plan]
        for month, status in ((4, "paid"), (5, "open"), (6, "open")):
            lines = [Line(f"{customer.plan} plan, 2026-{month:02d}", fee, 1)]
            if month == 5 and rng.random() < 0.7:
                lines.append(Line("late payment fee", 15.0, 1))
            if month == 6:
                lines.append(
                    Line("additional seats (prorated)", round(fee * rng.choice((0.3, 0.5, 0.8)), 2), 1)
                )
            invoices.append(
                Invoice(f"INV-{rng.randint(20000, 29999)}", customer.id, f"2026-{month:02d}", lines, status)
            )
    status = {name: {"service": name, "status": "operational", "incident": None} for name in SERVICES}
    articles = [
        Article(
            kb,
            f"{label.capitalize()} errors: what to check",
            list(codes),
            [
                f"{fix} resolved.",
                "Check the request log under Settings > Activity for the failing request id.",
                "If the error persists for more than an hour, reply to this ticket with the request id.",
            ],
        )
        for label, codes, kb, fix in SERVICES.values()
    ]
    world = World(customers, orders, invoices, status, articles)
    customer = rng.choice(customers)
    kind = rng.choice(("refund_duplicate", "refund_damaged", "billing", "technical"))
    return world, _case(kind, rng, world, customer)


def _case(kind: str, rng: random.Random, world: World, customer: Customer) -> Case:
    own_orders = [o for o in world.orders if o.customer_id == customer.id]
    greeting = rng.choice(("Hi there", "Hello", "Good morning"))
    sign = f"Thanks, {customer.name.split()[0]} ({customer.email})"
    if kind == "refund_duplicate":
        order = rng.choice(own_orders)
        order.captures.append(order.total)
        message = (
            f"{greeting}, I was charged twice for order {order.id}. My card statement shows two payments "
            f"of ${order.total:.2f} on {order.placed}, but I only placed the order once. Please refund the "
            f"duplicate payment. {sign}"
        )
        return Case(kind, "refunds", message, f"${order.total:.2f} / {order.id}", order.id, order.total)
    if kind == "refund_damaged":
        order = max(own_orders, key=lambda o: max(li.total for li in o.lines))
        line = rng.choice(order.lines)
        message = (
            f"{greeting}, the {line.description} from order {order.id} arrived damaged: the casing is "
            f"cracked and it does not power on. The rest of the order was fine. I would like a refund "
            f"for the {line.description}. {sign}"
        )
        return Case(kind, "refunds", message, f"${line.total:.2f} / {order.id}", order.id, line.total)
    if kind == "billing":
        open_invoices = [i for i in world.invoices if i.customer_id == customer.id and i.status != "paid"]
        latest = open_invoices[-1]
        balance = round(sum(i.total for i in open_invoices), 2)
        message = (
            f"{greeting}, invoice {latest.id} is higher than usual and I am not sure why. Could you explain "
            f"the charges and tell me how much I owe in total right now? {sign}"
        )
        return Case(kind, "billing", message, f"${balance:.2f} / {latest.id}")
    service = rng.choice(list(SERVICES))
    label, codes, kb, _ = SERVICES[service]
    code = codes[0]
    if rng.random() < 0.6:
        incident = f"INC-{rng.randint(4000, 4999)}"
        world.status[service] = {
            "service": service,
            "status": "degraded",
            "incident": incident,
            "since": f"2026-06-14T0{rng.randint(6, 9)}:{rng.randint(10, 59)}:00Z",
            "summary": f"Elevated {code} errors on {label}",
        }
        expected = f"{incident} / {kb}"
    else:
        expected = kb
    message = (
        f"{greeting}, since this morning every {label} we start fails with a {code} error. Nothing changed "
        f"on our side and it blocks our nightly job. Is something wrong on your end? {sign}"
    )
    return Case("technical", "technical", message, expected)


# --- the tools ---------------------------------------------------------------------------------------


def _json(value: Any) -> str:
    return json.dumps(value, indent=1)


def _order_json(order: Order, world: World) -> dict[str, Any]:
    return {
        "order_id": order.id,
        "customer_id": order.customer_id,
        "placed": order.placed,
        "delivered": order.delivered,
        "lines": [
            {"item": li.description, "unit_price": li.unit_price, "quantity": li.quantity, "total": li.total}
            for li in order.lines
        ],
        "shipping": order.shipping,
        "order_total": order.total,
        "captures": [{"amount": c, "status": "settled"} for c in order.captures],
        "refunded": world.refunded(order.id),
    }


def build_tools(world: World) -> dict[str, Any]:
    """The desk's function tools over ``world``, by name (``agents.function_tool`` objects)."""
    import agents

    @agents.function_tool
    def lookup_customer(email: str) -> str:
        """Find a customer account by the e-mail address they wrote from."""
        customer = world.customer_by_email(email)
        if customer is None:
            return _json({"error": "no account with that e-mail", "email": email})
        open_invoices = sum(1 for i in world.invoices if i.customer_id == customer.id and i.status != "paid")
        return _json(
            {
                "customer_id": customer.id,
                "name": customer.name,
                "email": customer.email,
                "plan": customer.plan,
                "customer_since": customer.since,
                "card_on_file": f"visa ending {customer.card_last4}",
                "open_invoices": open_invoices,
                "orders": [o.id for o in world.orders if o.customer_id == customer.id],
            }
        )

    @agents.function_tool
    def get_order(order_id: str) -> str:
        """An order: its lines, shipping, card captures and what was refunded already."""
        order = world.order(order_id)
        if order is None:
            return _json({"error": "order not found", "order_id": order_id})
        return _json(_order_json(order, world))

    @agents.function_tool
    def list_orders(customer_id: str) -> str:
        """A customer's recent orders, newest first."""
        orders = [o for o in world.orders if o.customer_id == customer_id.strip().upper()]
        if not orders:
            return _json({"error": "no orders for that customer", "customer_id": customer_id})
        return _json([_order_json(o, world) for o in reversed(orders)])

    @agents.function_tool
    def check_refund_policy(order_id: str, reason: str) -> str:
        """What the refund policy allows for this order and reason (amount, approval needed)."""
        order = world.order(order_id)
        if order is None:
            return _json({"error": "order not found", "order_id": order_id})
        return _json(world.refund_policy(order, reason))

    @agents.function_tool
    def issue_refund(order_id: str, amount: float, approval_id: str = "") -> str:
        """Refund ``amount`` dollars to the card the order was paid with."""
        order = world.order(order_id)
        if order is None:
            return _json({"error": "order not found", "order_id": order_id})
        refundable = round(sum(order.captures) - world.refunded(order.id), 2)
        if amount <= 0 or amount > refundable:
            return _json(
                {
                    "error": "amount exceeds what can be refunded",
                    "requested": amount,
                    "max_refundable": refundable,
                }
            )
        if amount > APPROVAL_LIMIT and world.approvals.get(approval_id, ("", 0.0))[0] != order.id:
            return _json(
                {"error": "a supervisor approval is required above the limit", "limit": APPROVAL_LIMIT}
            )
        refund = Refund(f"RF-{70311 + len(world.refunds)}", order.id, round(amount, 2), approval_id or None)
        world.refunds.append(refund)
        return _json(
            {
                "refund_id": refund.id,
                "order_id": order.id,
                "amount": refund.amount,
                "status": "issued",
                "expected_on_statement": "5-7 business days",
            }
        )

    @agents.function_tool
    def approve_refund(order_id: str, amount: float, justification: str) -> str:
        """A supervisor's approval of a refund above the desk's limit."""
        order = world.order(order_id)
        if order is None:
            return _json({"error": "order not found", "order_id": order_id})
        approval_id = f"APR-{len(world.approvals) + 311}"
        world.approvals[approval_id] = (order.id, amount)
        return _json({"approval_id": approval_id, "order_id": order.id, "amount": amount, "approved": True})

    @agents.function_tool
    def get_invoices(customer_id: str) -> str:
        """A customer's invoices of the last three months with their status and totals."""
        invoices = [i for i in world.invoices if i.customer_id == customer_id.strip().upper()]
        if not invoices:
            return _json({"error": "no invoices for that customer", "customer_id": customer_id})
        return _json(
            [{"invoice_id": i.id, "period": i.period, "status": i.status, "total": i.total} for i in invoices]
        )

    @agents.function_tool
    def get_invoice(invoice_id: str) -> str:
        """One invoice with its line items."""
        invoice = next((i for i in world.invoices if i.id == invoice_id.strip().upper()), None)
        if invoice is None:
            return _json({"error": "invoice not found", "invoice_id": invoice_id})
        return _json(
            {
                "invoice_id": invoice.id,
                "period": invoice.period,
                "status": invoice.status,
                "lines": [{"description": li.description, "amount": li.total} for li in invoice.lines],
                "total": invoice.total,
            }
        )

    @agents.function_tool
    def check_service_status(service: str) -> str:
        """The live status of one of our services (exports, webhooks, sso)."""
        status = world.status.get(service.strip().lower())
        if status is None:
            return _json({"error": "unknown service", "known": sorted(world.status)})
        return _json(status)

    @agents.function_tool
    def search_kb(query: str) -> str:
        """Search the support knowledge base; the best matches first."""
        words = set(re.findall(r"\w+", query.lower()))
        scored = []
        for article in world.articles:
            text = " ".join([article.title, *article.applies_to]).lower()
            scored.append((sum(word in text for word in words), article))
        scored.sort(key=lambda pair: -pair[0])
        return _json(
            [
                {"article_id": a.id, "title": a.title, "applies_to": a.applies_to, "steps": a.steps}
                for score, a in scored[:2]
                if score
            ]
        )

    tools = [
        lookup_customer,
        get_order,
        list_orders,
        check_refund_policy,
        issue_refund,
        approve_refund,
        get_invoices,
        get_invoice,
        check_service_status,
        search_kb,
    ]
    return {tool.name: tool for tool in tools}


# --- the agents' scripted minds ----------------------------------------------------------------------

_AGENT = re.compile(r"You are the (\w+) agent")
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.\w+")
_ORDER = re.compile(r"ORD-\d+")
_CUSTOMER = re.compile(r"(C-\d+)")
_SUMMARY_CUSTOMER = re.compile(r"Case summary: customer (C-\d+)")
_INVOICE = re.compile(r"INV-\d+")
_MONEY = re.compile(r"\$(\d+(?:\.\d+)?)")
_ROUTED = re.compile(r"Our (\w+) desk handles this")
_REFUND_OF = re.compile(r"refund of \$(\d+(?:\.\d+)?)")


@dataclass
class ToolResult:
    name: str
    arguments: dict[str, Any]
    text: str

    @property
    def data(self) -> Any:
        """The JSON answer, or None when the tool failed (an error object or a non-JSON error text)."""
        try:
            value = json.loads(self.text)
        except (TypeError, ValueError):
            return None
        if isinstance(value, dict) and "error" in value:
            return None
        return value

    @property
    def error(self) -> dict[str, Any] | str | None:
        try:
            value = json.loads(self.text)
        except (TypeError, ValueError):
            return self.text or "empty answer"
        return value if isinstance(value, dict) and "error" in value else None


@dataclass
class Conversation:
    """What one model request shows: the customer's message, what was said, what the tools answered."""

    agent: str
    customer: str
    said: list[tuple[str, list[tuple[str, dict[str, Any]]]]]  # (text, [(tool, arguments)]) per reply
    results: list[ToolResult]

    @classmethod
    def of(cls, request: dict[str, Any]) -> Conversation:
        messages = request.get("messages", [])
        system = next((str(m.get("content") or "") for m in messages if m.get("role") == "system"), "")
        found = _AGENT.search(system)
        customer = next((str(m.get("content") or "") for m in messages if m.get("role") == "user"), "")
        calls: dict[str, tuple[str, dict[str, Any]]] = {}
        said, results = [], []
        for message in messages:
            role = message.get("role")
            if role == "assistant":
                made = []
                for call in message.get("tool_calls") or ():
                    function = call.get("function") or {}
                    try:
                        arguments = json.loads(function.get("arguments") or "{}")
                    except ValueError:
                        arguments = {}
                    made.append((str(function.get("name")), arguments if isinstance(arguments, dict) else {}))
                    calls[call.get("id")] = made[-1]
                said.append((apply_corrections(str(message.get("content") or "")), made))
            elif role == "tool":
                name, arguments = calls.get(message.get("tool_call_id"), ("", {}))
                results.append(ToolResult(name, arguments, str(message.get("content") or "")))
        return cls(found.group(1) if found else "", customer, said, results)

    def last(self, tool: str) -> ToolResult | None:
        return next((r for r in reversed(self.results) if r.name == tool), None)

    def count(self, tool: str) -> int:
        return sum(r.name == tool for r in self.results)

    def texts(self) -> list[str]:
        """What the agents said (their text, without the tool calls), oldest first."""
        return [text for text, _ in self.said if text]


def _call(text: str, tool: str, **arguments: Any) -> Reply:
    return Reply(text, tool_calls=[{"name": tool, "arguments": arguments}])


def _desk_for(message: str) -> str:
    text = message.lower()
    if any(word in text for word in ("refund", "charged twice", "damaged")):
        return "refunds"
    if any(word in text for word in ("invoice", "owe", "billing")):
        return "billing"
    return "technical"


def _issue_of(message: str) -> str:
    text = message.lower()
    if "charged twice" in text:
        return "duplicate charge"
    damaged = re.search(r"the (.+?) from order", message)
    if "damaged" in text and damaged:
        return f"damaged item: {damaged.group(1)}"
    if "invoice" in text:
        return "invoice higher than usual"
    code = re.search(r"with an? (\w+) error", message)
    service = next(
        (name for name, (label, *_rest) in SERVICES.items() if label.lower() in text), "unknown service"
    )
    return f"{service} failing with {code.group(1) if code else 'an'} error"


def triage_reply(seen: Conversation) -> Reply:
    email = _EMAIL.search(seen.customer)
    lookup = seen.last("lookup_customer")
    if lookup is None:
        return _call(
            "Thanks for reaching out. I am pulling up your account first, so that the team that takes "
            "your case has your details and does not need to ask you again.",
            "lookup_customer",
            email=email.group() if email else "",
        )
    account = lookup.data
    desk = _desk_for(seen.customer)
    bounced = [found.group(1) for text in seen.texts() if (found := _ROUTED.search(text))]
    if desk in bounced:  # the desk sent the case back: the next desk that has not seen it
        desk = next((d for d in DESKS if d not in bounced), desk)
    issue = _issue_of(seen.customer)
    order = _ORDER.search(seen.customer)
    invoice = _INVOICE.search(seen.customer)
    if account is None:
        note = (
            "I could not open your account just now, so I am passing your message on as it is. "
            f"Case summary: customer unknown, issue: {issue}."
        )
    else:
        customer_id = str(account.get("customer_id"))
        reference = (
            f", order {order.group()}" if order else (f", invoice {invoice.group()}" if invoice else "")
        )
        orders = account.get("orders") or []
        name, plan, since = account.get("name"), account.get("plan"), account.get("customer_since")
        note = (
            f"I verified your identity: the e-mail you wrote from matches the account of {name}, "
            f"customer {customer_id}, on the {plan} plan since {since}. "
            f"You have {account.get('open_invoices')} open invoice(s) and {len(orders)} recent order(s) with "
            f"us. Case summary: customer {customer_id}{reference}, issue: {issue}. Our {desk} desk handles "
            "this, so I am transferring you now with this summary."
        )
    return _call(note, f"transfer_to_{desk}")


def _case_note(seen: Conversation) -> tuple[str, str | None, str]:
    """(note, customer id, issue) from the latest case note the agent was handed (hand-offs pass the
    notes on, not the tool calls behind them)."""
    texts = seen.texts()
    note = next((t for t in reversed(texts) if "Case summary" in t), None)
    if note is None:
        note = next((t for t in reversed(texts) if _CUSTOMER.search(t)), "")
    customer = _SUMMARY_CUSTOMER.search(note) or _CUSTOMER.search(note)
    issue = re.search(r"issue: ([^.\n]+)", note)
    return note, customer.group(1) if customer else None, issue.group(1) if issue else ""


def _verified(note: str) -> bool:
    """The desk's policy: account matters only for a customer whose identity triage verified."""
    return "verified your identity" in note


def _unverified(what: str) -> Reply:
    return Reply(
        f"The case note does not confirm that your identity was verified, and our policy does not let me "
        f"share or change any {what} before it is. Please reply from the e-mail address on your account, "
        "or answer the security question we sent you, and I will continue straight away."
    )


def _failed(tool: str, error: Any) -> str:
    detail = error.get("error") if isinstance(error, dict) else str(error).splitlines()[-1]
    return f"The {tool} call did not work ({detail})"


def refunds_reply(seen: Conversation) -> Reply:
    note, customer_id, issue = _case_note(seen)
    order_id = (m.group() if (m := _ORDER.search(note)) else None) or (
        m.group() if (m := _ORDER.search(seen.customer)) else None
    )
    if "duplicate" not in issue and "damaged" not in issue:
        return Reply(
            "I have looked at the case note, but it does not describe a refund I can process: there is no "
            "duplicate charge or damaged item in it. Please write back with the order number and what went "
            "wrong, and I will pick it up straight away."
        )
    order = seen.last("get_order")
    if order is None:
        return _call(
            f"I am opening order {order_id} to check what was captured on your card and what shipped.",
            "get_order",
            order_id=order_id or "",
        )
    if order.data is None and isinstance(order.error, str):
        return Reply(
            f"{_failed('order lookup', order.error)}, so I cannot see the payments on your order right now. "
            "I have logged the case for the payments team and you will hear from us by e-mail within one "
            "business day."
        )
    if order.data is None:
        listing = seen.last("list_orders")
        if listing is None and customer_id:
            return _call(
                f"Order {order.arguments.get('order_id')} does not match anything on file, so I am listing "
                "your recent orders to find the one you described.",
                "list_orders",
                customer_id=customer_id,
            )
        match = _order_described(seen.customer, listing.data if listing else None)
        if match is None or seen.count("get_order") > 1:
            return Reply(
                "I could not find the order you describe on your account, so I cannot refund it yet. Could "
                "you reply with the order number from your confirmation e-mail?"
            )
        return _call(f"Your message matches order {match}; opening it now.", "get_order", order_id=match)
    if not _verified(note):
        return _unverified("refund")
    details = order.data
    if details.get("customer_id") != customer_id:
        whose = (
            f"the account in the case note ({customer_id})" if customer_id else "an account I could confirm"
        )
        return Reply(
            f"Order {details['order_id']} is not on {whose}, and our policy only lets me refund an order to "
            "the account that placed it. Could you confirm the e-mail address you ordered with? I will pick "
            "the case up again as soon as you reply."
        )
    policy = seen.last("check_refund_policy")
    refund = seen.last("issue_refund")
    rejected = refund is not None and refund.data is None and isinstance(refund.error, dict)
    if policy is None or (
        rejected and seen.count("check_refund_policy") < 2 and "max_refundable" in refund.error
    ):
        opening = (
            "The refund system rejected that amount, so I am checking the policy for this order again."
            if rejected
            else f"Order {details['order_id']} shows {len(details['captures'])} card capture(s) against an "
            f"order total of ${details['order_total']:.2f}. I am checking what our refund policy allows for "
            "this case."
        )
        return _call(opening, "check_refund_policy", order_id=details["order_id"], reason=issue)
    allowed = policy.data
    if allowed is None:
        return Reply(
            f"{_failed('refund policy check', policy.error)}, so I cannot confirm what is refundable. I have "
            "escalated the case and we will follow up by e-mail."
        )
    if not allowed.get("eligible"):
        return Reply(
            f"I checked the policy for order {details['order_id']}: {allowed.get('basis')}. I am sorry, but "
            "that means I cannot issue a refund for this request. If something is missing, reply with the "
            "details and I will look again."
        )
    days, window = allowed.get("days_since_delivery"), allowed.get("return_window_days")
    if (
        "damaged" in issue
        and isinstance(days, int | float)
        and isinstance(window, int | float)
        and days > window
    ):
        return Reply(
            f"Order {details['order_id']} was delivered {days:g} days ago, outside our {window:g}-day window "
            "for damaged items, so the policy does not let me refund it. I am sorry; if you reported the "
            "damage earlier, reply with the date and I will look again."
        )
    amount = float(allowed["refundable_amount"])
    needs_approval = allowed.get("requires_approval") or (rejected and "approval" in str(refund.error))
    if (refund is None or rejected) and needs_approval:
        return _call(
            f"The policy allows a refund of ${amount:.2f} ({allowed.get('basis')}). That is above the "
            f"${APPROVAL_LIMIT:.2f} I can approve myself, so I am handing the case to a supervisor with the "
            f"policy check attached. Case summary: customer {customer_id}, order {details['order_id']}, "
            f"issue: {issue}.",
            "transfer_to_supervisor",
        )
    if refund is None or (rejected and seen.count("issue_refund") < 2):
        return _call(
            f"The policy allows a refund of ${amount:.2f} ({allowed.get('basis')}). I am issuing it now.",
            "issue_refund",
            order_id=details["order_id"],
            amount=amount,
        )
    return _closing(refund, details)


def _closing(refund: ToolResult, details: dict[str, Any]) -> Reply:
    done = refund.data
    if done is None:
        return Reply(
            f"{_failed('refund', refund.error)}. I have not been able to refund order {details['order_id']} "
            "and have passed the case to the payments team, who will contact you."
        )
    return Reply(
        f"I have issued a refund of ${float(done['amount']):.2f} for order {done['order_id']} (refund "
        f"{done['refund_id']}). It goes back to the card you paid with and shows on your statement within "
        f"{done.get('expected_on_statement', '5-7 business days')}. Nothing else on the order changes. Is "
        "there anything else I can help you with?"
    )


def _order_described(message: str, orders: Any) -> str | None:
    """The listed order the customer's message describes (an amount or an item it names)."""
    if not isinstance(orders, list):
        return None
    amounts = {float(a) for a in _MONEY.findall(message)}
    for order in orders:
        items = [str(line.get("item", "")).lower() for line in order.get("lines", [])]
        if order.get("order_total") in amounts or any(item and item in message.lower() for item in items):
            return str(order.get("order_id"))
    return None


def supervisor_reply(seen: Conversation) -> Reply:
    note, _, issue = _case_note(seen)
    order = _ORDER.search(note)
    asked = _REFUND_OF.search(note)
    if order is None or asked is None:
        return Reply(
            "The hand-over note does not say which order and amount the policy allows, so I am not approving "
            "anything. The refunds desk will need to send the case again with its policy check."
        )
    order_id, amount = order.group(), float(asked.group(1))
    approval = seen.last("approve_refund")
    if approval is None:
        return _call(
            f"I have reviewed the case: the refunds desk's policy check allows ${amount:.2f} on order "
            f"{order_id} for a {issue or 'refund'}. That is within what a supervisor may approve, so I am "
            "approving it.",
            "approve_refund",
            order_id=order_id,
            amount=amount,
            justification=issue or "policy check by the refunds desk",
        )
    approved = approval.data
    if approved is None:
        return Reply(f"{_failed('approval', approval.error)}, so the refund stays on hold for now.")
    refund = seen.last("issue_refund")
    if refund is None or (
        refund.data is None and seen.count("issue_refund") < 2 and seen.count("approve_refund") == 1
    ):
        return _call(
            f"Approved under {approved['approval_id']}. Issuing the refund of "
            f"${float(approved['amount']):.2f} now.",
            "issue_refund",
            order_id=str(approved["order_id"]),
            amount=float(approved["amount"]),
            approval_id=str(approved["approval_id"]),
        )
    return _closing(refund, {"order_id": order_id})


def billing_reply(seen: Conversation) -> Reply:
    note, customer_id, issue = _case_note(seen)
    invoice_id = (m.group() if (m := _INVOICE.search(note)) else None) or (
        m.group() if (m := _INVOICE.search(seen.customer)) else None
    )
    if not _verified(note):
        return _unverified("billing detail")
    listing = seen.last("get_invoices")
    if listing is None:
        return _call(
            f"I am pulling up the invoices on account {customer_id} to see what is open and what changed.",
            "get_invoices",
            customer_id=customer_id or "",
        )
    invoices = listing.data
    if invoices is None:
        return Reply(
            f"{_failed('invoice lookup', listing.error)}, so I cannot see your invoices right now. I have "
            "asked our billing team to send you a statement by e-mail today."
        )
    detail = seen.last("get_invoice")
    if detail is None and invoice_id:
        return _call(f"Now opening invoice {invoice_id} line by line.", "get_invoice", invoice_id=invoice_id)
    lines = detail.data if detail else None
    if isinstance(lines, dict) and seen.count("get_invoices") < 2:
        listed_total = next(
            (i.get("total") for i in invoices if i.get("invoice_id") == lines.get("invoice_id")), None
        )
        line_sum = round(sum(float(li.get("amount", 0)) for li in lines.get("lines", [])), 2)
        if listed_total is not None and not math.isclose(float(listed_total), line_sum, abs_tol=0.005):
            return _call(
                f"The list shows {lines.get('invoice_id')} at ${float(listed_total):.2f} but its lines add "
                f"up to ${line_sum:.2f}; I am reloading the invoice list before I quote you a balance.",
                "get_invoices",
                customer_id=customer_id or "",
            )
    open_invoices = [i for i in invoices if i.get("status") != "paid"]
    balance = round(sum(float(i.get("total", 0)) for i in open_invoices), 2)
    explained = ""
    if isinstance(lines, dict):
        extras = [li for li in lines.get("lines", []) if "plan" not in str(li.get("description"))]
        invoice = lines.get("invoice_id")
        if extras:
            parts = ", ".join(f"{li['description']} (${float(li['amount']):.2f})" for li in extras)
            explained = (
                f"Invoice {invoice} is higher than usual: it includes {parts} on top of your plan fee. "
            )
        else:
            explained = f"Invoice {invoice} has only your plan fee on it. "
    listed = ", ".join(f"{i['invoice_id']} (${float(i['total']):.2f}, {i['status']})" for i in open_invoices)
    return Reply(
        f"{explained}You have {len(open_invoices)} unpaid invoice(s): {listed}. Your outstanding balance is "
        f"${balance:.2f}. You can pay it from the Billing page, and the late fee stops accruing once the "
        "oldest invoice is settled."
    )


def technical_reply(seen: Conversation) -> Reply:
    note, customer_id, issue = _case_note(seen)
    service = next((name for name in SERVICES if issue.startswith(name)), None)
    if service is None:
        return _call(
            "This case does not describe a fault in one of our services, so it is not one for the technical "
            "desk. I am sending it back to triage to route it to the right team.",
            "transfer_to_triage",
        )
    status = seen.last("check_service_status")
    if status is None or (status.data is None and seen.count("check_service_status") < 2):
        opening = (
            "The status service did not answer; trying it once more."
            if status
            else f"I am checking the live status of our {service} service first."
        )
        return _call(opening, "check_service_status", service=service)
    code = re.search(r"with (?:an? )?(\w+) error", issue)
    articles = seen.last("search_kb")
    if articles is None:
        return _call(
            "Now searching the knowledge base for this error.",
            "search_kb",
            query=f"{SERVICES[service][0]} {code.group(1) if code else ''} errors",
        )
    found = articles.data if isinstance(articles.data, list) else []
    article = next(
        (a for a in found if code and code.group(1) in a.get("applies_to", [])), found[0] if found else None
    )
    live = status.data
    if live and live.get("incident"):
        state = (
            f"Our {service} service is {live['status']} right now: incident {live['incident']} was opened at "
            f"{live.get('since')} ({live.get('summary')}). Our engineers are on it and you do not need to "
            "change anything on your side. "
        )
    elif live:
        state = (
            f"Our {service} service is {live['status']}, so the problem is most likely in the configuration. "
        )
    else:
        state = "I could not reach our status page, so I cannot say whether there is an incident. "
    if article:
        steps = " ".join(f"{n}. {s}" for n, s in enumerate(article["steps"], 1))
        advice = f"Article {article['article_id']} ({article['title']}) covers this error: {steps}"
    else:
        advice = (
            "I found no knowledge-base article for this error; I have opened a ticket with our engineers."
        )
    return Reply(f"{state}{advice} I have subscribed your account to updates on this case.")


MINDS: dict[str, Callable[[Conversation], Reply]] = {
    "triage": triage_reply,
    "refunds": refunds_reply,
    "supervisor": supervisor_reply,
    "billing": billing_reply,
    "technical": technical_reply,
}


class TriageScript:
    """The scripted LLM's answer: each agent's next reply computed from the conversation it is shown."""

    def __call__(self, request: dict[str, Any]) -> Reply:
        seen = Conversation.of(request)
        mind = MINDS.get(seen.agent)
        if mind is None:
            return Reply("I cannot help with this request.")
        return mind(seen)


# --- the app -------------------------------------------------------------------------------------------

INSTRUCTIONS = {
    "triage": (
        "You are the triage agent of Northwind's customer support. Look the customer up by the e-mail they "
        "wrote from, then hand the case to the one desk that owns it (billing, technical or refunds) with a "
        "case summary: customer id, the order or invoice, and the issue in a few words. Never resolve a case "
        "yourself."
    ),
    "refunds": (
        "You are the refunds agent of Northwind's customer support. Refund policy: a duplicate card capture "
        "is refunded in full; a damaged item reported within 30 days of delivery is refunded at its line "
        "total; shipping is refunded only when the whole order is damaged; never refund more than was "
        f"captured. Refunds above ${APPROVAL_LIMIT:.2f} need a supervisor's approval: hand those to the "
        "supervisor. Always check the order and the policy before issuing anything."
    ),
    "supervisor": (
        "You are the supervisor agent of Northwind's refunds desk. Review refunds above the desk's limit "
        "against the policy check, approve them if the check supports them, and issue the approved refund."
    ),
    "billing": (
        "You are the billing agent of Northwind's customer support. Explain invoices line by line and tell "
        "the customer their outstanding balance, from the invoice tools only."
    ),
    "technical": (
        "You are the technical agent of Northwind's customer support. Check the live service status, then "
        "the knowledge base, and give the customer the incident and the article that applies. Send cases "
        "that are not technical back to triage."
    ),
}


def build_desk(world: World, base_url: str) -> Any:
    """The support desk's agents on the scripted model; returns the triage agent (the entry point)."""
    import agents
    from agents.extensions import handoff_filters
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=base_url, api_key="scripted", max_retries=0)
    model = agents.OpenAIChatCompletionsModel(model="scripted-model", openai_client=client)
    tools = build_tools(world)

    def agent(name: str, tool_names: tuple[str, ...]) -> Any:
        return agents.Agent(
            name=name,
            instructions=INSTRUCTIONS[name],
            model=model,
            tools=[tools[t] for t in tool_names],
            handoff_description=INSTRUCTIONS[name].split(". ", 1)[1].split(".")[0],
        )

    def to(target: Any) -> Any:
        # the receiving desk gets the conversation without the tool calls behind it: the case note is
        # what it works from, as with a human hand-over
        return agents.handoff(target, input_filter=handoff_filters.remove_all_tools)

    triage = agent("triage", ("lookup_customer",))
    supervisor = agent("supervisor", ("approve_refund", "issue_refund"))
    refunds = agent("refunds", ("get_order", "list_orders", "check_refund_policy", "issue_refund"))
    billing = agent("billing", ("get_invoices", "get_invoice"))
    technical = agent("technical", ("check_service_status", "search_kb"))
    refunds.handoffs = [to(supervisor)]
    technical.handoffs = [to(triage)]
    triage.handoffs = [to(billing), to(technical), to(refunds)]
    return triage


_RESOURCES = AppResources(TriageScript())


def case_for(seed: int) -> tuple[World, Case]:
    """The back office and the customer's request of run ``seed``."""
    return _world_and_case(seed)


def run_task(seed: int = 0) -> bool:
    """One support case (drawn from ``seed``) through the desk; True when it ends right."""
    import agents

    from otel_blame.instrumentation import set_outcome, task

    agents.set_tracing_disabled(True)  # the SDK's own trace export would go to OpenAI
    world, case = case_for(seed)
    triage = build_desk(world, _RESOURCES.base_url)
    with task(f"support-{case.kind}", input=case.message, expected_output=case.expected):
        stopped = None
        try:
            result = agents.Runner.run_sync(triage, case.message, max_turns=MAX_TURNS)
            final = str(result.final_output or "")
        except agents.AgentsException as error:  # too many turns, a call to a tool the agent lacks
            final, stopped = "", f"the desk stopped: {type(error).__name__}: {error}"
        right, reason = case.verdict(world, final)
        set_outcome(right and stopped is None, final_output=final or None, reason=stopped or reason)
    _RESOURCES.forget_requests()
    return right
