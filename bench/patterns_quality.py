"""How well failure patterns group failures by what really went wrong, beside grouping by blamed agent.

Two data sets, each grouped as the processor groups (``otel_blame.patterns``: every verdict's cause,
the oldest similar pattern of its signature, in the order the runs come):

- AEGIS development runs (``/work/shared/aegis``): each run attributed by the offline ranker and
  described as the processor describes a blame (``describe_failure``); workflow = the run's system
  shape. A run's label is the MAST failure mode of its blamed agent when that agent is faulty, else
  the mode most of its faulty agents were steered into. Reported: purity and normalised mutual
  information (NMI, arithmetic mean of the entropies) against the label's MAST group (FM-1/2/3) and
  against the mode itself, for every run and for the decided runs alone (an undecided run is in its
  workflow's undecided group, or in a pattern of what is decided about it).
- zoo campaigns (``bench/zoo.py --data-dir DIR``: one folder per app with the labelled runs of an
  ``otel-blame inject`` campaign): each run's saved trajectory attributed by the offline default and
  grouped per app; the label is the planted fault kind.

The baseline on the same runs is today's only grouping (``otel-blame top``, ``RepeatedCulpritAgent``):
by (service, blamed agent), the service being an AEGIS run's system shape and a zoo run's app. Verdicts of
AEGIS are cached (``--verdicts FILE``: read when it exists, else written), so changing the grouping
does not re-attribute 7,626 runs.

Usage: python bench/patterns_quality.py [--aegis /work/shared/aegis] [--verdicts aegis-verdicts.jsonl]
                                        [--zoo DIR] [--similarity 90] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import random
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path

from otel_blame.attribution.registry import create_method
from otel_blame.attribution.result import Attribution
from otel_blame.attribution.systemic import describe_failure
from otel_blame.patterns import DEFAULT_SIMILARITY, PatternIndex, cause_of
from otel_blame.trajectory import Trajectory


@dataclass(frozen=True)
class Grouped:
    """One run: its pattern, its baseline group, whether its verdict was decided, and its labels."""

    pattern: Hashable
    by_agent: Hashable
    decided: bool
    labels: dict[str, str]
    in_pattern: bool = True  # False: in its workflow's undecided group


def purity(groups: Sequence[Hashable], labels: Sequence[str]) -> float:
    """The share of runs whose label is their group's most common label."""
    members: dict[Hashable, Counter[str]] = defaultdict(Counter)
    for group, label in zip(groups, labels, strict=True):
        members[group][label] += 1
    return sum(max(counts.values()) for counts in members.values()) / max(1, len(labels))


def _entropy(counts: Sequence[int], total: int) -> float:
    return -sum(n / total * math.log(n / total) for n in counts if n)


def nmi(groups: Sequence[Hashable], labels: Sequence[str]) -> float:
    """Normalised mutual information, I(G;L) / mean(H(G), H(L)) (1 for one group per label)."""
    total = len(labels)
    if not total:
        return 0.0
    joint = Counter(zip(groups, labels, strict=True))
    by_group, by_label = Counter(groups), Counter(labels)
    mutual = sum(
        n / total * math.log(n * total / (by_group[g] * by_label[lab])) for (g, lab), n in joint.items()
    )
    mean = (_entropy(list(by_group.values()), total) + _entropy(list(by_label.values()), total)) / 2
    return mutual / mean if mean > 0 else 1.0


def assign(
    index: PatternIndex, service: str, workflow: str, trajectory: Trajectory, verdict: Attribution
) -> tuple[str, bool]:
    """The run's pattern id, and whether it is a pattern (not its workflow's undecided group)."""
    cause = cause_of(service, workflow, trajectory, verdict)
    known, _ = index.assign(cause, 0.0)
    return known.id, not cause.undecided


# --- AEGIS -----------------------------------------------------------------------------------------


