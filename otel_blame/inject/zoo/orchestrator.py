"""An orchestrator with workers (the Magentic-One shape) on the plain instrumentation API.

The ``orchestrator`` writes a task ledger (facts given, facts to look up with the worker that
should find each, facts to derive), then loops: a progress ledger and one instruction per turn to
``web_surfer`` (web_search / visit_page / page_down over a local corpus of long company pages),
``file_surfer`` (open_file over a local file share) or, when the task needs arithmetic,
``coder`` (writes Python) and ``computer_terminal`` (runs it for real). The coder and the terminal
join only the runs whose task needs a computation. A worker that comes back without the fact makes
the orchestrator re-plan (a new query, another attempt); after too many stalls it gives up.

Every reply is computed by the scripted LLM from what the agent is shown: the orchestrator works
from its own ledger and the workers' reports, the web surfer from its instruction and the pages it
read, the coder from the inputs it was given. So a planted fault changes what follows: a wrong year
in a search finds last year's report, a fact dropped from the ledger is never looked up, a
truncated page loses the figure and the orchestrator re-plans (often recovering: the run is then
``masked``).
"""

from __future__ import annotations

import json
import math
import random
import re
from dataclasses import dataclass
from typing import Any

from otel_blame.demo.scripted_llm import Reply
from otel_blame.inject.faults import TERMINATE_WORD
from otel_blame.inject.zoo._agents import Agent, Conversation, Tool, ToolError, run_python
from otel_blame.inject.zoo._resources import AppResources, asking_agent

FAULTS: tuple[str, ...] = (
    "number",
    "drop_instruction",
    "contradict_instruction",
    "tool_error",
    "wrong_tool_result",
    "terminate",
    "wrong_tool_argument",
    "wrong_tool",
    "fabricated_fact",
    "premature_handoff",
    "lost_context",
)
VIEWPORT = 520  # characters of a page the browser shows at once
MAX_ATTEMPTS = 3  # per fact, before the orchestrator gives up
MAX_TURNS = 40  # orchestrator turns
WORKERS = ("web_surfer", "file_surfer", "coder")

# --- the corpus --------------------------------------------------------------------------------------

COMPANIES = (
    ("Norvale Energy", "NV", "Oslo"),
    ("Quillon Biotech", "QB", "Basel"),
    ("Harrowgate Logistics", "HL", "Leeds"),
    ("Tessaract Robotics", "TR", "Eindhoven"),
    ("Brightwell Foods", "BF", "Cork"),
    ("Caldera Mining", "CM", "Perth"),
)
YEARS = (2022, 2023)
FILLER = (
    "The board met eleven times during the year and reviewed the group's risk register at each meeting. "
    "Internal audit reported no material weaknesses, and the audit committee renewed the external "
    "auditor's mandate for a further three years.",
    "Our sustainability programme continued to expand. Scope 1 and 2 emissions fell again, helped by "
    "new supply contracts for renewable electricity at the largest sites, and the first suppliers "
    "signed the group's new code of conduct.",
    "Working capital was managed tightly. Inventory days decreased, receivables were collected faster "
    "than in the prior year, and the group kept an undrawn revolving credit facility as a reserve.",
    "Customers rated the service highly in the annual survey. The net promoter score rose, complaint "
    "volumes fell, and the customer service team moved to a single ticketing system across regions.",
    "Investment in people remained a priority. Every employee completed the mandatory safety "
    "training, the graduate programme welcomed a new cohort, and voluntary turnover stayed low.",
    "The outlook remains cautious. Management expects demand to stay firm in the core markets while "
    "input costs stay volatile, and will continue to prioritise cash generation and disciplined capital "
    "allocation.",
)


@dataclass(frozen=True)
class Company:
    name: str
    prefix: str
    city: str
    revenue: dict[int, float]  # million USD
    employees: dict[int, int]
    product: str
    launched: str  # ISO date of the flagship product's launch


