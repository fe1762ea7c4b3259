"""The zoo's ``debate`` app: a voting team on AutoGen AgentChat, where three or four solvers each
propose an answer with their reasoning, a critic checks the proposals with a calculator tool, and a
judge tallies the votes, round after round, until the vote is unanimous or two rounds are done. The
solvers' speaking order is drawn from the seed, and a fourth solver joins a third of the debates.

The problems are quantitative questions with a well-known trap (the average speed of a round trip,
stacked discounts, compound interest, two pumps filling one tank, a rise then a fall in percent).
Each solver has a style written in its system message: a careful solver uses the right method, a
hasty one the rule of thumb; which solvers are hasty is drawn from the seed. The scripted LLM's
replies are computed from the conversation each agent is shown: the critic recomputes, with the
calculator, the expression of the first proposal that uses the right method and marks every answer
against that value; the solvers keep or revise their answer from the critic's verdict on them; the
judge tallies the latest answers (a tie goes to the critic's verified value). So a fault planted in
a proposal, the critic's check, the calculator's answer or the judge's tally changes what follows;
the critic catches a wrong answer that comes with the right method's expression (``masked``).
"""

from __future__ import annotations

import ast
import asyncio
import json
import math
import operator
import random
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from otel_blame.demo.scripted_llm import Reply
from otel_blame.inject.demo_app import apply_corrections
from otel_blame.inject.zoo._resources import AppResources

FAULTS: tuple[str, ...] = (
    "number",
    "drop_instruction",
    "contradict_instruction",
    "tool_error",
    "wrong_tool_result",
    "wrong_tool_argument",
    "terminate",
    "premature_handoff",
    "lost_context",
)
SOLVERS = ("solver_a", "solver_b", "solver_c", "solver_d")  # solver_d joins a third of the debates
ROUNDS = 2
MAX_MESSAGES = 40

# --- the problems ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Template:
    """One kind of question with its trap: the right method and the rule of thumb, each explained."""

    keyword: str
    decimals: int
    unit: str  # "$" before the value, else after it
    draw: Callable[[random.Random], list[float]]
    question: Callable[[Sequence[float]], str]
    right: Callable[[Sequence[str]], str]  # numbers as written -> the right expression
    hasty: Callable[[Sequence[str]], str]  # -> the rule of thumb's expression
    right_reasoning: str  # names the right method (the critic looks for ``right_marker`` in it)
    right_marker: str
    hasty_reasoning: str
    flaw: str  # the critic's one-line explanation of the rule of thumb's mistake

    @property
    def arity(self) -> int:
        """How many numbers the question states."""
        return len(self.draw(random.Random(0)))


def _g(value: float) -> str:
    return f"{value:g}"