def aegis_verdicts(path: Path, cache: Path | None) -> tuple[list, dict[int, Attribution]]:
    from otel_blame.datasets.aegis import load_runs

    runs = load_runs(path)
    if cache is not None and cache.is_file():
        verdicts = {}
        for line in cache.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            verdicts[int(row["line"])] = Attribution.model_validate(row["attribution"])
        print(f"AEGIS: {len(verdicts)} cached verdicts from {cache}", file=sys.stderr)
        return runs, verdicts
    method = create_method("ranker")
    verdicts, started = {}, time.process_time()
    for run in runs:
        verdicts[run.line] = method.attribute(run.trajectory)
    print(f"AEGIS: attributed {len(runs)} runs in {time.process_time() - started:.0f} CPU s", file=sys.stderr)
    if cache is not None:
        with cache.open("w", encoding="utf-8") as out:
            for line, verdict in verdicts.items():
                out.write(json.dumps({"line": line, "attribution": verdict.model_dump(mode="json")}) + "\n")
    return runs, verdicts


def aegis_label(run, agent: str) -> str:  # noqa: ANN001 - an AegisRun
    """The blamed agent's failure mode when it is faulty, else the mode most faulty agents share."""
    if run.is_faulty(agent):
        return run.faulty[agent][0]
    modes = Counter(mode for modes in run.faulty.values() for mode in modes)
    return min(modes, key=lambda mode: (-modes[mode], mode)) if modes else "none"


def group_aegis(runs, verdicts: dict[int, Attribution], similarity: float) -> list[Grouped]:  # noqa: ANN001
    from otel_blame.attribution.modes import mast_group

    index = PatternIndex(similarity)
    out = []
    for run in runs:
        verdict = describe_failure(run.trajectory, verdicts[run.line])
        pattern, in_pattern = assign(index, "aegis", run.shape, run.trajectory, verdict)
        mode = aegis_label(run, verdict.agent)
        out.append(
            Grouped(
                pattern,
                (run.shape, verdict.agent),
                verdict.decided,
                {"group": mast_group(mode), "mode": mode},
                in_pattern,
            )
        )
    return out


# --- the zoo ---------------------------------------------------------------------------------------


def group_zoo(folders: Sequence[Path], similarity: float) -> dict[str, list[Grouped]]:
    """Per app (``DIR/<app>/`` of each campaign folder): its labelled runs attributed by the offline
    default and grouped, the campaigns in the order given, as one processor would see them."""
    from otel_blame.inject.dataset import SUBSET

    method = create_method("heuristic")
    indexes: dict[str, PatternIndex] = {}
    out: dict[str, list[Grouped]] = {}
    for folder in folders:
        for app_dir in sorted(p for p in folder.iterdir() if (p / SUBSET).is_dir()):
            index = indexes.setdefault(app_dir.name, PatternIndex(similarity))
            for path in sorted((app_dir / SUBSET).glob("*.json"), key=lambda p: int(p.stem)):
                raw = json.loads(path.read_text(encoding="utf-8"))
                trajectory = Trajectory.model_validate(raw["trajectory"])
                verdict = describe_failure(trajectory, method.attribute(trajectory))
                workflow = trajectory.task.workflow or trajectory.task.name
                pattern, in_pattern = assign(index, app_dir.name, workflow, trajectory, verdict)
                label = str(raw.get("fault_kind") or "unknown")
                out.setdefault(app_dir.name, []).append(
                    Grouped(pattern, verdict.agent, verdict.decided, {"fault": label}, in_pattern)
                )
    return out


# --- scoring ---------------------------------------------------------------------------------------


def chance_purity(groups: Sequence[Hashable], labels: Sequence[str], draws: int = 20) -> float:
    """The purity of groups of the same sizes drawn at random (labels shuffled): what the number and
    sizes of the groups alone give (more, smaller groups are purer by themselves)."""
    shuffled, found = list(labels), []
    generator = random.Random(0)
    for _ in range(draws):
        generator.shuffle(shuffled)
        found.append(purity(groups, shuffled))
    return sum(found) / len(found)


