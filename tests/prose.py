"""The prose of a committed notebook with glued values placed (robustgrpo.book.glue), for the tests that check
what a notebook says: the values a chapter's ``*_values()`` functions compute, in the sentences that place them;
and the house rule for a takeaway (one sentence, at most three numbers), with what counts as a number
(:func:`numbers_in`) and as a sentence (:func:`sentences_in`)."""

from __future__ import annotations

import re
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


# ------------------------------------------------------------------ the takeaway rule (issue 45, item 3)

#: Numerals that are names, not numbers: ``0/1`` (the reward kind), ``seed 000`` (the proposal documents),
#: cross-references (``notebook 04``, ``chapter 04``, ``section 2``) and a label in curly quotes (a judge's name
#: such as “hack: '#' judged 1.5”).
_NAMED = re.compile(r"\b0/1\b|\bseeds? \d{3}\b|\b(?:notebook|chapter|section)s? \d+\b|“[^”]*”", re.I)
#: A number: an optional sign, digits (with thousands commas), an optional decimal part, an optional exponent
#: (``1e-3``, ``10^6``, ``10⁶``), an optional percent sign; not part of a word or a name (``k3``, ``01_seed``).
_NUMBER = re.compile(r"(?<![\w.])[-+−]?\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\w])|(?<![\w.])[-+−]?\d+(?:\.\d+)?"
                     r"(?:[eE][-+−]?\d+|\^[-+−]?\d+|[⁰¹²³⁴⁵⁶⁷⁸⁹]+)?\s?%?(?![\w])")
_CODE = re.compile(r"`[^`]*`")
_COMMENT = re.compile(r"<!--.*?-->", re.S)
#: The end of a sentence: ``.``, ``!`` or ``?``, then a space and a capital, a digit, an emphasis mark, a backtick or
#: an opening parenthesis (``e.g.`` and ``i.e.`` would end one: takeaways do not use them).
_SENTENCE_END = re.compile(r"[.!?]\s+(?=[A-Z0-9*_`(])")


def plain(text: str) -> str:
    """``text`` without HTML comments (glue markers keep their value), code spans, emphasis marks and a leading
    ``**Takeaway:**``, whitespace collapsed."""
    text = _COMMENT.sub("", text)
    text = re.sub(r"^\s*\*\*Takeaway:?\*\*:?\s*", "", text)
    text = _CODE.sub("code", text)
    return " ".join(re.sub(r"(?<!\w)[*_]{1,2}(?=\S)|(?<=\S)[*_]{1,2}(?!\w)", "", text).split())


def numbers_in(text: str) -> list[str]:
    """The numbers a reader meets in ``text`` (Markdown), by the rule of this module.

    A number is a numeral as a reader meets it: ``8``, ``-0.220``, ``12.5 %``, ``1,000``, ``1e-3``, ``10^6``; one
    numeral, however written, counts once. Not counted: numerals inside code spans (names a reader types, such as
    ``reward_range=(0, 1)``), numerals that are part of a word (``k3``, ``01_seed``), the names ``0/1`` (the reward
    kind), ``seed 000`` and ``notebook 04`` / ``section 2``, and labels in curly quotes (“hack: '#' judged 1.5”).
    Everything else counts, formula constants included
    (``(G - 1)`` holds one number).

    >>> numbers_in("grpo gives **0.286** at G = 8 (12.5 %) on 0/1 rewards, `c=2.5`, seed 000's group")
    ['0.286', '8', '12.5 %']
    """
    return [m.group().strip() for m in _NUMBER.finditer(_NAMED.sub("name", plain(text)))]


def sentences_in(text: str) -> list[str]:
    """The sentences of ``text`` (Markdown): split after ``.``, ``!`` or ``?`` followed by a space and a capital, a
    digit or an opening mark; a decimal point (``0.5``) does not end one."""
    return [s for s in _SENTENCE_END.split(plain(text)) if s.strip()]


def takeaway_faults(text: str, *, most: int = 3) -> list[str]:
    """What keeps ``text`` from being a takeaway by the house rule: one sentence with at most ``most`` numbers
    (:func:`numbers_in`). An empty list when it is one."""
    faults = []
    if len(sentences_in(text)) != 1:
        faults.append(f"{len(sentences_in(text))} sentences")
    if len(numbers_in(text)) > most:
        faults.append(f"{len(numbers_in(text))} numbers {numbers_in(text)}")
    return faults


__all__ = ["notebook_prose", "used_names", "NOTEBOOKS", "plain", "numbers_in", "sentences_in", "takeaway_faults"]
