"""A customer-service desk (the tau-bench shape) on the plain instrumentation API.

An ``assistant`` serves a simulated ``customer`` who wants one thing done to one order (cancel it,
return an item, change the shipping address). The assistant works through tools over a small
SQLite database of users, orders and items, and must follow a written policy: authenticate the
customer, look the order up and check it is eligible, state what it will do and get an explicit
"yes" before any change, retry the order service once when it fails and hand over to a human when
it fails again. The order service is a flaky dependency: it answers HTTP 503 on some calls, and in
some runs it is down for the whole run, so the run fails from the dependency alone (declared as
the run's truth, :mod:`otel_blame.inject.truth`).

Both agents' replies are computed by the scripted LLM from the conversation they are shown, so a
planted fault changes what follows: a wrong order number is looked up, a dropped confirmation step
is not asked for, a fabricated number is corrected by the customer (masked) or not. The outcome is
judged as tau-bench does: the database must end in the state the right action leaves, the policy
must have been followed, and the assistant must tell the customer the right refund.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from otel_blame.demo.scripted_llm import Reply
from otel_blame.inject.faults import HANDOFF_NOTE, TERMINATE_WORD, is_error_result
from otel_blame.inject.truth import declare_dependency_failure
from otel_blame.inject.zoo._agents import Agent, Conversation, Entry, Tool, ToolError
from otel_blame.inject.zoo._resources import AppResources, asking_agent

FAULTS: tuple[str, ...] = (
    "number",
    "drop_instruction",
    "tool_error",
    "wrong_tool_result",
    "terminate",
    "wrong_tool_argument",
    "wrong_tool",
    "skipped_policy_step",
    "ignored_tool_error",
    "fabricated_fact",
    "premature_handoff",
    "lost_context",
)
ORDER_SERVICE = "order_service"
OUTAGE_RATE = 0.06  # runs in which the order service is down throughout
FLAKE_RATE = 0.15  # otherwise, the share of order lookups answered with HTTP 503
MAX_CUSTOMER_TURNS = 10
STOP = "###STOP###"

POLICY = """You work the support desk of an online store. Follow this policy on every conversation.
1. Authenticate the customer before anything else: find their user id from the email address on the
   account (find_user_id_by_email). Never act for a customer you have not authenticated.
2. Look up the customer's details (get_user_details) and check that the order they name is theirs.
3. Look up the order (get_order_details) before changing it, and check that it is eligible: only a
   pending order can be cancelled or have its address changed; only a delivered order can have
   items returned.
4. Before any change to the database, list exactly what you will do (the order, the items, the
   amount and where the refund goes) and obtain the customer's explicit confirmation (yes).
5. Refunds go to the payment method the order was paid with.
6. If the order service fails (an error such as HTTP 503), tell the customer and retry once. If it
   fails again, apologise and transfer the customer to a human agent with a summary.