def _companies() -> list[Company]:
    rng = random.Random(1729)
    out = []
    for name, prefix, city in COMPANIES:
        base = rng.randint(180, 900) + rng.choice((0.2, 0.4, 0.5, 0.7, 0.9))
        growth = rng.uniform(-0.08, 0.22)
        staff = rng.randint(900, 6000)
        out.append(
            Company(
                name,
                prefix,
                city,
                {2022: round(base, 1), 2023: round(base * (1 + growth), 1)},
                {2022: staff, 2023: round(staff * (1 + growth / 2))},
                f"{prefix}-{rng.randint(1000, 9999)}",
                f"2023-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
            )
        )
    return out


FX = {2022: 0.9497, 2023: 0.9248}  # USD -> EUR, yearly average


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def build_web(companies: list[Company]) -> dict[str, tuple[str, str]]:
    """url -> (title, page text): an annual report per company and year, and a product news page."""
    pages: dict[str, tuple[str, str]] = {}
    for number, company in enumerate(companies):
        for year in YEARS:
            paragraphs = [
                f"{company.name} annual report {year}. Headquartered in {company.city}, {company.name} "
                f"publishes this report for the financial year ending 31 December {year}.",
                *(FILLER[(number + year + k) % len(FILLER)] for k in range(5)),
                f"Financial highlights. In fiscal {year}, {company.name} reported revenue of "
                f"{company.revenue[year]} million USD, against "
                f"{company.revenue.get(year - 1, company.revenue[year])} "
                "million USD in the comparable period as restated.",
                *(FILLER[(number + year + k) % len(FILLER)] for k in range(5, 8)),
                f"People. At the end of {year} the group had {company.employees[year]:,} employees across "
                "its operating sites.",
                *(FILLER[(number + year + k) % len(FILLER)] for k in range(8, 10)),
            ]
            url = f"https://{_slug(company.name)}.example.com/investors/annual-report-{year}"
            pages[url] = (f"{company.name} | Annual report {year}", "\n\n".join(paragraphs))
            presentation = [
                f"{company.name} investor presentation {year}: strategy update for analysts and investors.",
                f"Revenue guidance for {year} was confirmed in the range the group gave at the "
                "start of the year, "
                "and management expects margins to improve as the new sites ramp up.",
                *(FILLER[(number + year + k + 2) % len(FILLER)] for k in range(3)),
                "Detailed figures for the year are published in the annual report, section "
                "Financial highlights.",
            ]
            url = f"https://{_slug(company.name)}.example.com/investors/presentation-{year}"
            pages[url] = (
                f"{company.name} investor presentation {year} annual results",
                "\n\n".join(presentation),
            )
        news = [
            f"{company.name} launches its new flagship product. {company.city}, press release.",
            *(FILLER[(number + k) % len(FILLER)] for k in range(3, 7)),
            f"The flagship product, the {company.product}, launched on {company.launched} after two years of "
            "development and field trials with early customers.",
            FILLER[(number + 1) % len(FILLER)],
        ]
        url = f"https://news.example.com/{_slug(company.name)}-flagship-launch"
        pages[url] = (f"{company.name} launches flagship product", "\n\n".join(news))
    return pages


def build_files() -> dict[str, str]:
    rows = ["year,base,quote,rate,source"]
    for year in (2019, 2020, 2021, *YEARS):
        for quote, rate in (
            ("EUR", FX.get(year, round(0.88 + (year - 2019) * 0.013, 4))),
            ("GBP", 0.79),
            ("JPY", 131.4),
        ):
            rows.append(f"{year},USD,{quote},{rate},yearly average of daily reference rates")
    return {
        "finance/fx_rates.csv": "\n".join(rows) + "\n",
        "finance/README.md": "Exchange rates used by the finance team. Rates are yearly "
        "averages; one USD buys "
        "`rate` units of the quote currency.\n",
    }


# --- tasks ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fact:
    description: str  # what the ledger calls it, e.g. "the 2023 revenue of Norvale Energy"
    worker: str  # web_surfer | file_surfer
    where: str  # the search query, or the file path