def scores(rows: Sequence[Grouped], label: str) -> dict[str, float]:
    labels = [row.labels[label] for row in rows]
    patterns = [row.pattern for row in rows]
    agents = [row.by_agent for row in rows]
    return {
        "runs": len(rows),
        "patterns": len(set(patterns)),
        "agents": len(set(agents)),
        "purity": purity(patterns, labels),
        "purity_by_agent": purity(agents, labels),
        "purity_by_chance": chance_purity(patterns, labels),
        "nmi": nmi(patterns, labels),
        "nmi_by_agent": nmi(agents, labels),
    }


def row_text(name: str, s: dict[str, float]) -> str:
    return (
        f"| {name} | {s['runs']} | {s['patterns']} / {s['agents']} | {s['purity']:.3f} | "
        f"{s['purity_by_agent']:.3f} | {s['purity_by_chance']:.3f} | {s['nmi']:.3f} | "
        f"{s['nmi_by_agent']:.3f} |"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--aegis", type=Path, default=Path("/work/shared/aegis"))
    parser.add_argument("--no-aegis", action="store_true")
    parser.add_argument(
        "--verdicts", type=Path, default=None, help="cache of the AEGIS verdicts (JSON lines)"
    )
    parser.add_argument(
        "--zoo", type=Path, nargs="*", default=[], help="bench/zoo.py --data-dir folders (campaigns)"
    )
    parser.add_argument("--similarity", type=float, nargs="+", default=[DEFAULT_SIMILARITY])
    parser.add_argument("--json", type=Path, default=None, help="write every figure here")
    args = parser.parse_args(argv)
    header = (
        "| runs | n | groups: patterns / by agent | purity | by agent | by chance | NMI | NMI by agent |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- |"
    )
    figures: dict[str, object] = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.node()} {platform.machine()}",
        "python": platform.python_version(),
    }
    print(f"{figures['date']} · {platform.machine()} · python {figures['python']}")
    if not args.no_aegis:
        runs, verdicts = aegis_verdicts(args.aegis, args.verdicts)
        for similarity in args.similarity:
            rows = group_aegis(runs, verdicts, similarity)
            decided = [row for row in rows if row.decided]
            patterned = [row for row in rows if row.in_pattern]
            print(f"\nAEGIS, similarity {similarity:g} (label: the MAST group / the mode)\n{header}")
            for name, subset, label in (
                ("runs in patterns, MAST group", patterned, "group"),
                ("runs in patterns, mode", patterned, "mode"),
                ("decided runs, MAST group", decided, "group"),
                ("decided runs, mode", decided, "mode"),
                ("all runs (undecided groups too), MAST group", rows, "group"),
                ("all runs (undecided groups too), mode", rows, "mode"),
            ):
                result = scores(subset, label)
                figures[f"aegis/{similarity:g}/{name}"] = result
                print(row_text(name, result))
    if args.zoo:
        for similarity in args.similarity:
            apps = group_zoo(args.zoo, similarity)
            print(f"\nzoo, similarity {similarity:g} (label: the planted fault kind)\n{header}")
            everything: list[Grouped] = []
            for app, rows in apps.items():
                result = scores([r for r in rows if r.in_pattern], "fault")
                figures[f"zoo/{similarity:g}/{app}"] = result
                print(row_text(f"{app}, runs in patterns", result))
                everything += [
                    Grouped((app, r.pattern), (app, r.by_agent), r.decided, r.labels, r.in_pattern)
                    for r in rows
                ]
            for name, subset in (
                ("all apps, runs in patterns", [r for r in everything if r.in_pattern]),
                ("all apps, decided runs", [r for r in everything if r.decided]),
                ("all apps, all runs (undecided groups too)", everything),
            ):
                result = scores(subset, "fault")
                figures[f"zoo/{similarity:g}/{name}"] = result
                print(row_text(name, result))
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
