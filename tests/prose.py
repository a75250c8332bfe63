"""The prose of a committed notebook with glued values placed (robustgrpo.book.glue), for the tests that check
what a notebook says: the values a chapter's ``*_values()`` functions compute, in the sentences that place them."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import nbformat

from robustgrpo.book.glue import format_value, placeholders

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def notebook_prose(notebook: str, values: Mapping[str, object], *, partial: bool = False) -> str:
    """The markdown of ``notebooks/<notebook>`` as one line of text, every placeholder replaced by its value of
    ``values`` as the runner formats it, the comments removed and whitespace collapsed.

    A placeholder without a value fails (KeyError naming it), unless ``partial``: then it keeps the committed text.
    """
    nb = nbformat.read(NOTEBOOKS / notebook, as_version=4)
    parts = []
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        text, last = [], 0
        for p in placeholders(cell.source, notebook):
            if p.name not in values and not partial:
                raise KeyError(f"{notebook}: no value for the placeholder {p.name!r}")
            value = format_value(values[p.name], p.spec) if p.name in values else p.text
            text += [cell.source[last:p.start], value]
            last = p.end
        parts.append("".join(text) + cell.source[last:])
    return " ".join(" ".join(parts).split())


def used_names(notebook: str) -> set[str]:
    """The names the prose of ``notebooks/<notebook>`` places."""
    nb = nbformat.read(NOTEBOOKS / notebook, as_version=4)
    return {p.name for c in nb.cells if c.cell_type == "markdown" for p in placeholders(c.source, notebook)}


__all__ = ["notebook_prose", "used_names", "NOTEBOOKS"]