7. Make one change per conversation, then tell the customer what was done, with the refund amount.
"""

# --- the store -------------------------------------------------------------------------------------

FIRST = [
    "Amara",
    "Bruno",
    "Chen",
    "Dalia",
    "Emeka",
    "Freya",
    "Gustavo",
    "Hana",
    "Ivan",
    "Jonas",
    "Keiko",
    "Lena",
]
LAST = [
    "Okafor",
    "Silva",
    "Wei",
    "Haddad",
    "Nwosu",
    "Lund",
    "Ortega",
    "Sato",
    "Petrov",
    "Berg",
    "Mori",
    "Vogel",
]
STREETS = ["Maple Avenue", "Harbor Road", "Elm Street", "Cedar Lane", "Bay Street", "Mill Road", "Park Row"]
CITIES = [
    ("Portland", "OR", "97205"),
    ("Austin", "TX", "78701"),
    ("Denver", "CO", "80202"),
    ("Boston", "MA", "02108"),
]
CATALOGUE = [
    ("Desk Lamp", "color: brass; bulb: LED", 48.99),
    ("Water Bottle", "capacity: 750ml; color: teal", 24.5),
    ("Hiking Backpack", "volume: 35L; color: olive", 129.0),
    ("Wireless Earbuds", "color: white; case: wireless charging", 89.99),
    ("Yoga Mat", "thickness: 6mm; color: plum", 35.25),
    ("Coffee Grinder", "type: burr; capacity: 250g", 74.0),
    ("Running Shoes", "size: 9; color: graphite", 112.4),
    ("Throw Blanket", "material: wool; color: oat", 66.75),
    ("Mechanical Keyboard", "switch: brown; layout: ANSI", 139.99),
    ("Tea Kettle", "material: steel; capacity: 1.7L", 42.3),
]
INTENTS = ("cancel", "return", "address")
REASONS = ("no longer needed", "ordered by mistake")


def _build_store(path: Path) -> None:
    rng = random.Random(20241124)
    db = sqlite3.connect(path)
    db.executescript(
        """
        CREATE TABLE users (user_id TEXT PRIMARY KEY, name TEXT, email TEXT, address TEXT);
        CREATE TABLE payment_methods (method_id TEXT PRIMARY KEY, user_id TEXT, kind TEXT, last4 TEXT);
        CREATE TABLE orders (order_id TEXT PRIMARY KEY, user_id TEXT, status TEXT, placed TEXT,
                             address TEXT, method_id TEXT);
        CREATE TABLE items (item_id TEXT PRIMARY KEY, order_id TEXT, name TEXT, options TEXT,
                            price REAL, status TEXT);
        CREATE TABLE refunds (order_id TEXT, amount REAL, method_id TEXT, reason TEXT);
        """
    )
    for number, (first, last) in enumerate(zip(FIRST, LAST, strict=True)):
        user_id = f"{first.lower()}_{last.lower()}_{1000 + number * 37}"
        city, state, zip_code = CITIES[number % len(CITIES)]
        address = f"{rng.randint(10, 990)} {rng.choice(STREETS)}, {city}, {state} {zip_code}"
        db.execute(
            "INSERT INTO users VALUES (?, ?, ?, ?)",
            (user_id, f"{first} {last}", f"{first.lower()}.{last.lower()}@example.com", address),
        )
        methods = []
        for kind in ("credit_card", "gift_card") if number % 3 else ("credit_card", "paypal"):
            method_id = f"{kind}_{rng.randint(1000000, 9999999)}"
            methods.append(method_id)
            db.execute(
                "INSERT INTO payment_methods VALUES (?, ?, ?, ?)",
                (method_id, user_id, kind, str(rng.randint(1000, 9999))),
            )
        for status in ("pending", "delivered", "pending" if number % 2 else "delivered"):
            order_id = f"#W{rng.randint(1000000, 9999999)}"
            placed = f"2024-{rng.randint(1, 9):02d}-{rng.randint(1, 28):02d}"
            db.execute(
                "INSERT INTO orders VALUES (?, ?, ?, ?, ?, ?)",
                (order_id, user_id, status, placed, address, rng.choice(methods)),
            )
            for name, options, price in rng.sample(CATALOGUE, rng.randint(2, 4)):
                item_id = str(rng.randint(1000000000, 9999999999))
                db.execute(
                    "INSERT INTO items VALUES (?, ?, ?, ?, ?, 'ok')",
                    (item_id, order_id, name, options, price),
                )
    db.commit()
    db.close()


class Store:
    """The run's copy of the store's database, and the tools the assistant uses on it."""

    def __init__(self, path: Path, rng: random.Random) -> None:
        self.path = path
        self._rng = rng
        self.outage = rng.random() < OUTAGE_RATE
        self.lookups = 0

    def _db(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path)
        db.row_factory = sqlite3.Row
        return db

    def find_user_id_by_email(self, email: str) -> str:
        with self._db() as db:
            row = db.execute(
                "SELECT user_id FROM users WHERE lower(email) = lower(?)", (email.strip(),)
            ).fetchone()
        if row is None:
            raise ToolError(f"no user with email {email!r}")
        return json.dumps({"user_id": row["user_id"]})

    def get_user_details(self, user_id: str) -> str:
        with self._db() as db:
            user = db.execute("SELECT * FROM users WHERE user_id = ?", (user_id,)).fetchone()
            if user is None:
                raise ToolError(f"no user {user_id!r}")
            methods = db.execute("SELECT * FROM payment_methods WHERE user_id = ?", (user_id,)).fetchall()
            orders = db.execute(
                "SELECT order_id FROM orders WHERE user_id = ? ORDER BY placed", (user_id,)
            ).fetchall()
        return json.dumps(
            {
                "user_id": user["user_id"],
                "name": user["name"],
                "email": user["email"],
                "address": user["address"],
                "payment_methods": [
                    {"method_id": m["method_id"], "kind": m["kind"], "last4": m["last4"]} for m in methods
                ],
                "orders": [o["order_id"] for o in orders],
            },
            indent=2,
        )

    def get_order_details(self, order_id: str) -> str:
        self.lookups += 1
        if self.outage or self._rng.random() < FLAKE_RATE:
            raise ToolError(
                f"HTTP 503 Service Unavailable: the {ORDER_SERVICE} did not answer (upstream timeout)"
            )
        return json.dumps(self._order(order_id), indent=2)

    def _order(self, order_id: str) -> dict[str, Any]:
        with self._db() as db:
            order = db.execute("SELECT * FROM orders WHERE order_id = ?", (order_id.strip(),)).fetchone()
            if order is None:
                raise ToolError(f"order {order_id!r} not found")
            items = db.execute(
                "SELECT * FROM items WHERE order_id = ? ORDER BY item_id", (order["order_id"],)
            ).fetchall()
        return {
            "order_id": order["order_id"],
            "user_id": order["user_id"],
            "status": order["status"],
            "placed": order["placed"],
            "shipping_address": order["address"],
            "payment_method_id": order["method_id"],
            "items": [
                {
                    "item_id": i["item_id"],
                    "name": i["name"],
                    "options": i["options"],
                    "price": i["price"],
                    "status": i["status"],
                }
                for i in items
            ],
            "total": round(sum(i["price"] for i in items), 2),
        }

    def _refund(
        self, db: sqlite3.Connection, order_id: str, amount: float, method_id: str, reason: str
    ) -> None:
        db.execute("INSERT INTO refunds VALUES (?, ?, ?, ?)", (order_id, round(amount, 2), method_id, reason))

    def cancel_pending_order(self, order_id: str, reason: str) -> str:
        order = self._order(order_id)
        if order["status"] != "pending":
            raise ToolError(f"order {order_id} is {order['status']}, only pending orders can be cancelled")
        if reason not in REASONS:
            raise ToolError(f"reason must be one of {list(REASONS)}")
        with self._db() as db:
            db.execute("UPDATE orders SET status = 'cancelled' WHERE order_id = ?", (order["order_id"],))
            self._refund(db, order["order_id"], order["total"], order["payment_method_id"], reason)
        return json.dumps(
            {
                **self._order(order_id),
                "refund": {"amount": order["total"], "method_id": order["payment_method_id"]},
            },
            indent=2,
        )

    def return_delivered_order_items(self, order_id: str, item_ids: str, payment_method_id: str) -> str:
        order = self._order(order_id)
        if order["status"] != "delivered":
            raise ToolError(f"order {order_id} is {order['status']}, only delivered orders can be returned")
        wanted = [i.strip() for i in item_ids.split(",") if i.strip()]
        known = {i["item_id"]: i for i in order["items"]}
        if not wanted or any(i not in known for i in wanted):
            raise ToolError(f"items {item_ids!r} are not all in order {order_id}")
        with self._db() as db:
            if (
                db.execute(
                    "SELECT 1 FROM payment_methods WHERE method_id = ?", (payment_method_id,)
                ).fetchone()
                is None
            ):
                raise ToolError(f"unknown payment method {payment_method_id!r}")
            for item in wanted:
                db.execute("UPDATE items SET status = 'return requested' WHERE item_id = ?", (item,))
            amount = round(sum(known[i]["price"] for i in wanted), 2)
            self._refund(db, order["order_id"], amount, payment_method_id, "return")
        return json.dumps(
            {**self._order(order_id), "refund": {"amount": amount, "method_id": payment_method_id}}, indent=2
        )

    def modify_pending_order_address(self, order_id: str, address: str) -> str:
        order = self._order(order_id)
        if order["status"] != "pending":
            raise ToolError(f"order {order_id} is {order['status']}, only pending orders can be changed")
        with self._db() as db:
            db.execute(
                "UPDATE orders SET address = ? WHERE order_id = ?", (address.strip(), order["order_id"])
            )
        return json.dumps(self._order(order_id), indent=2)

    def transfer_to_human_agents(self, summary: str) -> str:
        return json.dumps({"transferred": True, "queue": "tier-2 support", "summary": summary})

    def tools(self) -> tuple[Tool, ...]:
        string = "string"
        return (
            Tool(
                "find_user_id_by_email",
                "Find a user id by email.",
                {"email": string},
                self.find_user_id_by_email,
            ),
            Tool(
                "get_user_details",
                "A user's profile, payment methods and orders.",
                {"user_id": string},
                self.get_user_details,
            ),
            Tool(
                "get_order_details",
                "An order's status, items and total (order service).",
                {"order_id": string},
                self.get_order_details,
            ),
            Tool(
                "cancel_pending_order",
                "Cancel a pending order.",
                {"order_id": string, "reason": string},
                self.cancel_pending_order,
            ),
            Tool(
                "return_delivered_order_items",
                "Return items of a delivered order; item_ids comma-separated.",
                {"order_id": string, "item_ids": string, "payment_method_id": string},
                self.return_delivered_order_items,
            ),
            Tool(
                "modify_pending_order_address",
                "Change a pending order's shipping address.",
                {"order_id": string, "address": string},
                self.modify_pending_order_address,
            ),
            Tool(
                "transfer_to_human_agents",
                "Hand the conversation to a human.",
                {"summary": string},
                self.transfer_to_human_agents,
            ),
        )

    def state(self) -> list[tuple[Any, ...]]:
        """Every row that a change can touch, for comparing the end state with the expected one."""
        with self._db() as db:
            rows = [
                tuple(r) for r in db.execute("SELECT order_id, status, address FROM orders ORDER BY order_id")
            ]
            rows += [tuple(r) for r in db.execute("SELECT item_id, status FROM items ORDER BY item_id")]
            rows += [tuple(r) for r in db.execute("SELECT * FROM refunds ORDER BY order_id, amount")]
        return rows


# --- the task ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """What the customer wants, drawn from the seed (their persona's hidden instructions)."""

    name: str
    email: str
    order_id: str
    intent: str  # cancel | return | address
    reason: str = ""
    item_name: str = ""
    new_address: str = ""

    def persona(self) -> str:
        lines = [
            f"You play {self.name}, email {self.email}, writing to the store's support desk.",
            f"order: {self.order_id}",
            f"intent: {self.intent}",
        ]
        if self.reason:
            lines.append(f"reason: {self.reason}")
        if self.item_name:
            lines.append(f"item: {self.item_name}")
        if self.new_address:
            lines.append(f"new address: {self.new_address}")
        lines.append(
            "Give your email when asked. Check every detail the assistant asks you to confirm against "
            f"your request and say yes only when it matches. When it is done, thank them and write {STOP}."
        )
        return "\n".join(lines)

    def opening(self) -> str:
        first = self.name.split()[0]
        because = {
            "no longer needed": "I no longer need it.",
            "ordered by mistake": "I ordered it by mistake.",
        }
        order = self.order_id
        want = {
            "cancel": f"I would like to cancel my order {order}. {because.get(self.reason, '')}",
            "return": f"I would like to return the {self.item_name} from my order {order}. "
            "It is not what I expected.",
            "address": f"I need to change the shipping address of my order {order} to {self.new_address}.",
        }[self.intent]
        return (
            f"Hi, this is {first}. {want} I have been a customer for a few years and this is the first time "
            f"I need help with an order. My email address is {self.email}. Thank you for your help!"
        )


def draw_request(store_path: Path, seed: int) -> Request:
    rng = random.Random(seed)
    db = sqlite3.connect(store_path)
    db.row_factory = sqlite3.Row
    try:
        intent = rng.choice(INTENTS)
        status = "delivered" if intent == "return" else "pending"
        orders = db.execute(
            "SELECT o.order_id, u.name, u.email FROM orders o JOIN users u USING (user_id) "
            "WHERE status = ? ORDER BY order_id",
            (status,),
        ).fetchall()
        order = rng.choice(orders)
        items = db.execute(
            "SELECT name FROM items WHERE order_id = ? ORDER BY item_id", (order["order_id"],)
        ).fetchall()
    finally:
        db.close()
    city, state, zip_code = rng.choice(CITIES)
    return Request(
        name=order["name"],
        email=order["email"],
        order_id=order["order_id"],
        intent=intent,
        reason=rng.choice(REASONS) if intent == "cancel" else "",
        item_name=rng.choice(items)["name"] if intent == "return" else "",
        new_address=f"{rng.randint(10, 990)} {rng.choice(STREETS)}, {city}, {state} {zip_code}"
        if intent == "address"
        else "",
    )


# --- the agents' scripted minds ------------------------------------------------------------------------

_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_UNAVAILABLE = re.compile(r"\b503\b|Service Unavailable|timed out|timeout", re.IGNORECASE)
_ORDER = re.compile(r"#W\d{7}")
_MONEY = re.compile(r"\$(\d+(?:\.\d+)?)")
_ADDRESS = re.compile(r"\b\d{1,4} [A-Z][a-z]+ (?:Avenue|Road|Street|Lane|Row), [A-Z][a-z]+, [A-Z]{2} \d{5}")
_ITEM_IDS = re.compile(r"items? ([\d, ]{10,})")
_CONFIRM_STEP = re.compile(r"^\s*\d+[.)]\s.*\bconfirm", re.IGNORECASE | re.MULTILINE)
_DONE = re.compile(r"has been (?:cancelled|updated|submitted)")


def _json(text: str) -> dict[str, Any] | None:
    try:
        loaded = json.loads(text)
    except ValueError:
        return None
    return loaded if isinstance(loaded, dict) else None


class _Seen:
    """What the assistant can read off the conversation it is shown."""

    def __init__(self, messages: list[dict[str, Any]]) -> None:
        self.customer = [str(m.get("content") or "") for m in messages if m.get("name") == "customer"]
        self.own = [m for m in messages if m.get("role") == "assistant"]
        self.calls: list[tuple[str, dict[str, Any], str, bool]] = []  # (tool, arguments, result, failed)
        pending: dict[str, tuple[str, dict[str, Any]]] = {}
        for message in messages:
            for call in message.get("tool_calls") or []:
                function = call["function"]
                pending[call["id"]] = (function["name"], _json(function.get("arguments") or "") or {})
            if message.get("role") == "tool":
                name, arguments = pending.get(message.get("tool_call_id"), (message.get("name") or "", {}))
                content = str(message.get("content") or "")
                self.calls.append(
                    (name, arguments, content, is_error_result(content) or '"error"' in content)
                )
        self.last = messages[-1] if messages else {}

    def successful(self, tool: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        out = []
        for name, arguments, result, failed in self.calls:
            parsed = _json(result)
            if name == tool and not failed and parsed is not None:
                out.append((arguments, parsed))
        return out

    def mentioned(self, pattern: re.Pattern[str]) -> str | None:
        for text in reversed(self.customer):
            found = pattern.findall(text)
            if found:
                return found[-1]
        return None

    def own_text(self) -> str:
        return next((str(m.get("content") or "") for m in reversed(self.own) if m.get("content")), "")


def _call(name: str, **arguments: Any) -> Reply:
    return Reply(content="", tool_calls=[{"name": name, "arguments": arguments}])


def assistant_reply(messages: list[dict[str, Any]]) -> Reply:
    seen = _Seen(messages)
    said = seen.own_text()
    last_is_tool = seen.last.get("role") == "tool"
    if HANDOFF_NOTE in said and seen.last.get("name") == "customer":
        return _call("transfer_to_human_agents", summary="The customer's request is handed over unfinished.")
    if last_is_tool and seen.calls:
        name, arguments, result, failed = seen.calls[-1]
        if name == "transfer_to_human_agents":
            return Reply("You are now in the queue for a human agent, who will pick this up shortly.")
        if failed and _UNAVAILABLE.search(result):
            streak = 0
            for call in reversed(seen.calls):
                if call[0] != name or not (call[3] and _UNAVAILABLE.search(call[2])):
                    break
                streak += 1
            if streak >= 2:
                return Reply(
                    "I am sorry: the order service is still unavailable (HTTP 503) after a retry. "
                    "Per our policy I am transferring you to a human agent, who can finish this with you."
                )
            return Reply(
                "Thank you for your patience. The order service returned an error (HTTP 503 Service "
                "Unavailable). Per our policy I will retry the lookup once before going further."
            )
        if failed:
            error = (_json(result) or {}).get("error", result)
            return Reply(
                f"I could not complete that step: {error}. Could you double-check the order number for me?"
            )
        if name in ("cancel_pending_order", "return_delivered_order_items", "modify_pending_order_address"):
            return Reply(_done_message(name, _json(result) or {}))
    if seen.last.get("name") == "customer" and "transferring you to a human" in said:
        return _call("transfer_to_human_agents", summary="The order service failed twice (HTTP 503).")
    email = seen.mentioned(_EMAIL)
    users = seen.successful("find_user_id_by_email")
    if not users:
        tried = any(c[0] == "find_user_id_by_email" and c[1].get("email") == email for c in seen.calls)
        if email and not tried:
            return _call("find_user_id_by_email", email=email)
        return Reply(
            "I am happy to help. Before I can look at any order, I need to verify your identity. "
            "Could you tell me the email address on your account?"
        )
    user_id = users[-1][1]["user_id"]
    details = [d for a, d in seen.successful("get_user_details") if d.get("user_id") == user_id]
    if not details:
        return _call("get_user_details", user_id=user_id)
    profile = details[-1]
    order_id = seen.mentioned(_ORDER)
    if order_id is None:
        return Reply(
            "Thank you. Which order is this about? Please give me the order number; it starts with #W."
        )
    if order_id not in profile["orders"]:
        return Reply(
            f"I cannot find order {order_id} on your account. Could you double-check the order number for me?"
        )
    retry_announced = "retry" in said and seen.calls and seen.calls[-1][0] == "get_order_details"
    lookups = [d for a, d in seen.successful("get_order_details") if d.get("order_id") == order_id]
    last_lookup_failed = bool(seen.calls) and seen.calls[-1][0] == "get_order_details" and seen.calls[-1][3]
    if not lookups and (not last_lookup_failed or retry_announced):
        return _call("get_order_details", order_id=order_id)
    order = lookups[-1] if lookups else {"order_id": order_id}
    customer_said = seen.customer[-1] if seen.customer else ""
    plan = next(
        (
            str(m.get("content") or "")
            for m in reversed(seen.own)
            if "Here is what I will do" in str(m.get("content") or "")
        ),
        "",
    )
    intent = _intent(seen.customer)
    if plan and order_id in plan and seen.last.get("name") == "customer":
        confirmed = customer_said.strip().lower().startswith("yes")
        if confirmed or not _CONFIRM_STEP.search(plan):
            return _action(plan, intent, order, profile)
    status = order.get("status")
    eligible = {"cancel": "pending", "address": "pending", "return": "delivered"}[intent]
    if status is not None and status != eligible:
        return Reply(
            f"Order {order_id} is {status}, and per our policy only a {eligible} order can be changed "
            "this way. I am transferring you to a human agent."
        )
    return Reply(_plan_message(intent, order, profile, seen.customer))


def _intent(customer: list[str]) -> str:
    """What the customer wants, from their latest message that says it."""
    for text in reversed(customer):
        lower = text.lower()
        for intent, pattern in (("cancel", "cancel"), ("return", "return"), ("address", "shipping address")):
            if pattern in lower:
                return intent
    return "cancel"


def _plan_message(intent: str, order: dict[str, Any], profile: dict[str, Any], customer: list[str]) -> str:
    first = profile["name"].split()[0]
    order_id = order["order_id"]
    items = order.get("items") or []
    listing = ", ".join(f"{i['name']} (${i['price']:.2f})" for i in items) or "its items"
    total = order.get("total")
    method = order.get("payment_method_id", "the original payment method")
    head = (
        f"Thank you, {first}. I found order {order_id} (status: {order.get('status', 'unknown')}), placed on "
        f"{order.get('placed', 'an unknown date')}, with {listing}."
    )
    if intent == "cancel":
        text = " ".join(customer).lower()
        reason = "ordered by mistake" if "mistake" in text else "no longer needed"
        steps = [
            f"Verify that order {order_id} is yours and still pending: done.",
            f'Cancel order {order_id} with the reason "{reason}".',
            f"Refund ${total:.2f} to {method}, the payment method of the order, within 5-7 business days."
            if total is not None
            else f"Refund the order total to {method}, the payment method of the order.",
            "Get your explicit confirmation before I submit it: please reply yes to proceed.",
        ]
    elif intent == "return":
        wanted = next((i for i in items if i["name"].lower() in " ".join(customer).lower()), None)
        target = (
            f"item {wanted['item_id']} ({wanted['name']}, ${wanted['price']:.2f})"
            if wanted
            else "the item you named"
        )
        steps = [
            f"Verify that order {order_id} is yours and delivered: done.",
            f"Request the return of {target} from order {order_id}.",
            f"Refund ${wanted['price']:.2f} to {method}, the payment method of the order, once it arrives."
            if wanted
            else f"Refund the item's price to {method}, the payment method of the order.",
            "Get your explicit confirmation before I submit it: please reply yes to proceed.",
        ]
    else:
        address = next((a for text in reversed(customer) for a in _ADDRESS.findall(text)), "the new address")
        steps = [
            f"Verify that order {order_id} is yours and still pending: done.",
            f"Change the shipping address of order {order_id} to {address}.",
            "No charge or refund applies to an address change.",
            "Get your explicit confirmation before I submit it: please reply yes to proceed.",
        ]
    numbered = "\n".join(f"{n}. {step}" for n, step in enumerate(steps, 1))
    return f"{head}\nHere is what I will do:\n{numbered}"


def _action(plan: str, intent: str, order: dict[str, Any], profile: dict[str, Any]) -> Reply:
    orders = _ORDER.findall(plan)
    order_id = orders[1] if len(orders) > 1 else order["order_id"]
    method = order.get("payment_method_id") or profile["payment_methods"][0]["method_id"]
    if intent == "cancel":
        reason = re.search(r'reason "([^"]+)"', plan)
        return _call(
            "cancel_pending_order",
            order_id=order_id,
            reason=reason.group(1) if reason else "no longer needed",
        )
    if intent == "return":
        found = _ITEM_IDS.search(plan)
        item_ids = found.group(1).strip(" ,") if found else ""
        return _call(
            "return_delivered_order_items", order_id=order_id, item_ids=item_ids, payment_method_id=method
        )
    address = _ADDRESS.search(plan)
    return _call(
        "modify_pending_order_address", order_id=order_id, address=address.group() if address else ""
    )


def _done_message(tool: str, result: dict[str, Any]) -> str:
    order_id = result.get("order_id", "your order")
    refund = result.get("refund") or {}
    if tool == "cancel_pending_order":
        return (
            f"Your order {order_id} has been cancelled. A refund of ${refund.get('amount', 0):.2f} will go "
            f"to {refund.get('method_id')} within 5-7 business days. "
            "Is there anything else I can help you with?"
        )
    if tool == "return_delivered_order_items":
        return (
            f"The return for order {order_id} has been submitted. You will receive an email with the "
            f"return label; a refund of ${refund.get('amount', 0):.2f} will go to {refund.get('method_id')} "
            "once the item arrives. Is there anything else I can help you with?"
        )
    return (
        f"The shipping address of order {order_id} has been updated to {result.get('shipping_address')}. "
        "Is there anything else I can help you with?"
    )


def customer_reply(persona: str, messages: list[dict[str, Any]]) -> Reply:
    fields = dict(
        line.split(": ", 1) for line in persona.splitlines() if ": " in line and not line.startswith("You")
    )
    email = _EMAIL.search(persona)
    said = str(messages[-1].get("content") or "") if messages else ""
    lower = said.lower()
    if HANDOFF_NOTE.lower() in lower or "human agent" in lower:
        return Reply(f"Okay, I will wait for the human agent. {STOP}")
    if _DONE.search(said):
        return Reply(f"Thank you, that is all I needed. {STOP}")
    if "email" in lower and "?" in said:
        return Reply(f"Sure, it is {email.group() if email else 'unknown'}.")
    if "order number" in lower and "?" in said:
        return Reply(f"The order number is {fields.get('order', 'unknown')}.")
    if "reply yes" in lower:
        order_ok = fields.get("order", "") in said and _ORDER.findall(said).count(
            fields.get("order", "")
        ) == len(_ORDER.findall(said))
        intent = fields.get("intent", "")
        action_ok = {
            "cancel": "Cancel order" in said and fields.get("reason", "") in said,
            "return": fields.get("item", "?") in said and "return" in lower,
            "address": fields.get("new address", "?") in said,
        }.get(intent, False)
        if order_ok and action_ok:
            return Reply("Yes, please go ahead.")
        wants = {
            "cancel": "cancel it",
            "return": f"return the {fields.get('item')}",
            "address": f"ship it to {fields.get('new address')}",
        }
        want = wants.get(intent, "fix it")
        return Reply(f"No, that is not right. My order is {fields.get('order')} and I want to {want}.")
    return Reply("Okay, thank you. I will wait.")


class DeskScript:
    """The scripted LLM's answers for both agents, computed from what each is shown."""

    def __call__(self, request: dict[str, Any]) -> Reply:
        messages = request.get("messages", [])
        agent = asking_agent(request)
        conversation = [m for m in messages if m.get("role") != "system"]
        if agent == "customer":
            persona = str(messages[0].get("content") or "")
            return customer_reply(persona, conversation)
        return assistant_reply(conversation)


# --- the app -----------------------------------------------------------------------------------------

_RESOURCES = AppResources(DeskScript(), prefix="otel-blame-zoo-desk-")
_store_lock = threading.Lock()


def _template() -> Path:
    path = _RESOURCES.work_dir / "store.sqlite"
    with _store_lock:
        if not path.exists():
            _build_store(path)
    return path


def expected_state(request: Request, template: Path, scratch: Path) -> list[tuple[Any, ...]]:
    """The database after the right action (replayed on a copy, as tau-bench scores)."""
    shutil.copy(template, scratch)
    store = Store(scratch, random.Random(0))
    order = store._order(request.order_id)
    if request.intent == "cancel":
        store.cancel_pending_order(request.order_id, request.reason)
    elif request.intent == "return":
        item = next(i for i in order["items"] if i["name"] == request.item_name)
        store.return_delivered_order_items(request.order_id, item["item_id"], order["payment_method_id"])
    else:
        store.modify_pending_order_address(request.order_id, request.new_address)
    return store.state()


def policy_violations(entries: list[Entry]) -> list[str]:
    """Changes made without a successful lookup of the order, or without an explicit yes to a request
    for confirmation."""
    problems = []
    writes = ("cancel_pending_order", "return_delivered_order_items", "modify_pending_order_address")
    for position, entry in enumerate(entries):
        if entry.kind != "message" or entry.tool_name not in writes:
            continue
        order_id = (_json(entry.arguments or "") or {}).get("order_id")
        before = entries[:position]
        looked_up = any(
            e.kind == "tool"
            and e.tool_name == "get_order_details"
            and not e.is_error
            and (_json(e.text) or {}).get("order_id") == order_id
            for e in before
        )
        if not looked_up:
            problems.append(f"{entry.tool_name} on {order_id} without a successful lookup of the order")
        asked = [
            i for i, e in enumerate(before) if e.speaker == "assistant" and "reply yes" in e.text.lower()
        ]
        confirmed = asked and any(
            e.speaker == "customer" and e.text.lower().startswith("yes") for e in before[asked[-1] :]
        )
        if not confirmed:
            problems.append(f"{entry.tool_name} without the customer's explicit confirmation")
    return problems


def run_task(seed: int = 0) -> bool:
    """One support conversation (drawn from ``seed``); True when the request was handled right."""
    from otel_blame.instrumentation import set_outcome, task

    template = _template()
    _RESOURCES.forget_requests()
    work = _RESOURCES.work_dir
    run_db = work / f"run-{threading.get_ident()}.sqlite"
    shutil.copy(template, run_db)
    request = draw_request(template, seed)
    expected = expected_state(request, template, work / "expected.sqlite")
    store = Store(run_db, random.Random(seed ^ 0x5EED))
    assistant = Agent("assistant", POLICY, store.tools())
    customer = Agent("customer", request.persona())
    conversation = Conversation(_RESOURCES.base_url)

    def customer_sees(entry: Entry) -> bool:
        return entry.kind == "message" and bool(entry.text) and entry.speaker in ("assistant", "customer")

    goal = f"{request.intent} {request.order_id}" + (f" ({request.item_name})" if request.item_name else "")
    with task(f"support-{request.intent}", input=request.opening(), expected_output=goal):
        said = conversation.post("customer", request.opening())
        ended = ""
        for _ in range(MAX_CUSTOMER_TURNS):
            if STOP in said or TERMINATE_WORD in said:
                ended = said
                break
            reply = conversation.act(assistant)
            if TERMINATE_WORD in reply:
                ended = reply
                break
            said = conversation.act(customer, see=customer_sees)
        problems = []
        if TERMINATE_WORD in ended:
            problems.append("the conversation was ended (TERMINATE) before the request was handled")
        if not ended:
            problems.append(f"the conversation did not end within {MAX_CUSTOMER_TURNS} customer turns")
        if store.state() != expected:
            problems.append("the database does not end in the state the right action leaves")
        problems += policy_violations(conversation.entries)
        told = [e.text for e in conversation.entries if e.speaker == "assistant" and _DONE.search(e.text)]
        if request.intent != "address":
            refund = next((r for r in expected if len(r) == 4 and r[0] == request.order_id), None)
            if refund is not None and not any(f"${refund[1]:.2f}" in text for text in told):
                problems.append(f"the customer was not told the refund of ${refund[1]:.2f}")
        if told and request.order_id not in told[-1]:
            problems.append(f"the customer was told about another order than {request.order_id}")
        final = told[-1] if told else (said or "")
        right = not problems
        set_outcome(right, final_output=final, reason="; ".join(problems) or None)
        if not right:
            _declare_outage(conversation.entries)
    run_db.unlink(missing_ok=True)
    return right


def _declare_outage(entries: list[Entry]) -> None:
    """When the run ended on the order service failing twice in a row (the assistant then hands the
    customer over, as the policy says), that failure is its cause."""
    lookups = [e for e in entries if e.kind == "tool" and e.tool_name == "get_order_details"]
    streak: list[Entry] = []
    for entry in reversed(lookups):
        if not (entry.is_error and is_error_result(entry.text)):
            break
        streak.insert(0, entry)
    if len(streak) >= 2 and streak[0].step is not None:
        declare_dependency_failure(
            "assistant",
            streak[0].step,
            ORDER_SERVICE,
            f"the {ORDER_SERVICE} answered HTTP 503 on {len(streak)} lookups in a row",
        )


__all__ = ["FAULTS", "DeskScript", "draw_request", "run_task"]