TEMPLATES: tuple[Template, ...] = (
    Template(
        keyword="round trip",
        decimals=1,
        unit=" km/h",
        draw=lambda r: [r.choice((60, 80, 90, 120)), r.choice((30, 40, 45, 50))],
        question=lambda n: (
            f"A courier drives from the city to a depot at {_g(n[0])} km/h and comes back along the same "
            f"road at {_g(n[1])} km/h. What is the average speed over the whole round trip, in km/h "
            "rounded to one decimal?"
        ),
        right=lambda n: f"2 * {n[0]} * {n[1]} / ({n[0]} + {n[1]})",
        hasty=lambda n: f"({n[0]} + {n[1]}) / 2",
        right_reasoning=(
            "The average speed of a round trip is the total distance over the total time, which is the "
            "harmonic mean of the two speeds. The distance cancels out, so twice the product over the sum "
            "gives it directly."
        ),
        right_marker="harmonic mean",
        hasty_reasoning="Both legs are the same length, so I take the plain average of the two speeds.",
        flaw="the slower leg takes longer, so a plain average of the speeds overstates the result",
    ),
    Template(
        keyword="register",
        decimals=2,
        unit="$",
        draw=lambda r: [r.choice((80, 120, 149.99, 240)), r.choice((20, 25, 30)), r.choice((10, 15))],
        question=lambda n: (
            f"A jacket priced at ${_g(n[0])} is marked down {_g(n[1])}%, and at the register another "
            f"{_g(n[2])}% comes off the reduced price. What does the customer pay, in dollars rounded to "
            "cents?"
        ),
        right=lambda n: f"{n[0]} * (1 - {n[1]} / 100) * (1 - {n[2]} / 100)",
        hasty=lambda n: f"{n[0]} * (1 - ({n[1]} + {n[2]}) / 100)",
        right_reasoning=(
            "The second discount applies to the already reduced price, so the discounts multiply: the price "
            "is scaled by each remaining fraction in turn."
        ),
        right_marker="discounts multiply",
        hasty_reasoning="The two discounts add up, so I take their sum off the original price in one go.",
        flaw="the second discount is taken off the reduced price, so the discounts do not simply add up",
    ),
    Template(
        keyword="compounded",
        decimals=2,
        unit="$",
        draw=lambda r: [r.choice((1000, 2500, 4000, 5000)), r.choice((3, 4, 5, 6)), r.choice((3, 5, 8, 10))],
        question=lambda n: (
            f"A saver deposits ${_g(n[0])} at {_g(n[1])}% interest compounded once a year and makes no "
            f"withdrawals. What is the balance after {_g(n[2])} years, in dollars rounded to cents?"
        ),
        right=lambda n: f"{n[0]} * (1 + {n[1]} / 100) ** {n[2]}",
        hasty=lambda n: f"{n[0]} * (1 + {n[1]} * {n[2]} / 100)",
        right_reasoning=(
            "Interest compounded yearly earns interest on the interest, so the balance grows by the same "
            "factor every year and the factor is raised to the number of years."
        ),
        right_marker="interest on the interest",
        hasty_reasoning=(
            "Each year adds the same interest, so I multiply the yearly rate by the number of years."
        ),
        flaw="compounding earns interest on earlier interest, so simple interest understates the balance",
    ),
    Template(
        keyword="pumps",
        decimals=2,
        unit=" hours",
        draw=lambda r: [r.choice((3, 4, 5, 6)), r.choice((8, 10, 12, 15))],
        question=lambda n: (
            f"Pump A alone fills a water tank in {_g(n[0])} hours and pump B alone fills it in {_g(n[1])} "
            "hours. With both pumps running together, how many hours does it take to fill the tank, rounded "
            "to two decimals?"
        ),
        right=lambda n: f"{n[0]} * {n[1]} / ({n[0]} + {n[1]})",
        hasty=lambda n: f"({n[0]} + {n[1]}) / 4",
        right_reasoning=(
            "Working together, the pumps' rates add: each fills a fraction of the tank per hour, so the time "
            "is one over the sum of the rates, the product over the sum."
        ),
        right_marker="rates add",
        hasty_reasoning="On average a pump needs the mean of the two times, and two pumps halve that.",
        flaw="the faster pump does more of the work, so halving the average time is wrong",
    ),
    Template(
        keyword="share price",
        decimals=2,
        unit="%",
        draw=lambda r: [r.choice((10, 20, 25, 40)), r.choice((10, 20, 25, 30))],
        question=lambda n: (
            f"A share price rises {_g(n[0])}% on Monday and falls {_g(n[1])}% on Tuesday. What is the net "
            "change over the two days, in percent rounded to two decimals (negative for a loss)?"
        ),
        right=lambda n: f"((1 + {n[0]} / 100) * (1 - {n[1]} / 100) - 1) * 100",
        hasty=lambda n: f"{n[0]} - {n[1]}",
        right_reasoning=(
            "Tuesday's fall applies to Monday's higher price, so the percentage changes compound: multiply "
            "the two growth factors and subtract one."
        ),
        right_marker="changes compound",
        hasty_reasoning="A rise and a fall in percent cancel out, so the net change is their difference.",
        flaw="the fall is taken from the risen price, so percentages cannot simply be subtracted",
    ),
)