@dataclass(frozen=True)
class Task:
    question: str
    kind: str
    expected: str
    unit: str
    decimals: int = 1

    def is_right(self, answer: str) -> bool:
        if self.kind == "launch":
            return all(part in answer for part in self.expected.split(" and "))
        found = re.findall(r"-?\d[\d,]*\.?\d*", answer.split("FINAL ANSWER:")[-1])
        if not found:
            return False
        value = float(found[0].replace(",", ""))
        return math.isclose(value, float(self.expected), abs_tol=0.5 * 10**-self.decimals)


def _revenue(name: str, year: int) -> Fact:
    return Fact(f"the {year} revenue of {name}", "web_surfer", f"{name} annual report {year}")


def needs(kind: str, names: list[str], year: int) -> tuple[list[Fact], str | None]:
    """The facts a request of this kind needs and the formula over them (None: report the facts)."""
    if kind == "combined_eur":
        facts = [_revenue(name, year) for name in names]
        facts.append(Fact(f"the {year} USD to EUR rate", "file_surfer", "finance/fx_rates.csv"))
        total = " + ".join(_variable(f.description) for f in facts[:-1])
        return facts, f"combined = ({total}) * {_variable(facts[-1].description)}"
    if kind == "per_employee":
        facts = [
            fact
            for name in names
            for fact in (
                _revenue(name, year),
                Fact(f"the {year} headcount of {name}", "web_surfer", f"{name} annual report {year}"),
            )
        ]
        v = [_variable(f.description) for f in facts]
        return facts, f"difference = {v[0]} * 1000 / {v[1]} - {v[2]} * 1000 / {v[3]}"
    if kind == "growth":
        facts = [_revenue(name, y) for name in names for y in (year - 1, year)]
        v = [_variable(f.description) for f in facts]
        return facts, f"gap = ({v[1]} - {v[0]}) / {v[0]} * 100 - ({v[3]} - {v[2]}) / {v[2]} * 100"
    name = names[0]
    launch = f"{name} flagship launch"
    return [
        Fact(f"the flagship product code of {name}", "web_surfer", launch),
        Fact(f"the launch date of the {name} flagship product", "web_surfer", launch),
        _revenue(name, year),
    ], None


_QUESTIONS = (
    (
        "combined_eur",
        re.compile(r"combined (?P<year>\d+) revenue of (?P<a>.+?), (?P<b>.+?) and (?P<c>.+?) in million"),
    ),
    ("per_employee", re.compile(r"was (?P<a>.+?)'s revenue per employee than (?P<b>.+?)'s in (?P<year>\d+)")),
    ("growth", re.compile(r"did (?P<a>.+?)'s revenue growth from \d+ to (?P<year>\d+) exceed (?P<b>.+?)'s")),
    (
        "launch",
        re.compile(r"did (?P<a>.+?) launch most recently.*?company's (?P<year>\d+) revenue", re.DOTALL),
    ),
)


def draw_task(seed: int, companies: list[Company]) -> Task:
    rng = random.Random(seed)
    kind = rng.choice(("combined_eur", "per_employee", "growth", "launch"))
    first, second, third = rng.sample(companies, 3)
    year = rng.choice(YEARS)
    if kind == "combined_eur":
        value = (first.revenue[year] + second.revenue[year] + third.revenue[year]) * FX[year]
        return Task(
            f"What was the combined {year} revenue of {first.name}, {second.name} and "
            f"{third.name} in million "
            "EUR, converted at that year's average USD to EUR rate from the finance team's "
            "file? Round to one "
            "decimal.",
            kind,
            f"{round(value, 1)}",
            "million EUR",
        )
    if kind == "per_employee":
        value = (
            first.revenue[year] * 1000 / first.employees[year]
            - second.revenue[year] * 1000 / second.employees[year]
        )
        return Task(
            f"How much higher (or lower) was {first.name}'s revenue per employee than "
            f"{second.name}'s in {year}, "
            "in thousand USD, according to their annual reports? Round to one decimal.",
            kind,
            f"{round(value, 1)}",
            "thousand USD",
        )
    if kind == "growth":
        growth = [(c.revenue[2023] - c.revenue[2022]) / c.revenue[2022] * 100 for c in (first, second)]
        return Task(
            f"By how many percentage points did {first.name}'s revenue growth from 2022 to 2023 exceed "
            f"{second.name}'s, according to their annual reports? Round to one decimal.",
            kind,
            f"{round(growth[0] - growth[1], 1)}",
            "percentage points",
        )
    return Task(
        f"Which flagship product did {first.name} launch most recently, on which date, and what was the "
        "company's 2023 revenue in million USD? Give the product code, the ISO date and the figure.",
        kind,
        f"{first.product} and {first.launched} and {first.revenue[2023]}",
        "",
        0,
    )


