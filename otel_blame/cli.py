"""The ``otel-blame`` command group; each stage contributes its own subcommands.

Subcommands are imported only when invoked (:class:`LazyGroup`), so ``otel-blame --help`` and
``--version`` answer without loading gRPC, OpenTelemetry, pydantic or an LLM client. To add a
command, add one :class:`LazyCommand` line to ``COMMANDS``: its name, ``"module:attribute"`` of
the click command, and the one-line help shown in ``otel-blame --help``.
"""

from __future__ import annotations

import functools
import importlib
from typing import TYPE_CHECKING, NamedTuple

import click

from otel_blame import __version__

if TYPE_CHECKING:
    import logging

    from otel_blame.redaction import RedactingLogFilter


class LazyCommand(NamedTuple):
    """A subcommand known by name and help line; its module is imported on first use."""

    name: str
    target: str  # "package.module:command_object"
    short_help: str


COMMANDS: tuple[LazyCommand, ...] = (
    LazyCommand(
        "attribute",
        "otel_blame.commands.attribute:attribute_command",
        "Name the agent and step that broke a saved run (conversation or OTLP JSON file).",
    ),
    LazyCommand(
        "eval",
        "otel_blame.commands.evaluate:eval_command",
        "Score an attribution method on a Who&When-layout dataset.",
    ),
    LazyCommand(
        "serve",
        "otel_blame.commands.serve:serve",
        "Run the blame processor in an OpenTelemetry pipeline.",
    ),
    LazyCommand(
        "verdict",
        "otel_blame.commands.serve:verdict",
        "Send a late verdict (the run failed or succeeded) to a running processor.",
    ),
    LazyCommand(
        "demo",
        "otel_blame.commands.demo:demo",
        "Run the whole path offline: agents, processor, blame tables.",
    ),
    LazyCommand(
        "inject",
        "otel_blame.inject.cli:inject_command",
        "Plant faults in your own app's runs and measure how well blame finds them.",
    ),
    LazyCommand(
        "ui",
        "otel_blame.commands.ui:ui_command",
        "Serve the web UI over a blame store: failures, runs, culprits, attribute a file.",
    ),
    LazyCommand(
        "top",
        "otel_blame.commands.top:top_command",
        "The culprit leaderboard of a running processor, live in the terminal.",
    ),
    LazyCommand(
        "patterns",
        "otel_blame.commands.patterns:patterns_command",
        "Group saved traces or a blame store into failure patterns: what keeps breaking.",
    ),
)


class LazyGroup(click.Group):
    """A click group whose subcommands (``lazy``) are imported only when looked up to run."""

    def __init__(self, *args: object, lazy: tuple[LazyCommand, ...] = (), **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.lazy = {command.name: command for command in lazy}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is not None or cmd_name not in self.lazy:
            return command
        module_name, _, attribute = self.lazy[cmd_name].target.partition(":")
        command = getattr(importlib.import_module(module_name), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{self.lazy[cmd_name].target} is not a click command")
        self.add_command(command, cmd_name)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list from the registry's help lines: listing commands imports none of them."""
        rows = []
        for name in self.list_commands(ctx):
            if name in self.lazy and name not in self.commands:
                rows.append((name, self.lazy[name].short_help))
            else:
                command = self.commands.get(name)
                if command is not None and not command.hidden:
                    rows.append((name, command.get_short_help_str(formatter.width)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(
    cls=LazyGroup,
    lazy=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, "-V", "--version", prog_name="otel-blame")
@click.option("-v", "--verbose", count=True, help="More logging: -v for info, -vv for debug.")
def main(verbose: int) -> None:
    """Which agent broke your multi-agent LLM run, and at which step.

    Run 'otel-blame COMMAND --help' for the options of a command.
    """
    import logging  # here, not at the top: --help and --version stay fast

    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:  # every log line, ours or a library's, is masked
        handler.addFilter(_redact_log_record)


def _redact_log_record(record: logging.LogRecord) -> bool:
    """The handlers' filter: :class:`~otel_blame.redaction.RedactingLogFilter`, built when the first
    record is logged (its patterns cost a command that logs nothing, e.g. ``attribute``, 10 ms)."""
    return _log_filter().filter(record)


@functools.cache
def _log_filter() -> RedactingLogFilter:
    from otel_blame.redaction import RedactingLogFilter

    return RedactingLogFilter()


if __name__ == "__main__":
    main()