@dataclass(frozen=True)
class Problem:
    template: Template
    numbers: list[float]
    hasty: frozenset[str]  # the solvers whose style is the rule of thumb
    solvers: tuple[str, ...] = SOLVERS[:3]  # the team's solvers, in speaking order

    @property
    def question(self) -> str:
        return self.template.question(self.numbers)

    @property
    def expected(self) -> float:
        written = [_g(n) for n in self.numbers]
        return round(evaluate(self.template.right(written)), self.template.decimals)

    def formatted(self, value: float) -> str:
        text = f"{value:.{self.template.decimals}f}"
        return f"${text}" if self.template.unit == "$" else f"{text}{self.template.unit}"

    def is_right(self, answer: float | None) -> bool:
        tolerance = 0.5 * 10**-self.template.decimals
        return answer is not None and math.isclose(answer, self.expected, abs_tol=tolerance)


def problem_for(seed: int) -> Problem:
    rng = random.Random(seed)
    template = TEMPLATES[rng.randrange(len(TEMPLATES))]
    numbers = [float(x) for x in template.draw(rng)]
    hasty = rng.choices(({"solver_c"}, {"solver_b", "solver_c"}, {"solver_b"}), weights=(4, 4, 2))[0]
    solvers = list(SOLVERS[: rng.choice((3, 3, 4))])
    if len(solvers) == 4 and rng.random() < 0.5:
        hasty = hasty | {"solver_d"}  # still one careful solver at least: solver_a never is hasty
    rng.shuffle(solvers)
    return Problem(template, numbers, frozenset(hasty), tuple(solvers))


def template_of(question: str) -> Template | None:
    return next((t for t in TEMPLATES if t.keyword in question), None)


# --- the calculator tool ----------------------------------------------------------------------------