# --- tools ---------------------------------------------------------------------------------------------


class Browser:
    """The web surfer's browser over the local corpus: search, open a page, scroll."""

    def __init__(self, pages: dict[str, tuple[str, str]], rng: random.Random) -> None:
        self.pages = pages
        self.url: str | None = None
        self.offset = 0
        self._rng = rng

    def web_search(self, query: str) -> str:
        words = set(re.findall(r"\w+", query.lower()))
        scored = []
        for url, (title, text) in self.pages.items():
            title_words = set(re.findall(r"\w+", title.lower()))
            score = 3 * len(words & title_words) + len(words & set(re.findall(r"\w+", text[:400].lower())))
            score += 8 * self._rng.random() if score else 0  # a search engine's ranking is not a fixed order
            scored.append((score, url, title, text))
        scored.sort(key=lambda item: (-item[0], item[1]))
        results = [
            {"title": title, "url": url, "snippet": text[:160].replace("\n", " ") + "..."}
            for score, url, title, text in scored[:4]
            if score > 0
        ]
        return json.dumps({"query": query, "results": results}, indent=2)

    def visit_page(self, url: str) -> str:
        if url not in self.pages:
            raise ToolError(f"HTTP 404 Not Found: {url}")
        self.url, self.offset = url, 0
        return self._viewport()

    def page_down(self) -> str:
        if self.url is None:
            raise ToolError("no page is open")
        self.offset += VIEWPORT
        return self._viewport()

    def _viewport(self) -> str:
        assert self.url is not None
        title, text = self.pages[self.url]
        end = min(len(text), self.offset + VIEWPORT)
        start = text.rfind("\n\n", 0, self.offset) + 2 if self.offset else 0
        shown = text[start:end]
        position = f"viewport {self.offset // VIEWPORT + 1} of {math.ceil(len(text) / VIEWPORT)}"
        more = "[more below: page_down]" if end < len(text) else "[end of page]"
        return f"Address: {self.url}\nTitle: {title}\n({position})\n\n{shown}\n\n{more}"

    def tools(self) -> tuple[Tool, ...]:
        return (
            Tool("web_search", "Search the web.", {"query": "string"}, self.web_search),
            Tool("visit_page", "Open a page by URL.", {"url": "string"}, self.visit_page),
            Tool("page_down", "Scroll the open page down.", {}, self.page_down),
        )


class FileShare:
    def __init__(self, files: dict[str, str]) -> None:
        self.files = files

    def open_file(self, path: str) -> str:
        if path not in self.files:
            known = ", ".join(sorted(self.files))
            raise ToolError(f"FileNotFoundError: {path!r} (the share has: {known})")
        return f"File: {path}\n\n{self.files[path]}"

    def tools(self) -> tuple[Tool, ...]:
        return (Tool("open_file", "Open a file of the share.", {"path": "string"}, self.open_file),)


# --- the agents' scripted minds -------------------------------------------------------------------------

