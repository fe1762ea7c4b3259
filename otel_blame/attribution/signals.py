"""The offline heuristic's failure signals: named objects, each with a weight in ``Weights`` and a
docstring saying what it looks for and why.

A :class:`ScoringContext` is built once per trajectory (the windows of text the signals read, the
authored steps, the coordinator, the final answer's distinctive tokens); every signal then reads it
and returns its *evidence*: a strength per suspect step, unweighted. The heuristic's score of a step
is the weighted sum of the evidence, so weights can be refit (under cross-validation, see
``otel_blame.training.crossval``) without re-reading the run.

Nothing here knows agent names, role strings or step positions from any benchmark: agents are told
apart only by who wrote which step, and structure (who directs whom, who answers whom) is read from
the run itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from otel_blame.trajectory import Step, StepKind, Trajectory

_LEADING_BOUNDARY = re.compile(r"\\b([a-z0-9])(?![?*+{])")


def _literal_first(pattern: str) -> str:
    """The same regex with each ``\\bx`` (a word boundary before a literal word character) written as
    ``x(?<!\\wx)``: equivalent, but alternatives that open with a literal let the regex engine skip
    ahead to the characters that can start a match instead of trying every position (about 8x faster
    on long text for the error pattern)."""
    return _LEADING_BOUNDARY.sub(r"\1(?<!\\w\1)", pattern)


class _Pattern:
    """A case-insensitive regex behind a cheap literal prefilter: the regex (slow on long text, many
    alternatives) only runs when the lower-cased text holds one of ``keys``, and it runs on the
    lower-cased text (a case-sensitive regex is several times faster than an IGNORECASE one).

    Each plain test costs a scan of the text: keys that share a ``gate`` (a part of each) are only
    tested where the gate is, so a text holding none of the keys is scanned once per gate."""

    def __init__(self, pattern: str, keys: tuple[str, ...], gates: tuple[str, ...] = ()) -> None:
        self.regex = re.compile(_literal_first(pattern.lower()))
        self.keys = keys
        self._ungated = tuple(key for key in keys if not any(gate in key for gate in gates))
        self._gated = tuple((gate, tuple(key for key in keys if gate in key)) for gate in gates)

    def _may_match(self, lower: str) -> bool:
        if any(map(lower.__contains__, self._ungated)):
            return True
        return any(gate in lower and any(map(lower.__contains__, keys)) for gate, keys in self._gated)

    def count(self, text: str, lower: str) -> int:
        return len(self.regex.findall(lower)) if self._may_match(lower) else 0

    def search(self, text: str, lower: str) -> bool:
        return self._may_match(lower) and self.regex.search(lower) is not None


_ERROR = _Pattern(
    r"traceback \(most recent call last\)|error:|\bexception\b|execution failed|exit ?code:? ?[1-9]"
    r"|\bfailed to\b|\bnot found\b|\b40[134]\b|\b50[023]\b|\bunable to\b|\bcould not\b|\bcannot\b"
    r"|\bno results?\b|\bnone\b|\bnan\b|\bempty\b",
    keys=(
        "traceback",
        "error",
        "exception",
        "fail",
        "exit",
        "not found",
        "40",
        "50",
        "unable to",
        "could not",
        "cannot",
        "no result",
        "none",
        "nan",
        "empty",
    ),
)
_HARD_ERROR = _Pattern(
    r"traceback \(most recent call last\)|execution failed|exit ?code:? ?[1-9]|[a-z]error:|[a-z]exception:",
    keys=("traceback", "execution failed", "exit", "error:", "exception:"),
)
_FABRICATION = _Pattern(
    r"\blet'?s assume\b|\bassum(?:e|ing|ption)\b|\bhypothetical\w*\b|\bplaceholder\b|\bdummy\b|\bmock\w*\b"
    r"|\bsimulat\w+\b|\bfor (?:the sake of|illustration|demonstration)\b|\bexample (?:data|values?)\b"
    r"|\bsample data\b|\bfictional\b|\bmade[- ]up\b|\bI (?:don't|do not|cannot|can't) (?:have )?access\b"
    r"|\bbased on (?:my|general|common|prior) knowledge\b|\bfrom memory\b"
    r"|\breplace (?:this|with) (?:the )?actual\b|\byour[_ ](?:api[_ ]key|file|path)\b|\bpath/to/\b",
    keys=(
        "assum",
        "hypothetical",
        "placeholder",
        "dummy",
        "mock",
        "simulat",
        "for the sake of",
        "for illustration",
        "for demonstration",
        "example data",
        "example value",
        "sample data",
        "fictional",
        "made up",
        "made-up",
        "not access",
        "n't access",
        "have access",
        "my knowledge",
        "general knowledge",
        "common knowledge",
        "prior knowledge",
        "from memory",
        "replace this",
        "replace with",
        "your_api",
        "your_file",
        "your_path",
        "your api",
        "your file",
        "your path",
        "path/to/",
    ),
    gates=(" access", " knowledge", "your", "made", "example ", "replace "),
)
_HEDGING = _Pattern(
    r"\btypically\b|\bapproximately\b|\bestimat\w+\b|\bplausible\b|\blikely\b|\bprobably\b"
    r"|\bI (?:believe|think)\b|\bshould be\b",
    keys=(
        "typically",
        "approximately",
        "estimat",
        "plausible",
        "likely",
        "probably",
        "i believe",
        "i think",
        "should be",
    ),
)
_CODE_FENCE = re.compile(r"```.*?(?:```|$)", re.DOTALL)
_APPROVAL = _Pattern(
    r"(?:\bverified|\bconfirm(?:ed|s)?|\bvalidated|\bis correct|\bare correct|\blooks correct"
    r"|\baccurate(?:ly)?|\beverything (?:is|looks) (?:correct|fine|good)|\bI agree|\bagreed)\b",
    keys=(
        "verified",
        "confirm",
        "validated",
        "is correct",
        "are correct",
        "looks correct",
        "accurate",
        "everything is",
        "everything looks",
        "i agree",
        "agreed",
    ),
)
_STUCK = _Pattern(
    r"\"is_progress_being_made\":\s*\{[^}]*\"answer\":\s*false|\"is_in_loop\":\s*\{[^}]*\"answer\":\s*true"
    r"|\bnot making progress\b|\bno progress\b|\bstalled\b|\bin a loop\b",
    keys=("is_progress_being_made", "is_in_loop", "progress", "stalled", "in a loop"),
)
_TERMINATE_ONLY = re.compile(r"^\W*(?:terminate|exit|done|ok(?:ay)?|thanks?(?: you)?)\W*$", re.IGNORECASE)
_CODE_BLOCK = re.compile(r"```")
_ANSWER_MARKER = re.compile(  # run on lower-cased text: several times faster than IGNORECASE
    r"(?:final answer|the answer is|answer:|result is|therefore,? the|thus,? the|so,? the|is:)\s*(.{1,160})"
)
# every match of _ANSWER_MARKER holds one of these: plain tests rule out most steps before the regex
_ANSWER_MARKER_KEYS = ("answer", "is:", "result is", "therefore", "thus", "so the", "so, the")
_NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?![\w])")
_BOLD = re.compile(r"\*\*([^*\n]{1,80})\*\*")
_UNSATISFIED_PATTERN = (
    r"\bnot (?:yet )?(?:been )?(?:fully )?"
    r"(?:satisfied|found|identified|obtained|provided|confirmed|retrieved)\b"
    r"|\bstill need\b|\bdid not (?:provide|find|return|show|include)\b|\bdoes not (?:provide|show|include)\b"
    r"|\bno (?:relevant|specific|useful) (?:information|results?|data)\b|\bunable to\b|\bfailed to\b"
)
_UNSATISFIED = re.compile(_UNSATISFIED_PATTERN, re.IGNORECASE)
# the same for ASCII text (twice as fast: ASCII word boundaries and case folds are table look-ups)
_ASCII_UNSATISFIED = re.compile(_UNSATISFIED_PATTERN, re.IGNORECASE | re.ASCII)
_ROUTING = re.compile(r"^\s*next speaker\b", re.IGNORECASE)


SCAN_HEAD_CHARS = 3000
SCAN_TAIL_CHARS = 1000
# A step longer than this mostly relays a page, a file or a tool's output; the author's own words in it
# (what the language signals read) are its opening.
DUMP_CHARS = 4000
OWN_WORDS_CHARS = 1000


def _window(text: str) -> str:
    """What the signals read of a step: all of it, or head and tail of a very long one (web pages,
    file dumps), so the cost per step is bounded."""
    if len(text) <= SCAN_HEAD_CHARS + SCAN_TAIL_CHARS:
        return text
    return text[:SCAN_HEAD_CHARS] + "\n" + text[-SCAN_TAIL_CHARS:]


def _normalise(text: str) -> str:
    """Lower-cased, with each run of whitespace one space and none at the ends."""
    return " ".join(text.split()).lower()


def _is_task_statement(step: Step, trajectory: Trajectory) -> bool:
    """The request that started the run is not a suspect: a first step that opens with the task text."""
    if step.index != 0:
        return False
    task = _normalise(trajectory.task.input or "")
    if not task:
        return False
    return _normalise(step.content[: len(task) + 400]).startswith(task[:60])


def _is_actor(step: Step, trajectory: Trajectory) -> bool:
    """Steps an agent authored with something in them: suspects. Tool/code results are not."""
    if step.kind != StepKind.MESSAGE:
        return False
    content = step.content.strip()
    if not content or _TERMINATE_ONLY.match(content) or _ROUTING.match(content):
        return False
    return not _is_task_statement(step, trajectory)


def _author_of(steps: list[Step], result: Step, actors: frozenset[int] | set[int]) -> int | None:
    """The step that produced a tool/code result: the closest earlier authored step, preferring code."""
    fallback = None
    for index in range(result.index - 1, -1, -1):
        if index not in actors:
            continue
        if _CODE_BLOCK.search(steps[index].content):
            return index
        if fallback is None:
            fallback = index
        if result.index - index > 3:
            break
    return fallback


def _answer_tokens(text: str) -> set[str]:
    """The distinctive bits of a final answer: numbers and bolded phrases."""
    tokens = {match.replace(",", "") for match in _NUMBER.findall(text)}
    tokens |= {_normalise(match) for match in _BOLD.findall(text)}
    return {token for token in tokens if len(token) >= 2 and token not in {"10", "20", "00"}}


_STATED_ANSWER = re.compile(r"final answer\s*:\s*([^\n]{1,200})", re.IGNORECASE)
_ANSWER_WORD = re.compile(r"[^\W\d_][\w'-]{2,}")


def _stated_answer(steps: list[Step]) -> tuple[str, int] | None:
    """An answer the run states as such ("FINAL ANSWER: ..." in one of its last steps), and where."""
    for step in reversed(steps[-3:]):
        tail = step.content[-2000:]
        if "final answer" not in tail.lower():
            continue
        found = _STATED_ANSWER.findall(tail)
        if found and found[-1].strip():
            return found[-1].strip(), step.index
    return None


def _stated_answer_tokens(answer: str, task: str) -> set[str]:
    """The distinctive bits of a stated answer: its numbers, and its words (three letters or more)
    that the task does not already contain, so a name or title the run came up with can be traced to
    the step it first appeared in."""
    task_lower = task.lower()
    tokens = _answer_tokens(answer)
    tokens |= {
        word.lower()
        for word in _ANSWER_WORD.findall(answer)
        if word.lower() not in task_lower and word.lower() not in _STOPWORDS and word.lower() != "the"
    }
    return {token for token in tokens if token not in task_lower}


def _final_answer(trajectory: Trajectory, actors: list[int], lowers: list[str]) -> str:
    """The run's final answer (lower-cased where read from the log: only its numbers and bolded
    phrases are used, lower-cased anyway)."""
    if trajectory.task.final_output:
        return trajectory.task.final_output
    for index in reversed(actors[-3:]):
        lower = lowers[index]
        marked = any(map(lower.__contains__, _ANSWER_MARKER_KEYS)) and _ANSWER_MARKER.findall(lower)
        if marked:
            return marked[-1]
    return trajectory.steps[actors[-1]].content[-400:] if actors else ""


def _coordinator(trajectory: Trajectory, actors: list[int]) -> str | None:
    """The agent that directs the others, if any: it writes many steps and names other agents in them.

    Found from the run itself (who mentions whom), so it works whatever the agents are called.
    """
    agents = trajectory.agents
    if len(agents) < 2 or not actors:
        return None
    by_agent: dict[str, list[Step]] = {}
    for index in actors:
        by_agent.setdefault(trajectory.steps[index].agent, []).append(trajectory.steps[index])
    best, best_share = None, 0.0
    for agent, authored in by_agent.items():
        others = [other for other in agents if other != agent and len(other) >= 3]
        if not others or len(authored) < 5:
            continue
        mentioning = sum(1 for step in authored if any(map(step.content.__contains__, others)))
        share = mentioning / len(authored)
        if share > best_share:
            best, best_share = agent, share
    if best is None or best_share < 0.35 or len(by_agent[best]) < 0.6 * len(actors) or len(by_agent) < 2:
        return None
    return best


_CORRECTION = _Pattern(
    r"(?:\bincorrect|\bwrong|\bmistake|\bmistaken|\bdiscrepanc\w*|\binconsisten\w*|\bnot accurate"
    r"|\binaccurate|\bdoes(?: not|n't) match|\bcontradict\w*|\bnot correct|\berroneous|\bmiscalculat\w*"
    r"|\boverlooked)\b",
    keys=(
        "incorrect",
        "wrong",
        "mistake",
        "discrepanc",
        "inconsisten",
        "accurate",
        "match",
        "contradict",
        "not correct",
        "erroneous",
        "miscalculat",
        "overlooked",
    ),
)
_QUOTED = re.compile(r"[\"“']([^\"”'\n]{3,60})[\"”']")
_WORD = re.compile(r"[a-z][a-z0-9'-]{3,}")
_STOPWORDS = frozenset(
    "that this with from have what which when where there their they them then than into about would "
    "could should will your been were also more most some such only other each these those does done "
    "please find provide make sure using used based need needs task request answer question information "
    "given following first second next step steps here very just like many much".split()
)
_PLAN = re.compile(r"\bplan\b|^\s*(?:1\.|-|\*)\s", re.IGNORECASE | re.MULTILINE)


def words_in(text: str) -> list[str]:
    """Lower-cased words of four letters or more, stopwords included (what ``content_words`` filters)."""
    return _WORD.findall(text.lower())


def content_words(text: str) -> set[str]:
    """Lower-cased words of four letters or more that say what a text is about (no stopwords)."""
    return {word for word in words_in(text) if word not in _STOPWORDS}


def task_requirements(task: str) -> set[str]:
    """What the task names that a plan must carry: its numbers and quoted phrases (plans paraphrase
    the task's words, so plain words say little about what was skipped)."""
    numbers = {match.replace(",", "") for match in _NUMBER.findall(task)}
    quoted = {_normalise(match) for match in _QUOTED.findall(task)}
    return {token for token in numbers | quoted if len(token) >= 1}


@dataclass
class ScoringContext:
    """Everything the signals read about one trajectory, computed once.

    ``actors`` are the suspects: steps an agent authored with something in them (not tool or code
    output, not the task statement, not a bare "TERMINATE" or routing line), in order.
    """

    trajectory: Trajectory
    steps: list[Step]
    texts: list[str]
    lowers: list[str]
    actors: list[int]
    actor_set: frozenset[int]
    order: dict[int, int]
    coordinator: str | None
    workers: list[int]
    worker_rank: dict[int, int]
    answer_tokens: set[str]
    task_text: str
    answer_step: int | None = None
    _failed: dict[int, bool] | None = None
    _prose: dict[int, tuple[str, str]] | None = None
    _full_lowers: dict[int, str] | None = None

    @classmethod
    def build(cls, trajectory: Trajectory, *, with_ground_truth: bool = False) -> ScoringContext:
        steps = trajectory.steps
        texts = [_window(step.content) for step in steps]
        lowers = [text.lower() for text in texts]
        actors = [step.index for step in steps if _is_actor(step, trajectory)]
        if not actors:
            actors = [step.index for step in steps if step.kind == StepKind.MESSAGE] or [steps[0].index]
        coordinator = _coordinator(trajectory, actors)
        workers = [index for index in actors if steps[index].agent != coordinator]
        task_text = trajectory.task.input or ""
        if not task_text and steps and not _is_actor(steps[0], trajectory):
            task_text = steps[0].content
        stated = None if trajectory.task.final_output else _stated_answer(steps)
        answer_step = None
        if stated is not None:
            opening = steps[0].content if steps and not _is_actor(steps[0], trajectory) else ""
            tokens = _stated_answer_tokens(stated[0], task_text + "\n" + opening)
            answer_step = stated[1]
        else:
            tokens = _answer_tokens(_final_answer(trajectory, actors, lowers))
        if with_ground_truth and trajectory.task.expected_output:
            expected = trajectory.task.expected_output
            tokens -= _answer_tokens(expected) | _stated_answer_tokens(expected, "")
        return cls(
            trajectory=trajectory,
            steps=steps,
            texts=texts,
            lowers=lowers,
            actors=actors,
            actor_set=frozenset(actors),
            order={index: rank for rank, index in enumerate(actors)},
            coordinator=coordinator,
            workers=workers,
            worker_rank={index: rank for rank, index in enumerate(workers)},
            answer_tokens=tokens,
            task_text=task_text[:4000],
            answer_step=answer_step,
        )

    def prose(self, index: int) -> tuple[str, str]:
        """What the language signals read of a step, and its lower-cased form (computed once): its
        prose outside code blocks; of a very long step (a relayed page or file), only the opening,
        which holds its author's own words."""
        if self._prose is None:
            self._prose = {}
        found = self._prose.get(index)
        if found is None:
            text = self.texts[index]
            if len(self.steps[index].content) > DUMP_CHARS:
                text = text[:OWN_WORDS_CHARS]
            prose = _CODE_FENCE.sub(" ", text) if "```" in text else text
            lower = self.lowers[index] if prose is self.texts[index] else prose.lower()
            found = self._prose[index] = (prose, lower)
        return found

    def whole_lowers(self) -> list[str | None]:
        """Each step's whole text lower-cased where the window is the whole step (None elsewhere), for
        the readings that lower-case whole steps."""
        return [
            lower if len(step.content) <= SCAN_HEAD_CHARS + SCAN_TAIL_CHARS else None
            for step, lower in zip(self.steps, self.lowers, strict=True)
        ]

    def full_lower(self, index: int) -> str:
        """A step's whole text, lower-cased (the window when the step is short enough to be whole)."""
        text = self.steps[index].content
        if len(text) == len(self.texts[index]):
            return self.lowers[index]
        if self._full_lowers is None:
            self._full_lowers = {}
        if index not in self._full_lowers:
            self._full_lowers[index] = text.lower()
        return self._full_lowers[index]

    def failed_results(self) -> dict[int, bool]:
        """Tool / code results that failed: index -> True for a hard failure (traceback, non-zero exit
        code, ``...Error:``, a span marked as an error), False for a soft one ("not found", "no
        results", None). Computed once, shared by the error signals."""
        if self._failed is None:
            self._failed = {}
            for step in self.steps:
                if step.kind == StepKind.MESSAGE and not step.is_error:
                    continue
                text, lower = self.texts[step.index], self.lowers[step.index]
                if step.is_error or _HARD_ERROR.search(text, lower):
                    self._failed[step.index] = True
                elif _ERROR.search(text[:2000], lower[:2000]):
                    self._failed[step.index] = False
        return self._failed

    def author_of(self, index: int) -> int | None:
        """The suspect step behind step ``index``: itself when authored, else the step that made the
        tool call or wrote the code."""
        if index in self.actor_set:
            return index
        return _author_of(self.steps, self.steps[index], self.actor_set)


Evidence = dict[int, float]


class Signal:
    """A failure signal: reads a ScoringContext, returns unweighted evidence per suspect step.

    ``scope`` "step" adds the weighted evidence to the step's score; "agent" adds it only to the
    case against the step's author (it says who went wrong, not where).
    """

    name: str = "signal"
    reason: str = ""
    scope: str = "step"

    def evidence(self, context: ScoringContext) -> Evidence:
        raise NotImplementedError


class EarlyDecision(Signal):
    """Errors propagate forward, so among similar suspects the earlier one is preferred: every suspect
    gets a prior that decays with its order among authored steps. In a coordinated run facts enter
    through the workers' reports, so the coordinator's own steps get a smaller share of it. The decay
    and the share are fixed by that argument, not fitted: they are order among suspects, never
    benchmark positions."""

    name = "early_decision"
    reason = "errors carry forward, so of similar suspects the earlier one is named"
    decay = 0.35
    coordinator_share = 0.35

    def evidence(self, context: ScoringContext) -> Evidence:
        found: Evidence = {}
        for index in context.actors:
            if context.coordinator is not None and context.steps[index].agent == context.coordinator:
                found[index] = self.coordinator_share / (1.0 + self.decay * context.order[index])
            else:
                found[index] = 1.0 / (1.0 + self.decay * context.worker_rank[index])
        return found


class _ErrorResult(Signal):
    hard: bool = True
    reason = "its code or tool call produced an error"

    def evidence(self, context: ScoringContext) -> Evidence:
        found: Evidence = {}
        for index, hard in context.failed_results().items():
            if hard == self.hard and (author := context.author_of(index)) is not None:
                found[author] = found.get(author, 0.0) + 1.0
        return found


class HardError(_ErrorResult):
    """A tool or code result that failed hard (traceback, non-zero exit code, ``...Error:``, or a span
    marked as an error) blames the step that wrote the code or made the call, even when a later step
    fixed it: fixing costs turns and often leaves a workaround behind."""

    name = "hard_error"
    hard = True


class SoftError(_ErrorResult):
    """A result that came back empty-handed ("not found", "no results", "unable to", None/NaN): a
    weaker sign that the call or code of the step behind it was wrong."""

    name = "soft_error"
    hard = False


class Fabrication(Signal):
    """Fabricated or assumed data: "let's assume", placeholder / hypothetical / mock values, "I cannot
    access", answering from memory. A run built on made-up inputs fails however well the rest goes.
    Counted in prose only (code comments saying "mock" are common and harmless), at most twice."""

    name = "fabrication"
    reason = "it relied on assumed or made-up data"
    pattern = _FABRICATION
    cap = 2

    def evidence(self, context: ScoringContext) -> Evidence:
        found: Evidence = {}
        for index in context.actors:
            prose, lower = context.prose(index)
            count = self.pattern.count(prose, lower)
            if count:
                found[index] = float(min(count, self.cap))
        return found


class Hedging(Fabrication):
    """Hedged facts ("probably", "approximately", "I believe", "should be"): a fact stated without
    having been looked up. Much weaker than outright fabrication."""

    name = "hedging"
    reason = "it stated facts it had not established"
    pattern = _HEDGING
    cap = 3


class FinalAnswerEntry(Signal):
    """Where the wrong final answer first entered: its distinctive parts (numbers, bolded phrases after
    "final answer" / "the answer is"; for an answer the run states as "FINAL ANSWER: ...", also its
    words the task does not contain) traced to the first step carrying at least half of them, through
    a code result to its author. The statement of the answer itself is not searched: an answer that
    first appears there came from nowhere in the run, so it points nowhere. With the expected answer
    known, tokens shared with it are dropped."""

    name = "final_answer"
    reason = "the final answer first appeared here"

    def evidence(self, context: ScoringContext) -> Evidence:
        tokens = context.answer_tokens
        if not tokens:
            return {}
        spaced = [token for token in tokens if " " in token]
        plain = [token for token in tokens if " " not in token]
        # one short word or number ("31", "hike") turns up by chance in any relayed page or file
        weak = len(tokens) == 1 and len(next(iter(tokens))) < 5
        for step in context.steps:
            if step.index == context.answer_step or (weak and len(step.content) > DUMP_CHARS):
                continue
            text = context.full_lower(step.index)
            flat = text.replace(",", "") if "," in text else text
            present = sum(1 for token in plain if token in flat or token in text)
            if spaced and (present + len(spaced)) * 2 >= len(tokens):
                normalised = _normalise(text)
                present += sum(1 for token in spaced if token in normalised)
            if present * 2 >= len(tokens):
                author = context.author_of(step.index)
                return {author: 1.0} if author is not None else {}
        return {}


class LackingReport(Signal):
    """Delegated work the coordinator then found lacking ("not yet found", "did not provide"): in a
    coordinated run the worker's report is where the run failed to get what it needed. Earlier
    reports count more (the first shortfall sets the course)."""

    name = "lacking_report"
    reason = "the coordinator found its report lacking"

    def evidence(self, context: ScoringContext) -> Evidence:
        if context.coordinator is None:
            return {}
        # the coordinator's next step after each step (read backwards once), and whether it found what it
        # got lacking (read once: the reports before it share it)
        following: dict[int, int | None] = {}
        upcoming = None
        for step in reversed(context.steps):
            following[step.index] = upcoming
            if step.agent == context.coordinator:
                upcoming = step.index
        lacking: dict[int, bool] = {}
        found: Evidence = {}
        for index in context.workers:
            after = following[index]
            if after is None:
                continue
            if after not in lacking:
                head = context.steps[after].content[:1500]
                regex = _ASCII_UNSATISFIED if head.isascii() else _UNSATISFIED
                lacking[after] = regex.search(head) is not None
            if lacking[after]:
                found[index] = 1.0 / (1.0 + 0.5 * context.worker_rank[index])
        return found


class UnverifiedApproval(Signal):
    """A verifier approving ("verified", "is correct", "I agree") without new evidence (no code, no
    lookup in the same step): it let a wrong result through. A weak signal on its own."""

    name = "approval"
    reason = "it approved a result without new evidence"

    def evidence(self, context: ScoringContext) -> Evidence:
        return {
            index: 1.0
            for index in context.actors
            if context.order[index] > 0
            and _APPROVAL.search(context.texts[index], context.lowers[index])
            and not _CODE_BLOCK.search(context.steps[index].content)
        }


_NEGATED = re.compile(r"\b(?:not|no|never|without|isn't|aren't|nor)\b[^.;\n]{0,40}$")


def _reports_stuck(lower: str) -> bool:
    """A statement that the run is stuck, looping or making no progress, not a denial of one ("we are
    not yet in a loop", "no evidence of being stuck")."""
    if not _STUCK._may_match(lower):
        return False
    for match in _STUCK.regex.finditer(lower):
        if match.group(0).startswith('"'):  # a progress ledger's explicit boolean
            return True
        if not _NEGATED.search(lower[max(0, match.start() - 60) : match.start()]):
            return True
    return False


class StuckLoop(Signal):
    """The run never recovered after a step: the first step followed by a report of being stuck,
    looping or making no progress (a denial such as "we are not in a loop" does not count)."""

    name = "stuck"
    reason = "the run reported no progress right after it"

    def evidence(self, context: ScoringContext) -> Evidence:
        actors = context.actors
        for position, index in enumerate(actors[:-1]):
            for later in range(index + 1, actors[position + 1] + 1):
                if _reports_stuck(context.lowers[later]):
                    return {index: 1.0}
        return {}


class ContradictedClaim(Signal):
    """The first claim that later steps contradict: a step that calls something incorrect, a mistake
    or a discrepancy, and names a number or quoted phrase, points back at the step that first
    asserted it. Only the earliest such claim counts: later ones inherit it."""

    name = "contradicted_claim"
    reason = "a later step said what it asserted was wrong"

    def evidence(self, context: ScoringContext) -> Evidence:
        best: int | None = None
        for index in context.actors:
            text = context.texts[index][:3000]
            if context.order[index] == 0 or not _CORRECTION.search(text, context.lowers[index][:3000]):
                continue
            tokens = {match.replace(",", "") for match in _NUMBER.findall(text)}
            tokens |= {_normalise(match) for match in _QUOTED.findall(text)}
            tokens = {token for token in tokens if len(token) >= 2}
            if not tokens:
                continue
            for earlier in context.actors:
                if earlier >= index:
                    break
                flat = context.lowers[earlier].replace(",", "")
                if any(token in flat for token in tokens):
                    best = earlier if best is None else min(best, earlier)
                    break
        return {best: 1.0} if best is not None else {}


class PlanSkipsRequirement(Signal):
    """A plan that skips a requirement of the task: the first planning step (it says "plan" or lists
    numbered / bulleted steps) that leaves out some of the numbers and quoted phrases the task names.
    Evidence is the share left out, so a plan carrying them all gets none."""

    name = "plan_gap"
    reason = "its plan left out part of what the task asks"

    def evidence(self, context: ScoringContext) -> Evidence:
        required = task_requirements(context.task_text)
        if len(required) < 2:
            return {}
        for index in context.actors[:4]:
            text = context.texts[index]
            if not _PLAN.search(text):
                continue
            lower = context.lowers[index].replace(",", "")
            missing = [token for token in required if token not in lower]
            share = len(missing) / len(required)
            return {index: share} if share > 0.2 else {}
        return {}


class OffTaskReport(Signal):
    """Who answers whom: a worker's report that has little to do with what it was asked (the
    coordinator's instruction just before it, and the task). An off-task report (an irrelevant page,
    a different file) is where a coordinated run loses its way. Coordinated runs only."""

    name = "off_task_report"
    reason = "its report did not answer what it was asked"

    def evidence(self, context: ScoringContext) -> Evidence:
        if context.coordinator is None:
            return {}
        task_words = content_words(context.task_text)
        found: Evidence = {}
        for index in context.workers:
            asked = next(
                (
                    earlier
                    for earlier in range(index - 1, max(-1, index - 4), -1)
                    if context.steps[earlier].agent == context.coordinator
                    and not _ROUTING.match(context.steps[earlier].content)
                ),
                None,
            )
            if asked is None:
                continue
            wanted = task_words | content_words(context.texts[asked][:1500])
            if len(wanted) < 4:
                continue
            said = content_words(context.texts[index][:1500])
            overlap = len(wanted & said) / len(wanted)
            if overlap < 0.25:
                found[index] = 1.0 - overlap / 0.25
        return found


_SATISFIED = _Pattern(
    r"\"is_request_satisfied\":\s*\{[^{}]{0,1500}?\"answer\":\s*true"
    r"|(?:\brequest|\btask|\bquestion) (?:has been|is|was) (?:now )?(?:successfully |fully )?"
    r"(?:satisfied|fulfilled|completed|answered|resolved)\b",
    keys=("satisfied", "fulfilled", "completed", "answered", "resolved"),
)


class PrematureAcceptance(Signal):
    """A step that declares the request satisfied, or the needed facts found, in a run that failed:
    the run stopped looking because someone accepted a report without the evidence the task needs.
    The first such acceptance is the suspect (later ones inherit it). Only a claim that the whole
    request is satisfied counts: "we have found X" is said of partial progress too often to mean
    anything. Agent scope: the acceptance says who let the failure through, not where it entered."""

    name = "premature_acceptance"
    reason = "it accepted a result without the evidence the task needs"
    scope = "agent"  # who let the failure through; where it entered is for the other signals

    def evidence(self, context: ScoringContext) -> Evidence:
        for index in context.actors:
            if context.order[index] == 0:
                continue
            head = context.texts[index][:2500]
            if _SATISFIED.search(head, context.lowers[index][:2500]):
                return {index: 1.0}
        return {}


SIGNALS: tuple[Signal, ...] = (
    EarlyDecision(),
    HardError(),
    SoftError(),
    Fabrication(),
    Hedging(),
    FinalAnswerEntry(),
    LackingReport(),
    UnverifiedApproval(),
    StuckLoop(),
    ContradictedClaim(),
    PlanSkipsRequirement(),
    OffTaskReport(),
    PrematureAcceptance(),
)
SIGNAL_NAMES: tuple[str, ...] = tuple(signal.name for signal in SIGNALS)