_OPERATORS: dict[type, Callable[..., float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


def evaluate(expression: str) -> float:
    """An arithmetic expression's value (numbers, + - * / ** and parentheses only)."""

    def value(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return float(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            if isinstance(node.op, ast.Pow) and abs(value(node.right)) > 100:
                raise ValueError("exponent too large")
            return _OPERATORS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.operand))
        raise ValueError(f"unsupported expression element: {ast.dump(node)[:60]}")

    return value(ast.parse(expression.strip(), mode="eval").body)


def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression exactly (numbers, + - * / ** and parentheses)."""
    try:
        result = evaluate(expression)
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError) as error:
        return json.dumps({"expression": expression, "error": f"{type(error).__name__}: {error}"})
    return json.dumps({"value": round(result, 6), "exact": True})


# --- the agents' scripted minds ---------------------------------------------------------------------

_AGENT = re.compile(r"You are (\w+),")
_ANSWER = re.compile(r"Answer:\s*\$?(-?\d+(?:\.\d+)?)")
_EXPRESSION = re.compile(r"Expression:\s*`([^`]+)`")
_VERDICT = re.compile(r"^(solver_\w+): \$?(-?\d+(?:\.\d+)?)\S*, (correct|incorrect)", re.MULTILINE)
_VERIFIED = re.compile(r"verified answer is \$?(-?\d+(?:\.\d+)?)")
_FINAL = re.compile(r"Final answer:\s*\$?(-?\d+(?:\.\d+)?)")
HASTY_STYLE = "You answer quickly with the rule of thumb that usually works."


@dataclass(frozen=True)
class Said:
    source: str
    text: str


@dataclass
class Debate:
    """What one model request shows: the question, the team's messages in order, own tool results."""

    agent: str
    hasty: bool
    question: str
    said: list[Said]
    tool_results: list[str]  # results of this turn's own tool calls

    @classmethod
    def of(cls, request: dict[str, Any]) -> Debate:
        messages = request.get("messages", [])
        system = next((str(m.get("content") or "") for m in messages if m.get("role") == "system"), "")
        found = _AGENT.search(system)
        agent = found.group(1) if found else ""
        said: list[Said] = []
        tool_results: list[str] = []
        for message in messages:
            role, text = message.get("role"), str(message.get("content") or "")
            if role == "user":
                said.append(Said(str(message.get("name") or "user"), apply_corrections(text)))
                tool_results = []
            elif role == "assistant" and not message.get("tool_calls"):
                said.append(Said(agent, apply_corrections(text)))
            elif role == "tool":
                tool_results.append(text)
        question = next((s.text for s in said if s.source == "user"), "")
        return cls(agent, HASTY_STYLE in system, question, said, tool_results)

    def latest(self, source: str) -> str | None:
        return next((s.text for s in reversed(self.said) if s.source == source), None)

    def spoke(self, source: str) -> int:
        return sum(s.source == source for s in self.said)

    def answers(self) -> dict[str, float | None]:
        """Each solver's latest answer (None: no answer in its latest message)."""
        out: dict[str, float | None] = {}
        for solver in SOLVERS:
            text = self.latest(solver)
            if text is not None:
                found = _ANSWER.search(text)
                out[solver] = float(found.group(1)) if found else None
        return out


def _numbers_of(question: str) -> list[str]:
    return re.findall(r"(?<![\w.])\d+(?:\.\d+)?", question)


def _value(template: Template, expression: str) -> float | None:
    try:
        return round(evaluate(expression), template.decimals)
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError):
        return None


def _shown(template: Template, value: float) -> str:
    text = f"{value:.{template.decimals}f}"
    return f"${text}" if template.unit == "$" else f"{text}{template.unit}"


def solver_reply(seen: Debate) -> Reply:
    template = template_of(seen.question)
    numbers = _numbers_of(seen.question)
    if template is None or len(numbers) < 2:
        return Reply("I cannot find a question with the numbers I need, so I have no answer to propose.")
    critique = seen.latest("critic")
    if critique is not None and seen.spoke(seen.agent) > 0:
        return _revision(seen, template, critique)
    written = numbers[: template.arity]
    if seen.hasty:
        expression, reasoning = template.hasty(written), template.hasty_reasoning
    else:
        expression, reasoning = template.right(written), template.right_reasoning
    value = _value(template, expression)
    if value is None:
        return Reply("My expression does not evaluate, so I abstain this round.")
    return Reply(
        f"{reasoning} With the numbers in the question: Expression: `{expression}`. "
        f"That comes to {_shown(template, value)}. Answer: {value:.{template.decimals}f}"
    )


def _revision(seen: Debate, template: Template, critique: str) -> Reply:
    mine = seen.answers().get(seen.agent)
    verdicts = {name: (float(v), word) for name, v, word in _VERDICT.findall(critique)}
    verified = _VERIFIED.search(critique)
    verdict = verdicts.get(seen.agent)
    if verdict is not None and verdict[1] == "incorrect" and verified is not None:
        value = float(verified.group(1))
        return Reply(
            f"The critic is right about my proposal: {template.flaw}. I withdraw my earlier answer and adopt "
            f"the verified value. Answer: {value:.{template.decimals}f}"
        )
    if mine is None:
        if verified is None:
            return Reply("I have no answer of my own and nothing verified to adopt, so I abstain.")
        value = float(verified.group(1))
        return Reply(
            "I did not state an answer before; I adopt the critic's verified value. "
            f"Answer: {value:.{template.decimals}f}"
        )
    return Reply(
        f"The critic found no fault in my proposal, so I keep it: {_shown(template, mine)}. "
        f"Answer: {mine:.{template.decimals}f}"
    )


def critic_reply(seen: Debate) -> Reply:
    template = template_of(seen.question)
    if template is None:
        return Reply("There is no question I can check the proposals against.")
    answers = seen.answers()
    proposals = {solver: seen.latest(solver) or "" for solver in answers}
    if not seen.tool_results:
        previous = _VERIFIED.search(seen.latest("critic") or "")
        if previous and all(
            a is not None and math.isclose(a, float(previous.group(1))) for a in answers.values()
        ):
            value = float(previous.group(1))
            lines = "\n".join(
                f"{s}: {a:.{template.decimals}f}, correct" for s, a in answers.items() if a is not None
            )
            return Reply(
                f"Every proposal now matches the value I verified, so the verified answer is "
                f"{value:.{template.decimals}f}.\n{lines}\nNo further revisions are needed."
            )
        sound = [
            s for s, text in proposals.items() if template.right_marker in text and _EXPRESSION.search(text)
        ]
        if sound:
            expression = _EXPRESSION.search(proposals[sound[0]]).group(1)  # type: ignore[union-attr]
            return Reply(
                f"I am checking the proposals. {sound[0]} uses the right method ({template.right_marker}); I "
                "am recomputing its expression with the calculator.",
                tool_calls=[{"name": "calculate", "arguments": {"expression": expression}}],
            )
        return Reply(
            "None of the proposals uses the right method, so I cannot verify any of them. I ask every solver "
            f"to reconsider: {template.flaw}."
        )
    result = seen.tool_results[-1]
    try:
        checked = json.loads(result)
        value = round(float(checked["value"]), template.decimals)
    except (ValueError, KeyError, TypeError):
        value = None
    sound = [s for s, text in proposals.items() if template.right_marker in text]
    if value is None:
        named = (
            f"{sound[0]}'s reasoning uses the right method" if sound else "no proposal uses the right method"
        )
        return Reply(
            "The calculator did not answer, so I cannot verify any proposal this round. Going by the "
            f"reasoning alone, {named}, but without a checked value I am not marking anyone. Solvers, please "
            "keep your answers unless you find a mistake yourselves."
        )
    opening = (
        f"The calculator evaluates the expression of {sound[0] if sound else 'the sound proposal'} to "
        f"{value:.{template.decimals}f}, so the verified answer is {value:.{template.decimals}f}."
    )
    lines = []
    for solver, answer in answers.items():
        if answer is None:
            lines.append(f"{solver}: no answer, incorrect: the proposal states no answer.")
        elif math.isclose(answer, value, abs_tol=0.5 * 10**-template.decimals):
            lines.append(f"{solver}: {answer:.{template.decimals}f}, correct.")
        else:
            lines.append(f"{solver}: {answer:.{template.decimals}f}, incorrect: {template.flaw}.")
    return Reply(opening + "\n" + "\n".join(lines) + "\nSolvers marked incorrect, please revise.")


def judge_reply(seen: Debate) -> Reply:
    template = template_of(seen.question)
    if template is None:
        return Reply("There is no question to judge. TERMINATE")
    answers = seen.answers()
    votes = Counter(f"{a:.{template.decimals}f}" for a in answers.values() if a is not None)
    round_ = seen.spoke("judge") + 1
    tally = "; ".join(
        f"{value} has {count} vote{'s' if count > 1 else ''} ("
        + ", ".join(s for s, a in answers.items() if a is not None and f"{a:.{template.decimals}f}" == value)
        + ")"
        for value, count in votes.most_common()
    )
    verified = _VERIFIED.search(seen.latest("critic") or "")
    if not votes:
        return Reply(f"Round {round_}: no solver stated an answer, so there is nothing to decide. TERMINATE")
    top = votes.most_common()
    unanimous = len(votes) == 1 and sum(votes.values()) == len(answers)
    if not unanimous and round_ < ROUNDS:
        note = f" The critic verified {float(verified.group(1)):.{template.decimals}f}." if verified else ""
        return Reply(
            f"Round {round_} tally: {tally}.{note} The vote is not unanimous, so I am asking the solvers for "
            "one more round."
        )
    winner = top[0][0]
    if len(top) > 1 and top[0][1] == top[1][1]:
        tied = {v for v, c in top if c == top[0][1]}
        critic_value = f"{float(verified.group(1)):.{template.decimals}f}" if verified else None
        winner = critic_value if critic_value in tied else winner
        reason = "the vote is tied, so the critic's verified value decides"
    else:
        reason = "the majority decides" if not unanimous else "the vote is unanimous"
    return Reply(
        f"Round {round_} tally: {tally}. {reason.capitalize()}. "
        f"Final answer: {_shown(template, float(winner))} TERMINATE"
    )


MINDS: dict[str, Callable[[Debate], Reply]] = {
    "solver_a": solver_reply,
    "solver_b": solver_reply,
    "solver_c": solver_reply,
    "critic": critic_reply,
    "judge": judge_reply,
}


class DebateScript:
    """The scripted LLM's answer: each agent's reply computed from the debate it is shown."""

    def __call__(self, request: dict[str, Any]) -> Reply:
        seen = Debate.of(request)
        mind = MINDS.get(seen.agent)
        return mind(seen) if mind else Reply("I have nothing to add.")


# --- the app ----------------------------------------------------------------------------------------

SYSTEM_MESSAGES = {
    "solver": (
        "You are {name}, one of the solvers in a debate. Propose an answer with your reasoning, the "
        "expression you evaluated in backticks after 'Expression:', and end with 'Answer: <number>'. In "
        "later rounds keep or revise your answer after the critic's verdict. {style}"
    ),
    "critic": (
        "You are critic, the debate's checker. Find the proposal that uses the right method, recompute its "
        "expression with the calculate tool, and mark every solver's answer correct or incorrect against "
        "the verified value."
    ),
    "judge": (
        "You are judge, the debate's tallier. Tally the solvers' latest answers each round. When the "
        f"vote is unanimous, or after {ROUNDS} rounds, give 'Final answer: <value>' (a tie goes to the "
        "critic's verified value) and end with TERMINATE."
    ),
}
CAREFUL_STYLE = "You work carefully from first principles."


def build_team(problem: Problem, base_url: str) -> tuple[Any, Any]:
    """The debate team on the scripted model (solvers, critic and judge, in round-robin order) and its
    model client, which the caller closes."""
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.conditions import MaxMessageTermination, TextMentionTermination
    from autogen_agentchat.teams import RoundRobinGroupChat
    from autogen_core.models import ModelFamily, ModelInfo
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    client = OpenAIChatCompletionClient(
        model="scripted-model",
        base_url=base_url,
        api_key="scripted",
        model_info=ModelInfo(
            vision=False,
            function_calling=True,
            json_output=False,
            family=ModelFamily.UNKNOWN,
            structured_output=False,
        ),
        max_retries=0,
        parallel_tool_calls=False,
    )
    solvers = [
        AssistantAgent(
            name,
            client,
            description=f"{name}: proposes and defends an answer",
            system_message=SYSTEM_MESSAGES["solver"].format(
                name=name, style=HASTY_STYLE if name in problem.hasty else CAREFUL_STYLE
            ),
        )
        for name in problem.solvers
    ]
    critic = AssistantAgent(
        "critic",
        client,
        description="critic: checks the proposals with a calculator",
        system_message=SYSTEM_MESSAGES["critic"],
        tools=[calculate],
        reflect_on_tool_use=True,
    )
    judge = AssistantAgent(
        "judge", client, description="judge: tallies the votes", system_message=SYSTEM_MESSAGES["judge"]
    )
    termination = TextMentionTermination("TERMINATE") | MaxMessageTermination(MAX_MESSAGES)
    return RoundRobinGroupChat([*solvers, critic, judge], termination_condition=termination), client


_RESOURCES = AppResources(DebateScript())


def final_answer(messages: Sequence[Any]) -> tuple[str | None, float | None]:
    """The judge's last message and the value it gives as the final answer (None when it gives none)."""
    text = next(
        (
            str(m.content)
            for m in reversed(messages)
            if getattr(m, "source", None) == "judge" and isinstance(m.content, str)
        ),
        None,
    )
    found = _FINAL.search(text or "")
    return text, (float(found.group(1)) if found else None)


async def _debate(problem: Problem) -> Any:
    team, client = build_team(problem, _RESOURCES.base_url)
    try:
        return await team.run(task=problem.question)
    finally:
        await client.close()


def run_task(seed: int = 0) -> bool:
    """One debate over a question drawn from ``seed``; True when the judge's final answer is right."""
    from otel_blame.instrumentation import set_outcome, task

    problem = problem_for(seed)
    expected = problem.formatted(problem.expected)
    with task(
        f"debate-{problem.template.keyword.replace(' ', '-')}",
        input=problem.question,
        expected_output=expected,
    ):
        result = asyncio.run(_debate(problem))
        text, answer = final_answer(result.messages)
        right = problem.is_right(answer)
        if answer is None:
            reason = f"the debate ended without a final answer ({result.stop_reason})"
        else:
            reason = None if right else f"expected {expected}, the judge gave {problem.formatted(answer)}"
        set_outcome(right, final_output=text, reason=reason)
    _RESOURCES.forget_requests()
    return right