_FACT_LINE = re.compile(
    r"^\s*(\d+)[.)]\s+(?P<description>.+?) \((?P<worker>\w+): (?P<where>[^)]+)\)\.?\s*$", re.MULTILINE
)
_DERIVE_LINE = re.compile(r"^\s*(\d+)[.)]\s+Compute (?P<formula>\w+ = .+?) \(coder\)\.?\s*$", re.MULTILINE)
_VALUE = r" is ([A-Z]{2}-\d{4}|\d{4}-\d{2}-\d{2}|-?[\d,]+(?:\.\d+)?)"
_URL = re.compile(r'"url": "([^"]+)"')
_RESULT = re.compile(r"Result:\s*(-?\d+(?:\.\d+)?)")
_PATTERNS = {
    "revenue": r"In fiscal {year}, [^.]*? reported revenue of ([\d,]+(?:\.\d+)?) million USD",
    "headcount": r"At the end of {year} the group had ([\d,]+) employees",
    "product code": r"the ([A-Z]{2}-\d{4})",
    "launch date": r"launched on (\d{4}-\d{2}-\d{2})",
    "USD to EUR rate": r"^{year},USD,EUR,([\d.]+)",
}


def _texts(messages: list[dict[str, Any]], name: str) -> list[str]:
    return [str(m.get("content") or "") for m in messages if m.get("name") == name and m.get("content")]


def _ledger(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, str]], str | None]:
    """The orchestrator's latest task ledger: (its text, facts to look up, formula to derive)."""
    ledger = next((t for t in reversed(_texts(messages, "orchestrator")) if "Facts to look up" in t), "")
    facts = [m.groupdict() for m in _FACT_LINE.finditer(ledger)]
    derive = _DERIVE_LINE.search(ledger)
    return ledger, facts, derive.group("formula") if derive else None


def _sentence(description: str) -> str:
    """How a worker states a fact: "The 2023 revenue of X" for "the 2023 revenue of X"."""
    return description[:1].upper() + description[1:]


def _known(messages: list[dict[str, Any]], facts: list[dict[str, str]]) -> dict[str, str]:
    """Fact description (lower case) -> the value a worker reported for it (the latest report)."""
    reports = [t for name in ("web_surfer", "file_surfer") for t in _texts(messages, name)]
    known: dict[str, str] = {}
    for fact in facts:
        pattern = re.compile(re.escape(_sentence(fact["description"])) + _VALUE)
        for text in reports:
            match = pattern.search(text)
            if match is not None:
                known[fact["description"].lower()] = match.group(1).replace(",", "")
    return known


def _variable(description: str) -> str:
    """A Python name for a fact: its words, then its year ("revenue_brightwell_foods_2023")."""
    words = [w for w in re.findall(r"[a-z]+", description.lower()) if w not in ("the", "of", "to")]
    years = re.findall(r"\d{4}", description)
    return "_".join(words + years)[:48]


_VERIFIED = re.compile(r"^- (?P<description>.+?): (?P<value>\S+) \(source: ", re.MULTILINE)


def _verified(messages: list[dict[str, Any]]) -> dict[str, str]:
    """The facts the orchestrator's latest ledger update lists as verified."""
    update = next((t for t in reversed(_texts(messages, "orchestrator")) if "Verified facts:" in t), "")
    return {m.group("description").lower(): m.group("value") for m in _VERIFIED.finditer(update)}


def _source_of(messages: list[dict[str, Any]], description: str) -> str:
    sentence = _sentence(description)
    for text in reversed([t for n in ("web_surfer", "file_surfer") for t in _texts(messages, n)]):
        if sentence in text:
            found = re.search(r"I found it in (\S+?)\. ", text)
            return found.group(1) if found else "the worker's report"
    return "the worker's report"


