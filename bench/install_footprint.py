"""Installed size and package count of each way to install otel-blame, each in a fresh venv.

    python bench/install_footprint.py                 # base, [otlp], [processor]
    python bench/install_footprint.py --extras "" otlp "processor,otlp"
    python bench/install_footprint.py --extras "" --with opentelemetry-util-genai   # what a dependency adds

Every install is ``pip install -c constraints.txt '<this checkout>[extras]'`` (the pinned versions the
tests use; ``--with PKG ...`` measures each install a second time with those packages added, what a new
dependency would cost; pip's cache is allowed, it changes nothing in what ends up installed). The size is the
venv's ``site-packages`` minus what a bare venv already has (pip); the count is the number of
distributions pip lists, pip itself and otel-blame excluded. Also checks what each install can do:
import the instrumentation, and run ``otel-blame --help``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BARE = {"pip", "setuptools", "wheel", "otel-blame", "otel_blame"}


@dataclass
class Footprint:
    extras: str
    also: tuple[str, ...]
    packages: int
    size_bytes: int
    instrumentation_imports: bool
    cli_exit_code: int
    cli_says: str


def _tree_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def measure(extras: str, workdir: Path, also: tuple[str, ...] = ()) -> Footprint:
    venv = workdir / f"venv-{extras.replace(',', '-') or 'base'}{'-with' if also else ''}"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = next((venv / "lib").glob("python3*/site-packages"))
    bare = _tree_size(site)
    target = f"{ROOT}[{extras}]" if extras else str(ROOT)
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "-c", str(ROOT / "constraints.txt"), target, *also],
        check=True,
        timeout=900,
    )
    listed = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=freeze"], check=True, capture_output=True, text=True
    ).stdout.split()
    names = {line.split("==")[0].lower() for line in listed}
    imports = subprocess.run(
        [str(python), "-c", "from otel_blame.instrumentation import task, record_message, agent_turn"],
        capture_output=True,
    )
    cli = subprocess.run([str(venv / "bin" / "otel-blame"), "--help"], capture_output=True, text=True)
    said = (cli.stderr or cli.stdout).strip().splitlines()
    return Footprint(
        extras=extras,
        also=also,
        packages=len(names - BARE),
        size_bytes=_tree_size(site) - bare,
        instrumentation_imports=imports.returncode == 0,
        cli_exit_code=cli.returncode,
        cli_says=said[0] if said else "",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extras", nargs="*", default=["", "otlp", "processor"])
    parser.add_argument("--with", dest="also", nargs="*", default=[], help="packages to add to each install")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="otel-blame-footprint-") as tmp:
        results = []
        for extras in args.extras:
            results.append(measure(extras, Path(tmp)))
            if args.also:
                results.append(measure(extras, Path(tmp), tuple(args.also)))
    baseline = results[-1]
    print("| install | packages | installed size | share of the last | imports | `otel-blame --help` |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in results:
        name = f"`pip install otel-blame[{r.extras}]`" if r.extras else "`pip install otel-blame`"
        if r.also:
            name += " + " + ", ".join(f"`{package}`" for package in r.also)
        print(
            f"| {name} | {r.packages} | {r.size_bytes / 2**20:.1f} MiB | "
            f"{r.size_bytes / baseline.size_bytes:.2f} | {'yes' if r.instrumentation_imports else 'NO'} | "
            f"exit {r.cli_exit_code}: {r.cli_says[:70]} |"
        )


if __name__ == "__main__":
    main()
