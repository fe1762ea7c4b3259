"""What plain arithmetic code prints, worked out without running it.

A code result is the tool's own output; whether it *follows from its call* can be checked when the
code is nothing but arithmetic: assignments of numbers and names, ``round``/``abs``/``min``/``max``,
and ``print`` of values or f-strings. Anything else (imports, loops, calls to other functions,
huge powers) and the code is not judged: :func:`printed_numbers` returns None.
"""

from __future__ import annotations

import ast
import math
import operator
import re

from otel_blame.attribution.causal.graph import canonical_number, numbers_in

MAX_CODE_CHARS = 2000
_FENCED = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)
# statements plain arithmetic never has: skip the parse (most code is not plain arithmetic)
_NOT_PLAIN = re.compile(
    r"^\s*(?:import|from|def|class|for|while|with|if|try|return|async)\b|\.\w+\(", re.MULTILINE
)
_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_FUNCTIONS = {
    "round": round,
    "abs": abs,
    "min": min,
    "max": max,
    "float": float,
    "int": int,
    "ceil": math.ceil,
    "floor": math.floor,
    "sqrt": math.sqrt,
}
_EXPRESSION = re.compile(r"^[\d\s.+\-*/%()a-z_,]+$")
MAX_EXPRESSION_CHARS = 300


class _NotArithmetic(Exception):
    pass


def _value(node: ast.AST, names: dict[str, float]) -> float:
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
    ):
        return node.value
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        inner = _value(node.operand, names)
        return -inner if isinstance(node.op, ast.USub) else inner
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left, names), _value(node.right, names)
        if isinstance(node.op, ast.Pow) and (abs(right) > 64 or abs(left) > 1e6):
            raise _NotArithmetic
        try:
            result = _BINARY[type(node.op)](left, right)
        except (ZeroDivisionError, OverflowError, ValueError) as error:
            raise _NotArithmetic from error
        if isinstance(result, complex) or not math.isfinite(result) or abs(result) > 1e15:
            raise _NotArithmetic
        return result
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name | ast.Attribute)
        and _function_name(node.func) in _FUNCTIONS
        and not node.keywords
    ):
        try:
            return _FUNCTIONS[_function_name(node.func)](*(_value(arg, names) for arg in node.args))
        except (ValueError, OverflowError) as error:
            raise _NotArithmetic from error
    raise _NotArithmetic


def _function_name(node: ast.AST) -> str:
    """``ceil`` and ``math.ceil`` alike."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "math":
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def expression_value(text: str) -> float | None:
    """The value of a plain arithmetic expression (a calculator tool's argument: ``ceil(11388 / 900)``),
    or None when the text is anything else."""
    text = text.strip()
    if not text or len(text) > MAX_EXPRESSION_CHARS or not _EXPRESSION.match(text.lower()):
        return None
    if not any(ch.isdigit() for ch in text) or not any(op in text for op in "+-*/%("):
        return None
    try:
        return float(_value(ast.parse(text, mode="eval").body, {}))
    except (_NotArithmetic, SyntaxError, ValueError, TypeError, RecursionError):
        return None


def agrees(value: float, printed: list[str]) -> bool:
    """Whether a result's printed numbers hold ``value`` (as printed, or rounded to what was printed;
    a number is read without its sign)."""
    value = abs(value)
    for number in printed:
        try:
            shown = float(number)
        except ValueError:
            continue
        decimals = len(number.split(".")[1]) if "." in number else 0
        if abs(shown - value) <= 0.5 * 10**-decimals + 1e-9 * max(1.0, abs(value)):
            return True
    return False


def _printed(node: ast.AST, names: dict[str, float]) -> str:
    if isinstance(node, ast.JoinedStr):
        parts = []
        for part in node.values:
            if isinstance(part, ast.Constant):
                parts.append(str(part.value))
            elif isinstance(part, ast.FormattedValue) and part.format_spec is None:
                parts.append(str(_value(part.value, names)))
            else:
                raise _NotArithmetic
        return "".join(parts)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return str(_value(node, names))


def printed_numbers(message: str) -> set[str] | None:
    """The numbers the code in ``message`` prints, or None when it is not plain arithmetic."""
    found = _FENCED.search(message)
    if found is None or len(found.group(1)) > MAX_CODE_CHARS or _NOT_PLAIN.search(found.group(1)):
        return None
    try:
        tree = ast.parse(found.group(1))
    except (SyntaxError, ValueError):
        return None
    names: dict[str, float] = {}
    out: list[str] = []
    try:
        for statement in tree.body:
            if (
                isinstance(statement, ast.Assign)
                and len(statement.targets) == 1
                and isinstance(statement.targets[0], ast.Name)
            ):
                names[statement.targets[0].id] = _value(statement.value, names)
            elif (
                isinstance(statement, ast.Expr)
                and isinstance(statement.value, ast.Call)
                and isinstance(statement.value.func, ast.Name)
                and statement.value.func.id == "print"
                and not statement.value.keywords
            ):
                out.append(" ".join(_printed(arg, names) for arg in statement.value.args))
            else:
                return None
    except (_NotArithmetic, TypeError, RecursionError):
        return None
    if not out:
        return None
    return {canonical_number(number) for number in numbers_in("\n".join(out))}
