"""Text fitted to a width (the terminal's, from :func:`columns`): names cut at a word, not inside one;
sentences wrapped.

Used by the terminal surfaces (``otel-blame attribute``, ``top``, ``demo``, ``inject``), which must
read at 80 columns. Pure standard library, so a command can import it without slowing its start
(and outside ``otel_blame.ui``, whose web stack ``attribute`` never loads).
"""

from __future__ import annotations

import re
import shutil
import textwrap

TERMINAL_COLUMNS = 80  # what every CLI output fits when the terminal does not say
# where a name may be cut: after a separator, or before an upper-case letter that follows a lower-case
# one ("Validation_Expert", "gaia-annotation-expert", "WebSurfer")
_BOUNDARY = re.compile(r"(?<=[\s_\-./:])|(?<=[a-z])(?=[A-Z])")


def columns(cap: int | None = None) -> int:
    """The terminal's width (``TERMINAL_COLUMNS`` when it does not say), at most ``cap`` when given."""
    width = shutil.get_terminal_size((TERMINAL_COLUMNS, 24)).columns
    return width if cap is None else min(width, cap)


def fit_name(name: str, width: int) -> str:
    """``name`` in at most ``width`` characters: whole when it fits, else cut at the last word boundary
    that keeps at least two fifths of the width, with ``…``; a hard cut only when no such boundary
    exists. The full name belongs in a title or a wider view."""
    if len(name) <= width:
        return name
    if width <= 1:
        return "…"[:width]
    cuts = [match.start() for match in _BOUNDARY.finditer(name, 0, width) if match.start() <= width - 1]
    usable = [cut for cut in cuts if cut >= max(1, (2 * width) // 5)]
    cut = usable[-1] if usable else width - 1
    return name[:cut].rstrip(" _-./:") + "…"


def wrap(text: str, width: int = TERMINAL_COLUMNS, indent: str = "") -> str:
    """One paragraph wrapped at ``width`` (long words broken only when a word is wider than a line)."""
    return textwrap.fill(
        " ".join(text.split()),
        width=max(20, width),
        initial_indent=indent,
        subsequent_indent=indent,
        break_on_hyphens=False,
    )
