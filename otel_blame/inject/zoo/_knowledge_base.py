"""The supervisor app's local corpus: a fictional payments company's internal knowledge base.

Eight documents (SLO policy, incident postmortems, price list, capacity plan, on-call handbook),
several paragraphs each, written as such pages are. The figures in them (incident durations, SLO
targets, prices, traffic) are drawn from the run's seed, so every task has its own numbers and a
wrong one cannot be guessed from another run. :func:`search` is the retrieval tool's ranking: term
overlap between the query and each paragraph, the document's title counting twice.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

MINUTES_PER_WINDOW = 30 * 24 * 60  # the SLO policy's 30-day window
SERVICES = ("checkout-api", "ledger-sync", "notifications")
MONTHS = ("August", "September", "October", "November")


@dataclass(frozen=True)
class Document:
    doc_id: str
    title: str
    paragraphs: tuple[str, ...]


@dataclass(frozen=True)
class Incident:
    incident_id: str
    service: str
    title: str
    minutes: int
    cause: str
    customers: int


@dataclass
class Facts:
    """The seeded figures the documents state (the tasks' ground truth is computed from them)."""

    month: str
    slo: dict[str, float]
    incidents: list[Incident]
    seat_price: dict[str, int]
    included_calls: dict[str, int]
    overage_per_thousand: float
    peak_rps: int
    node_rps: int
    headroom: int
    page_minutes: int
    documents: list[Document] = field(default_factory=list)

    def budget_minutes(self, service: str) -> float:
        return round((1 - self.slo[service] / 100) * MINUTES_PER_WINDOW, 1)


_CAUSES = (
    (
        "Payment token refresh storm",
        "a certificate rotation invalidated every cached card-network token at once, and the refresh "
        "traffic exhausted the connection pool to the token vault",
    ),
    (
        "Stale feature flag after rollback",
        "a rollback restored the previous binary but not the flag store, so the old code read a flag "
        "value it did not understand and rejected every request with HTTP 500",
    ),
    (
        "Primary database failover stalled",
        "the primary Postgres node lost its disk and the failover waited on a replica that was "
        "fourteen minutes behind, so writes were refused until it caught up",
    ),
    (
        "DNS resolver saturation",
        "a retry loop in the fraud-scoring client multiplied DNS lookups by forty, and the cluster "
        "resolvers started dropping queries for internal names",
    ),
    (
        "Queue consumer deadlock",
        "two consumer groups took row locks in opposite order after a schema change, and the dispatch "
        "workers stopped making progress while still reporting healthy",
    ),
)


def draw_facts(rng: random.Random) -> Facts:
    month = rng.choice(MONTHS)
    slo = {
        "checkout-api": rng.choice((99.95, 99.9)),
        "ledger-sync": rng.choice((99.9, 99.5)),
        "notifications": rng.choice((99.5, 99.0)),
    }
    causes = rng.sample(_CAUSES, 4)
    numbers = rng.sample(range(4101, 4399), 4)
    services = ["checkout-api", "checkout-api", rng.choice(("checkout-api", "ledger-sync")), "notifications"]
    incidents = [
        Incident(
            incident_id=f"INC-{number}",
            service=service,
            title=title,
            minutes=rng.randint(7, 48),
            cause=cause,
            customers=rng.randint(3, 90) * 100,
        )
        for number, service, (title, cause) in zip(numbers, services, causes, strict=True)
    ]
    facts = Facts(
        month=month,
        slo=slo,
        incidents=incidents,
        seat_price={"Starter": rng.choice((15, 19, 24)), "Growth": rng.choice((39, 49, 59)), "Scale": 89},
        included_calls={
            "Starter": rng.choice((2000, 5000)),
            "Growth": rng.choice((10000, 20000, 25000)),
            "Scale": 50000,
        },
        overage_per_thousand=rng.choice((0.25, 0.4, 0.6)),
        peak_rps=rng.randrange(5200, 12800, 100),
        node_rps=rng.choice((800, 900, 1100, 1200, 1500)),
        headroom=rng.choice((25, 30, 40)),
        page_minutes=rng.choice((10, 15, 20)),
    )
    facts.documents = _documents(facts)
    return facts


def _documents(f: Facts) -> list[Document]:
    budgets = {service: f.budget_minutes(service) for service in SERVICES}
    docs = [
        Document(
            "slo-policy",
            "Service level objectives and error budgets",
            (
                "This policy sets the availability objective of every customer-facing service and the "
                "error budget that follows from it. Availability is measured by the synthetic checkout "
                "probe and by the ratio of successful requests at the edge; the lower of the two counts. "
                "Budgets are computed over a rolling 30-day window of 43200 minutes.",
                f"checkout-api has an availability objective of {f.slo['checkout-api']}%. The "
                f"checkout-api error budget is {budgets['checkout-api']} minutes of unavailability per "
                "30-day window. When half of the checkout-api error budget is spent, non-urgent deploys to "
                "the payment path are frozen.",
                f"ledger-sync has an availability objective of {f.slo['ledger-sync']}%. The ledger-sync "
                f"error budget is {budgets['ledger-sync']} minutes per 30-day window. ledger-sync may run "
                "degraded (delayed settlement files) without spending budget, as long as files land "
                "before 06:00 UTC.",
                f"notifications has an availability objective of {f.slo['notifications']}%. The "
                f"notifications error budget is {budgets['notifications']} minutes per 30-day window. "
                "Delayed e-mail receipts count as unavailable only after fifteen minutes of delay.",
                "A service that exhausts its error budget stops feature work until a reliability review "
                "signs off on the remediation items. Budget reports are posted every Monday in "
                "#reliability by the on-call lead.",
            ),
        ),
    ]
    for incident in f.incidents:
        started = 9 + int(incident.incident_id[-2:]) % 12
        docs.append(
            Document(
                f"postmortem-{incident.incident_id.lower()}",
                f"Postmortem {incident.incident_id}: {incident.title}",
                (
                    f"{incident.incident_id} affected {incident.service} on {f.month} "
                    f"{3 + int(incident.incident_id[-1]) * 2}, starting at {started}:{incident.minutes:02d} "
                    "UTC. "
                    f"About {incident.customers} customers saw errors. This postmortem is blameless; it "
                    "describes what the system did, not who did it.",
                    f"Impact: customers could not use {incident.service} for {incident.minutes} minutes "
                    f"during {incident.incident_id}, measured from the first failed synthetic probe to the "
                    "last. Internal dashboards showed elevated latency for a further ten minutes, which does "
                    "not count toward the impact.",
                    f"Root cause: {incident.cause}. The alert fired within two minutes, but the runbook "
                    "pointed at the wrong dashboard, which cost the responders time.",
                    "Follow-up actions: add a canary for the failure mode, correct the runbook link, and add "
                    "a load test of the recovery path to the weekly game day. Owners are tracked in the "
                    "reliability board.",
                ),
            )
        )
    docs += [
        Document(
            "price-list-2025",
            "Price list 2025: plans, seats and API usage",
            (
                "All plans are billed monthly per seat. A seat is a named user with access to the "
                "dashboard. API usage is pooled across the account: each seat adds its included calls to "
                "the account's monthly allowance.",
                f"The Starter plan costs ${f.seat_price['Starter']} per seat per month and includes "
                f"{f.included_calls['Starter']} API calls per seat. Starter accounts cannot exceed their "
                "allowance: calls beyond it are rejected with HTTP 429.",
                f"The Growth plan costs ${f.seat_price['Growth']} per seat per month and includes "
                f"{f.included_calls['Growth']} API calls per seat. Growth calls beyond the pooled allowance "
                f"are billed as overage at ${f.overage_per_thousand:.2f} per 1000 calls, prorated to the "
                "call.",
                f"The Scale plan costs ${f.seat_price['Scale']} per seat per month, includes "
                f"{f.included_calls['Scale']} API calls per seat and has a negotiated overage rate set in "
                "the customer's order form.",
                "Taxes are added at invoicing according to the customer's billing address and are not "
                "part of the prices above. Annual prepayment earns a discount agreed by the account team.",
            ),
        ),
        Document(
            "capacity-plan",
            "Capacity plan: ledger-sync",
            (
                "ledger-sync reconciles card-network settlement files against the internal ledger. Its "
                "load peaks in the first hour after the networks publish their files, around 02:00 UTC.",
                f"Last quarter's measured peak load of ledger-sync was {f.peak_rps} requests per second, "
                "reached on the last business day of the quarter.",
                f"Load tests show that each ledger-sync node sustains {f.node_rps} requests per second "
                "before its p99 latency passes the 800 ms objective. Nodes scale linearly up to forty.",
                f"Headroom policy: ledger-sync must be provisioned with {f.headroom}% headroom above the "
                "forecast peak, so that losing an availability zone does not breach the latency objective.",
                "Forecasts are reviewed at the start of each quarter with the finance team; node counts "
                "are always rounded up to a whole node.",
            ),
        ),
        Document(
            "oncall-handbook",
            "On-call handbook",
            (
                "Every customer-facing service has a primary and a secondary on-call engineer, rotating "
                "weekly on Mondays at 10:00 UTC. Hand-offs happen in the #oncall channel with a written "
                "summary of open incidents.",
                f"If the primary does not acknowledge a page within {f.page_minutes} minutes, the "
                "secondary is paged automatically. SEV1 incidents page the incident commander at once.",
                "Incident numbers are assigned by the incident bot when a channel is opened. A postmortem "
                "is due within five business days of any SEV1 or SEV2 incident.",
            ),
        ),
    ]
    return docs


# --- retrieval --------------------------------------------------------------------------------------

_TERM = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_STOP = frozenset("a an and the of in on for to is what how many much per by with its it".split())


def _terms(text: str) -> list[str]:
    return [t for t in _TERM.findall(text.lower()) if t not in _STOP]


@dataclass(frozen=True)
class Passage:
    doc_id: str
    title: str
    section: int
    text: str
    score: float


def search(documents: list[Document], query: str, top_k: int = 2) -> list[Passage]:
    """The ``top_k`` paragraphs sharing the most query terms (title terms count twice)."""
    wanted = set(_terms(query))
    if not wanted:
        return []
    scored = []
    for document in documents:
        title_terms = set(_terms(document.title))
        for number, paragraph in enumerate(document.paragraphs, 1):
            terms = set(_terms(paragraph))
            score = len(wanted & terms) + 2 * len(wanted & title_terms)
            if score:
                scored.append(Passage(document.doc_id, document.title, number, paragraph, float(score)))
    scored.sort(key=lambda p: (-p.score, p.doc_id, p.section))
    return scored[:top_k]
