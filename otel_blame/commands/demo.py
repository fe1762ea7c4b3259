"""``otel-blame demo``: the whole path offline, in one process, ending in the web UI.

The demo's app (:mod:`otel_blame.demo`) sends its spans to an in-process blame processor; the
processor attributes the failed runs, exports the enriched traces (to Jaeger or as OTLP JSON
files) and keeps each blame in a blame store under ``--out``. The command prints one table per
failed run and the one command that opens the store in the web UI; ``--ui`` serves it at once.

The store is never replaced: each demo run adds its failures to it, next to what it already holds
(an earlier demo's failures, files uploaded in the web UI), and says so. ``--out`` holds this run's
trace files only: the trace files an earlier demo wrote there are removed first.
"""

from __future__ import annotations

import contextlib
import importlib.util
import shutil
import sys
import tempfile
import time
from pathlib import Path

import click

STORE_FILE = "blame-store.sqlite3"
_TABLE_CAP = 100  # the demo's lines and tables are no wider than this on a wide terminal


def _step(message: str) -> None:
    """One step of the demo, wrapped to the terminal's width under its arrow."""
    from otel_blame.terminal import columns, wrap

    lines = wrap(message, columns(_TABLE_CAP) - 4).splitlines() or [""]
    click.echo(click.style("==> ", fg="cyan", bold=True) + lines[0])
    for line in lines[1:]:
        click.echo("    " + line)


def _kept_before(path: Path) -> tuple[int, int]:
    """(failures, of which uploads) an existing store holds before this run adds to it."""
    if not path.exists():
        return 0, 0
    from otel_blame.store import StoreConfig, open_store

    store = open_store(StoreConfig(path=path))
    try:
        total = store.count()
        uploads = sum(1 for failure in store.failures(limit=500).failures if failure.source)
        return total, uploads
    finally:
        store.close()


def serve_ui(store_path: Path, host: str, port: int, first_trace: str | None) -> None:
    """Serve the web UI over the demo's store until Ctrl-C."""
    import uvicorn

    from otel_blame.store import StoreConfig, open_store
    from otel_blame.ui.app import create_ui_app

    store = open_store(StoreConfig(path=store_path))
    page = f"runs/{first_trace}" if first_trace else ""
    _step(f"web UI: http://{host}:{port}/ui/{page}  (Ctrl-C to stop)")
    try:
        uvicorn.run(create_ui_app(store), host=host, port=port, log_level="warning")
    finally:
        store.close()