def orchestrator_reply(messages: list[dict[str, Any]], question: str) -> Reply:
    ledger, facts, formula = _ledger(messages)
    if not ledger:
        return Reply(_task_ledger(question))
    reported = _known(messages, facts)
    known = _verified(messages)
    instructions = [t for t in _texts(messages, "orchestrator") if "Progress ledger" in t]
    fresh = [
        f for f in facts if f["description"].lower() in reported and f["description"].lower() not in known
    ]
    if fresh and messages[-1].get("name") in ("web_surfer", "file_surfer"):
        merged = {f["description"].lower(): f["description"] for f in facts}
        values = {**known, **{f["description"].lower(): reported[f["description"].lower()] for f in fresh}}
        listing = "\n".join(
            f"- {merged.get(d, d)}: {v} (source: {_source_of(messages, merged.get(d, d))})"
            for d, v in values.items()
        )
        left = [f["description"] for f in facts if f["description"].lower() not in values]
        todo = f"Still to find: {'; '.join(left)}." if left else "Every fact to look up is now verified."
        return Reply(
            f"Ledger update. The {fresh[0]['worker'].replace('_', ' ')} reported "
            f"{fresh[0]['description']} and "
            f"quoted its source, which matches the request.\nVerified facts:\n{listing}\n{todo}"
        )
    for fact in facts:
        description = fact["description"].lower()
        if description in known:
            continue
        attempts = sum(1 for text in instructions if f"find {fact['description']}" in text)
        if attempts >= MAX_ATTEMPTS:
            return Reply(
                f"I have asked {attempts} times for {fact['description']} without getting it, so I cannot "
                "answer reliably. FINAL ANSWER: unknown. TERMINATE"
            )
        return Reply(_instruction(fact, attempts))
    if formula is None:
        values = [known[f["description"].lower()] for f in facts]
        return Reply(
            "Every fact in the ledger is now confirmed by a source the workers read. "
            f"FINAL ANSWER: {' and '.join(values)}. TERMINATE"
        )
    terminal = [str(m.get("content") or "") for m in messages if m.get("name") == "computer_terminal"]
    result = _RESULT.search(terminal[-1]) if terminal else None
    if result is not None:
        return Reply(
            f"The computer terminal ran the coder's program and printed {result.group(1)}. The "
            "inputs came from "
            f"the sources in the ledger. FINAL ANSWER: {result.group(1)}. TERMINATE"
        )
    asked = sum(1 for text in instructions if "coder, please" in text)
    if asked >= MAX_ATTEMPTS:
        return Reply("The computation keeps failing, so I cannot answer. FINAL ANSWER: unknown. TERMINATE")
    inputs = "\n".join(
        f"- {_variable(f['description'])} = {known[f['description'].lower()]}  # {f['description']}"
        for f in facts
    )
    target = formula.split("=")[0].strip()
    return Reply(
        "Progress ledger:\n"
        + json.dumps(
            {
                "is_request_satisfied": False,
                "is_in_loop": asked > 0,
                "is_progress_being_made": True,
                "next_speaker": "coder",
            }
        )
        + f"\ncoder, please write a Python program that computes {formula} from these inputs:\n{inputs}\n"
        f"Print the result as 'Result: <{target}>' rounded to one decimal."
    )


def _task_ledger(question: str) -> str:
    facts, formula = _plan_facts(question)
    lines = [f"{n}. {f.description} ({f.worker}: {f.where})." for n, f in enumerate(facts, 1)]
    if formula:
        lines.append(f"{len(facts) + 1}. Compute {formula} (coder).")
    given = re.findall(r"\b(?:19|20)\d\d\b", question)
    return (
        "Task ledger\n"
        f"Facts given: the request names the year(s) {', '.join(sorted(set(given))) or 'none'} "
        "and the companies.\n"
        "Facts to look up:\n" + "\n".join(lines) + "\n"
        "Educated guesses: annual reports state revenue in million USD; the finance team's rates are in "
        "finance/fx_rates.csv.\n"
        "Plan: ask the web surfer and the file surfer for each fact in turn, check each answer against its "
        "source, then have the coder compute the result and the computer terminal run it."
    )


def _plan_facts(question: str) -> tuple[list[Fact], str | None]:
    """What the request needs, read from its wording (the orchestrator's first planning step)."""
    for kind, pattern in _QUESTIONS:
        found = pattern.search(question)
        if found is not None:
            names = [found.group(key) for key in ("a", "b", "c") if key in pattern.groupindex]
            return needs(kind, names, int(found.group("year")))
    return [], None


