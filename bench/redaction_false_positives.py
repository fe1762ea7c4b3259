"""How often redaction masks what is not a secret, measured on the Who&When logs.

Every step of every log under ``--dataset`` (the Who&When layout: Algorithm-Generated/*.json,
Hand-Crafted/*.json) goes through each built-in pattern of ``otel_blame.redaction``. The logs are
benchmark runs of web and coding tasks and carry no credentials (``--show`` lists every masked
span with its context, to check that again): so every secret-pattern mask in them is a false
positive. E-mail addresses are masked by design (personal data, not secrets) and are counted on
their own line, not as false positives.

``--compare-ref REF`` measures the redaction module of that git revision on the same logs too
(loaded from ``git show REF:otel_blame/redaction.py``), for a before/after table. Usage::

    .venv/bin/python bench/redaction_false_positives.py --dataset /work/shared/who_and_when/dev \\
        --compare-ref 346cd06
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from otel_blame.datasets.who_and_when import SUBSETS
from otel_blame.loaders import load_trajectory

BY_DESIGN = {"email"}


@dataclass
class Tally:
    steps: int = 0
    characters: int = 0
    masks: Counter[str] = field(default_factory=Counter)
    steps_with_false_positive: int = 0
    shown: list[str] = field(default_factory=list)


def redaction_at(ref: str | None) -> ModuleType:
    """This tree's ``otel_blame.redaction``, or the one of git revision ``ref``."""
    if ref is None:
        import otel_blame.redaction as current

        return current
    source = subprocess.run(
        ["git", "show", f"{ref}:otel_blame/redaction.py"], capture_output=True, text=True, check=True
    ).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as handle:
        handle.write(source)
    spec = importlib.util.spec_from_file_location(f"redaction_at_{ref}", handle.name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def measure(redaction: ModuleType, texts: list[tuple[str, str]], show: bool) -> Tally:
    tally = Tally()
    for where, text in texts:
        tally.steps += 1
        tally.characters += len(text)
        false_positive = False
        for pattern in redaction.BUILTIN_PATTERNS:  # each on the original text: which pattern masks what
            if not pattern.may_match(text, text.lower()):
                continue
            masked, count = pattern.apply(text)
            if not count:
                continue
            tally.masks[pattern.label] += count
            if pattern.label not in BY_DESIGN:
                false_positive = True
            if show:
                at = masked.find(f"[REDACTED:{pattern.label}]")
                context = masked[max(0, at - 60) : at + 60].replace("\n", " ")
                tally.shown.append(f"{where} {pattern.label}: …{context}…")
        tally.steps_with_false_positive += false_positive
    return tally


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, required=True, help="a directory with the Who&When layout")
    parser.add_argument("--compare-ref", default=None, help="also measure the redaction of this git revision")
    parser.add_argument("--show", action="store_true", help="list every masked span with its context")
    args = parser.parse_args()
    texts = []
    for subset in SUBSETS:
        for file in sorted((args.dataset / subset).glob("*.json"), key=lambda p: int(p.stem)):
            for step in load_trajectory(file).steps:
                texts.append((f"{subset}/{file.name}#{step.index}", step.content))
    columns = {"this tree": measure(redaction_at(None), texts, args.show)}
    if args.compare_ref:
        columns[args.compare_ref] = measure(redaction_at(args.compare_ref), texts, False)
    current = columns["this tree"]
    logs = len({where.split("#")[0] for where, _ in texts})
    print(f"{current.steps} steps, {current.characters:,} characters, {logs} logs")
    labels = sorted({label for tally in columns.values() for label in tally.masks})
    print("| masks | " + " | ".join(columns) + " |")
    print("| --- |" + " --- |" * len(columns))
    for label in labels:
        kind = "by design" if label in BY_DESIGN else "false positive"
        print(f"| {label} ({kind}) | " + " | ".join(str(t.masks[label]) for t in columns.values()) + " |")
    print(
        "| steps with a false positive | "
        + " | ".join(
            f"{t.steps_with_false_positive} ({100 * t.steps_with_false_positive / max(t.steps, 1):.2f} %)"
            for t in columns.values()
        )
        + " |"
    )
    for line in current.shown:
        print(line)


if __name__ == "__main__":
    main()