@click.command("demo")
@click.option(
    "--jaeger",
    "jaeger_url",
    help="Jaeger query URL, e.g. http://localhost:16686; default: use it if it answers",
)
@click.option("--jaeger-otlp", help="Jaeger's OTLP/gRPC HOST:PORT (default: the --jaeger host, port 4317)")
@click.option("--no-jaeger", is_flag=True, help="do not look for Jaeger on http://localhost:16686")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("out/demo"),
    show_default=True,
    help=f"where the blame store ({STORE_FILE}) and, without Jaeger, the enriched traces (OTLP JSON) go",
)
@click.option("--timeout", type=float, default=60.0, show_default=True, help="seconds to wait for blame")
@click.option("--ui", "serve", is_flag=True, help="then serve the web UI over the demo's failures")
@click.option("--host", default="127.0.0.1", show_default=True, help="address the web UI listens on (--ui)")
@click.option(
    "--port", type=click.IntRange(1, 65535), default=8500, show_default=True, help="web UI port (--ui)"
)
def demo(
    jaeger_url: str | None,
    jaeger_otlp: str | None,
    no_jaeger: bool,
    out_dir: Path,
    timeout: float,
    serve: bool,
    host: str,
    port: int,
) -> None:
    """Run an instrumented multi-agent app offline and show which agent broke each failed run."""
    from otel_blame.attribution.registry import DEFAULT_METHOD
    from otel_blame.demo import (
        DEFAULT_JAEGER_URL,
        QUIET_PERIOD_SECONDS,
        Blame,
        DemoError,
        blame_from_jaeger,
        blame_from_recorded,
        default_jaeger_otlp,
        format_blame_table,
        jaeger_answers,
        remove_earlier_traces,
        run_app,
        write_otlp_json,
    )
    from otel_blame.demo.scenario import TASKS, DemoTask, TaskRunResult
    from otel_blame.demo.span_recorder import RecordingOTLPSink
    from otel_blame.terminal import columns

    if importlib.util.find_spec("autogen") is None:
        raise DemoError("the demo's app is an AG2 group chat: pip install 'otel-blame[autogen]'")
    if jaeger_url is not None and not jaeger_answers(jaeger_url, timeout=3.0):
        raise DemoError(f"Jaeger does not answer at {jaeger_url} (GET /api/services)")
    if jaeger_url is None and not no_jaeger and jaeger_answers(DEFAULT_JAEGER_URL):
        jaeger_url = DEFAULT_JAEGER_URL
    if jaeger_url is not None:
        jaeger_otlp = jaeger_otlp or default_jaeger_otlp(jaeger_url)

    from otel_blame.commands.serve import load_serve_config, serving_processor  # the `processor` extra

    store_path = out_dir / STORE_FILE
    out_dir.mkdir(parents=True, exist_ok=True)
    before, uploads = _kept_before(store_path)
    if before:
        kept = f"{before} failures" + (f", {uploads} of them uploaded in the web UI" if uploads else "")
        _step(f"the blame store {store_path} keeps what it holds ({kept}); this run adds to it")

    def progress(task: DemoTask, result: TaskRunResult) -> None:
        verdict = click.style("FAILED", fg="red") if result.failed else click.style("ok", fg="green")
        answer = str(result.final_answer)
        click.echo(f"    {task.name:<14} answer {answer:<10} expected {task.expected_answer:<8} {verdict}")

    with contextlib.ExitStack() as stack:
        sink: RecordingOTLPSink | None = None
        if jaeger_url is None:
            sink = stack.enter_context(RecordingOTLPSink())
            downstream = sink.endpoint
            _step(f"no Jaeger: enriched traces go to a local recorder and then to {out_dir}/")
        else:
            downstream = str(jaeger_otlp)
            _step(f"Jaeger at {jaeger_url}: enriched traces go to its OTLP endpoint {downstream}")

        wal_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="otel-blame-demo-wal-"))
        config = load_serve_config(
            environ={},
            overrides={
                "receivers": {"grpc_endpoint": "127.0.0.1:0", "http_endpoint": None},
                "wal": {"dir": wal_dir},
                "store": {"path": str(store_path)},
                "assembly": {"quiet_period": QUIET_PERIOD_SECONDS},
                "attribution": {"method": DEFAULT_METHOD},
                "exporter": {"endpoint": downstream},
            },
        )
        processor = serving_processor(config).start()  # with the blame store, as serve runs it
        stack.callback(processor.stop)
        _step(
            f"blame processor listening on {processor.grpc_endpoint} "
            f"(offline method {config.attribution.method}, no LLM)"
        )

        _step(f"running {len(TASKS)} tasks in an AG2 group chat (user, planner, coder, executor, reviewer)")
        results, span_count = run_app(str(processor.grpc_endpoint), TASKS, progress)
        failed = [r for r in results if r.failed]
        _step(f"sent {span_count} spans; {len(failed)} of {len(results)} runs failed; waiting for blame")

        blames: dict[str, Blame | None] = {}
        if sink is not None:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                spans = sink.spans()
                blames = {r.trace_id: blame_from_recorded(spans, r.trace_id, r.task) for r in failed}
                if all(blames.values()) and len(spans) >= span_count:
                    break
                time.sleep(0.2)
            processor.stop()
            spans = sink.spans()
            blames = {r.trace_id: blame_from_recorded(spans, r.trace_id, r.task) for r in failed}
            removed = remove_earlier_traces(out_dir)
            if removed:
                _step(f"removed {removed} trace files an earlier demo wrote in {out_dir}/")
            written = write_otlp_json(spans, [r.trace_id for r in results], out_dir)
        else:
            written = {}
            for result in failed:
                blames[result.trace_id] = blame_from_jaeger(
                    str(jaeger_url), result.trace_id, result.task, timeout
                )

    for result in failed:
        blame = blames.get(result.trace_id)
        click.echo("")
        if blame is None:
            click.echo(
                click.style(f"trace {result.trace_id} ({result.task.name}): no blame arrived", fg="red")
            )
            continue
        click.echo(format_blame_table(blame, result.task, columns(_TABLE_CAP)))
        if jaeger_url is not None:
            click.echo(f"  in Jaeger: {jaeger_url.rstrip('/')}/trace/{result.trace_id}")
        elif result.trace_id in written:
            click.echo(f"  enriched trace (OTLP JSON):\n    {written[result.trace_id]}")
    click.echo("")
    if written:
        _step(f"this run's {len(written)} traces are in {out_dir}/ as OTLP JSON (otel-blame attribute FILE)")
    if any(blames.get(r.trace_id) is None for r in failed):
        raise DemoError("some failed runs got no blame within the timeout")
    first = failed[0].trace_id if failed else None
    if serve:
        serve_ui(store_path, host, port, first)
        return
    held = f" (it holds {before + len(failed)} in all)" if before else ""
    _step(
        f"this run's {len(failed)} failures are in the blame store {store_path}{held}; open it in the web UI:"
    )
    click.echo(f"\n    {_this_command()} ui --store {store_path}\n")
    click.echo("  then open http://127.0.0.1:8500/ui/ in a browser.\n")


def _this_command() -> str:
    """How the user ran us (``.venv/bin/otel-blame`` under ``make demo``), so the line can be pasted."""
    invoked = Path(sys.argv[0]) if sys.argv else None
    if invoked is not None and invoked.name == "otel-blame" and str(invoked.parent) not in ("", "."):
        on_path = shutil.which("otel-blame")
        return "otel-blame" if on_path and Path(on_path).resolve() == invoked.resolve() else str(invoked)
    return "otel-blame"