def _instruction(fact: dict[str, str], attempts: int) -> str:
    worker, where, description = fact["worker"], fact["where"], fact["description"]
    if worker == "file_surfer":
        how = f"Open the file {where} and read the row that gives it."
    else:
        query = (
            where if attempts == 0 else f"{where} {'report' if attempts == 1 else 'press release'}".strip()
        )
        how = f'Search the web for "{query}" and read the best result until you find it.'
    ledger = {
        "is_request_satisfied": False,
        "is_in_loop": attempts > 0,
        "is_progress_being_made": attempts == 0,
        "next_speaker": worker,
    }
    replan = (
        f"The last attempt did not give {description}, so I am updating the plan and trying again. "
        if attempts
        else ""
    )
    return (
        f"Progress ledger:\n{json.dumps(ledger)}\n{replan}{worker}, please find {description}. {how} "
        f"Report it as a sentence of the form '{_sentence(description)} is <value>.', and quote "
        "the line of the "
        "source that states it."
    )


def _instruction_for(messages: list[dict[str, Any]], worker: str) -> str:
    text = next((t for t in reversed(_texts(messages, "orchestrator")) if f"{worker}, please" in t), "")
    return text


def _pattern_for(description: str) -> str | None:
    for key, pattern in _PATTERNS.items():
        if key in description:
            year = re.search(r"\b(20\d\d)\b", description)
            return pattern.replace("{year}", year.group(1) if year else r"\d{4}")
    return None


def _since_instruction(messages: list[dict[str, Any]], worker: str) -> list[dict[str, Any]]:
    last = max(
        (
            i
            for i, m in enumerate(messages)
            if m.get("name") == "orchestrator" and f"{worker}, please" in str(m.get("content") or "")
        ),
        default=-1,
    )
    return messages[last + 1 :]


def surfer_reply(messages: list[dict[str, Any]], worker: str) -> Reply:
    instruction = _instruction_for(messages, worker)
    found = re.search(r"please find (?P<description>.+?)\. ", instruction)
    if found is None:
        return Reply("I did not receive a clear instruction, so I have nothing to report yet.")
    description = found.group("description")
    pattern = _pattern_for(description)
    since = _since_instruction(messages, worker)
    results = [m for m in since if m.get("role") == "tool"]
    calls = [c["function"] for m in since for c in (m.get("tool_calls") or [])]
    for result in reversed(results):
        content = str(result.get("content") or "")
        value = re.search(pattern, content, re.MULTILINE) if pattern else None
        if value is not None:
            line = next((ln for ln in content.splitlines() if value.group(0) in ln), value.group(0))
            source = re.search(r"^(?:Address|File): (\S+)", content, re.MULTILINE)
            return Reply(
                f"I found it in {source.group(1) if source else 'the source'}. The source says: "
                f'"{line.strip()[:220]}" '
                f"{_sentence(description)} is {value.group(1)}."
            )
        break
    if worker == "file_surfer":
        path = re.search(r"Open the file (\S+?) and", instruction)
        if not calls:
            return Reply(
                "", tool_calls=[{"name": "open_file", "arguments": {"path": path.group(1) if path else ""}}]
            )
        return Reply(f"I opened the file but could not find {description} in it. The row may be missing.")
    query = re.search(r'Search the web for "([^"]+)"', instruction)
    if not calls:
        return Reply(
            "",
            tool_calls=[
                {"name": "web_search", "arguments": {"query": query.group(1) if query else description}}
            ],
        )
    last = str(results[-1].get("content") or "") if results else ""
    if "[more below: page_down]" in last:
        return Reply("", tool_calls=[{"name": "page_down", "arguments": {}}])
    searches = [str(m.get("content") or "") for m in results if '"results"' in str(m.get("content") or "")]
    visited = [u for c in calls if c["name"] == "visit_page" for u in _URL.findall(c.get("arguments") or "")]
    # read the result list as text: a result cut short still shows the addresses it got to
    listed = _URL.findall(searches[-1]) if searches else []
    remaining = [url for url in listed[:3] if url not in visited]
    if remaining:
        return Reply("", tool_calls=[{"name": "visit_page", "arguments": {"url": remaining[0]}}])
    return Reply(
        f"I searched and read {len(visited)} page(s) to the end, but none of them states {description}. "
        "The figure may be on another page."
    )


