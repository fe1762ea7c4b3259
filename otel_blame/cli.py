"""The ``otel-blame`` command group; each stage contributes its own subcommands."""

from __future__ import annotations

import logging

import click

from otel_blame import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="otel-blame")
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
def main(verbose: int) -> None:
    """Which agent broke your multi-agent LLM run, and at which step."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


from otel_blame.attribution.cli import attribute_command, eval_command  # noqa: E402

main.add_command(attribute_command)
main.add_command(eval_command)

from otel_blame.processor.cli import serve, verdict  # noqa: E402

main.add_command(serve)
main.add_command(verdict)

from otel_blame.demo import demo  # noqa: E402

main.add_command(demo)

from otel_blame.ui.cli import top_command, ui_command  # noqa: E402  (imports its server parts lazily)

main.add_command(ui_command)
main.add_command(top_command)

if __name__ == "__main__":
    main()