def coder_reply(messages: list[dict[str, Any]]) -> Reply:
    instruction = _instruction_for(messages, "coder")
    formula = re.search(r"computes (\w+) = (.+?) from these inputs", instruction)
    if formula is None:
        return Reply("I do not see a computation to implement.")
    inputs = re.findall(r"^- (\w+) = ([-\w.]+)", instruction, re.MULTILINE)
    body = "\n".join(f"{name} = {value}" for name, value in inputs)
    code = (
        f'{body}\n{formula.group(1)} = {formula.group(2)}\nprint(f"Result: {{round({formula.group(1)}, 1)}}")'
    )
    return Reply(f"Here is the program; the computer terminal can run it.\n```python\n{code}\n```")


class OrchestraScript:
    def __call__(self, request: dict[str, Any]) -> Reply:
        agent = asking_agent(request)
        messages = [m for m in request.get("messages", []) if m.get("role") != "system"]
        if agent == "orchestrator":
            question = str(messages[0].get("content") or "") if messages else ""
            return orchestrator_reply(messages, question)
        if agent in ("web_surfer", "file_surfer"):
            return surfer_reply(messages, agent)
        if agent == "coder":
            return coder_reply(messages)
        return Reply("I have nothing to add.")


# --- the app -------------------------------------------------------------------------------------------

_RESOURCES = AppResources(OrchestraScript(), prefix="otel-blame-zoo-orchestra-")
_COMPANIES = _companies()
_WEB = build_web(_COMPANIES)
_FILES = build_files()
_CODE = re.compile(r"```(?:python)?\n(.*?)```", re.DOTALL)


def run_task(seed: int = 0) -> bool:
    """One research task (drawn from ``seed``) through the orchestrator and its workers."""
    from otel_blame.instrumentation import set_outcome, task

    _RESOURCES.forget_requests()
    chosen = draw_task(seed, _COMPANIES)
    rng = random.Random(seed)
    browser = Browser(_WEB, rng)
    files = FileShare(_FILES)
    orchestrator = Agent(
        "orchestrator", "You lead a team of agents: keep the task ledger and direct the workers."
    )
    agents = {
        "web_surfer": Agent("web_surfer", "You browse the web with your tools.", browser.tools()),
        "file_surfer": Agent("file_surfer", "You read files of the local share.", files.tools()),
        "coder": Agent("coder", "You write Python programs that the computer terminal runs."),
    }
    conversation = Conversation(_RESOURCES.base_url)
    expected = f"{chosen.expected} {chosen.unit}".strip()
    with task(f"research-{chosen.kind}", input=chosen.question, expected_output=expected):
        conversation.post("user", chosen.question)
        answer = ""
        for _ in range(MAX_TURNS):
            said = conversation.act(orchestrator)
            if TERMINATE_WORD in said:
                answer = said
                break
            speaker = next((w for w in WORKERS if f"{w}, please" in said), None)
            if speaker is None:
                continue
            reply = conversation.act(agents[speaker], max_tool_calls=16)
            if speaker == "coder":
                code = _CODE.search(reply)
                if code is not None:
                    output, failed = run_python(code.group(1))
                    conversation.post("computer_terminal", output, kind="code_execution", is_error=failed)
        final = answer.split("FINAL ANSWER:")[-1].replace(TERMINATE_WORD, "").strip(" .\n") if answer else ""
        right = bool(answer) and "FINAL ANSWER:" in answer and chosen.is_right(answer)
        reason = None if right else f"expected {expected}, got {final or 'no answer'}"
        set_outcome(right, final_output=final, reason=reason)
    return right


__all__ = ["FAULTS", "OrchestraScript", "draw_task", "run_task"]
