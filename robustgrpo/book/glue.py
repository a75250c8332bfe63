r"""Numbers in prose: a value computed in a code cell is named once and placed in the markdown by name.

In the spirit of Jupyter Book's ``glue``: the prose stays Markdown a writer edits, and every number in it
comes from the code. A code cell names its values::

    glue(fallback_values())            # a mapping of name -> value
    glue(mad=s["mad"], scale=s["scale"])

and a markdown cell places each by name between two HTML comments, with an optional format::

    the MAD is **<!--glue:mad-->0<!--/glue-->**, the scale <!--glue:scale:.3f-->3.502<!--/glue-->

The text between the comments is the value as the notebook last computed it. The executor
(:func:`robustgrpo.book.execute.run_notebook`) fills every placeholder of the executed copy from the
values its code cells glued (:func:`fill`), so the pages ``python -m robustgrpo notebooks`` writes, and
anything built from the executed notebooks, show the numbers of that run. The committed notebook
keeps the values of its last run between the comments, so JupyterLab, GitHub and any Markdown viewer
show a number, never a placeholder (the comments themselves are invisible); the tests execute every
notebook and fail where a committed value differs from the computed one (:func:`differences`), and
``python -m robustgrpo notebooks --out DIR --update-prose`` writes the computed values back
(:func:`update_prose`).

Rules, each checked by :func:`fill` with a ``ValueError`` that names the notebook and the value:

* every placeholder has a value, glued by a code cell of the same notebook;
* every glued value is placed at least once;
* a name is glued by one code cell (rerunning that cell in Lab glues it anew; a second cell gluing it
  is an error);
* a value is a finite ``float``, an ``int`` or a ``str`` (numpy scalars are taken as their Python
  number; anything else, a tensor or a bool, is refused: glue ``float(x)`` or a word);
* a placeholder is well formed: a name that is a Python identifier, a known format, a closing comment;
* a placeholder does not begin a line (nor a list item or a quote): Markdown reads a line that begins
  with ``<!--`` as raw HTML, and the rest of that line would lose its Markdown (put a word before it).

Formats: none (a ``float`` as :func:`~robustgrpo.book.text.num` writes it, 3 decimals and ``0`` within
``1e-8``; an ``int`` or a ``str`` as it is), any Python format specification (``.3f``, ``,.0f``, ``+.2f``,
``.1%``, ``g``), ``pct`` / ``pct0`` .. ``pct3`` (:func:`~robustgrpo.book.text.pct`, ``12.5 %``) and ``code``
(the text in backticks: a name such as an estimator's, which a placeholder cannot sit inside).
"""

from __future__ import annotations

import difflib
import json
import math
import numbers
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from robustgrpo.book.text import num, pct

__all__ = ["MIME", "glue", "Placeholder", "placeholders", "format_value", "glued_values", "fill_text", "fill",
           "differences", "update_prose"]

#: The MIME type of the output :func:`glue` displays: the named values as JSON. No front end renders it
#: (JupyterLab shows nothing for it), and the executor removes it once the values are in the prose.
MIME = "application/vnd.robustgrpo.glue+json"

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
#: One placeholder: ``<!--glue:NAME-->TEXT<!--/glue-->`` or ``<!--glue:NAME:FORMAT-->TEXT<!--/glue-->``; TEXT holds
#: no comment.
_PLACEHOLDER = re.compile(r"<!--glue:(?P<name>[^:>]*?)(?::(?P<spec>[^>]*?))?-->(?P<text>(?:(?!<!--).)*?)<!--/glue-->",
                          re.S)
_PCT = re.compile(r"pct(\d)?\Z")
#: A placeholder at the start of a line, of a list item or of a quote: CommonMark starts an HTML block there.
_LINE_START = re.compile(r"^[ \t>]*(?:(?:[-*+]|\d+[.)])[ \t]+)?<!--/?glue", re.M)

Value = int | float | str


def _checked(name: str, value: Any) -> Value:
    """``value`` as a Python int, float or str, or a ``ValueError`` naming ``name``."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"glue name {name!r} is not a Python identifier; use letters, digits and underscores")
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        raise ValueError(f"glue value {name!r} is a bool ({value}); glue the word the prose should say instead")
    if isinstance(value, str):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        x = float(value)
        if not math.isfinite(x):
            raise ValueError(f"glue value {name!r} is {x}, not a finite number; a number in prose must be finite")
        return x
    raise ValueError(f"glue value {name!r} is a {type(value).__name__}; glue an int, a float or a str "
                     "(float(x) for a tensor or an array element)")


def glue(values: Mapping[str, Any] | None = None, /, **named: Any) -> None:
    """Name values for the prose of this notebook (in a code cell).

    Parameters
    ----------
    values : mapping of str to value, optional
        Names and values, e.g. the dict a chapter's ``*_values()`` function returns.
    **named
        More names and values.

    Each value is an ``int``, a finite ``float`` or a ``str`` (numpy scalars are taken as Python numbers);
    a name is a Python identifier. The values go into one output of type :data:`MIME`, which no front end
    shows; the executor reads them (:func:`glued_values`) and fills the prose with them (:func:`fill`).

    Raises
    ------
    ValueError
        A name that is not an identifier or is given twice; a value of another type, a bool, or a NaN or
        infinity; no value at all.
    """
    from IPython.display import display

    given = dict(values or {})
    twice = sorted(set(given) & set(named))
    if twice:
        raise ValueError(f"glue names {twice} are given twice (in the mapping and as keywords); give each once")
    given.update(named)
    if not given:
        raise ValueError("glue was given no values; pass a mapping or name=value pairs")
    display({MIME: {name: _checked(name, value) for name, value in given.items()}}, raw=True)


@dataclass(frozen=True)
class Placeholder:
    """One placeholder of a markdown source: its name, format (``None``: the default), current text and span."""

    name: str
    spec: str | None
    text: str
    start: int
    end: int


def placeholders(source: str, where: str = "markdown") -> list[Placeholder]:
    """The placeholders of one markdown ``source``, in order.

    ``ValueError`` (naming ``where``) for a malformed one: an opening comment without its closing comment
    (or the reverse), a name that is not an identifier, a format that :func:`format_value` does not know.
    """
    found = [Placeholder(m["name"], m["spec"], m["text"], m.start(), m.end()) for m in _PLACEHOLDER.finditer(source)]
    opened, closed = source.count("<!--glue:"), source.count("<!--/glue-->")
    if opened != len(found) or closed != len(found):
        inside = _PLACEHOLDER.sub("", source)
        bad = re.search(r"<!--/?glue[^>]*>?.{0,40}", inside, re.S)
        fragment = bad.group(0) if bad else source[:60]
        raise ValueError(f"{where}: a malformed glue placeholder near {fragment!r}; write "
                         "<!--glue:NAME-->value<!--/glue--> (or <!--glue:NAME:FORMAT-->value<!--/glue-->)")
    starts = _LINE_START.search(source)
    if starts:
        line = source[starts.start():].split("\n", 1)[0]
        raise ValueError(f"{where}: the line {line[:60]!r} begins with a glue placeholder, which Markdown reads as raw "
                         "HTML (the rest of the line would lose its Markdown); put a word before it")
    for p in found:
        if not _NAME.match(p.name):
            raise ValueError(f"{where}: glue placeholder name {p.name!r} is not a Python identifier")
        if p.spec is not None:
            try:
                format_value(1.0 if p.spec != "code" else "x", p.spec)
            except ValueError:
                raise ValueError(f"{where}: glue placeholder {p.name!r} has an unknown format {p.spec!r}; use a Python "
                                 "format such as .3f, ,.0f or .1%, or pct, pct0..pct3, code") from None
    return found


def format_value(value: Value, spec: str | None = None) -> str:
    """``value`` as the prose writes it under the format ``spec`` (see the module's docstring).

    >>> format_value(-0.10706), format_value(10000.0), format_value(8), format_value("rank", "code")
    ('-0.107', '10,000', '8', '`rank`')
    >>> format_value(0.7265625, "pct"), format_value(0.7265625, ".1%"), format_value(1000.0, ",.0f")
    ('72.7 %', '72.7%', '1,000')
    """
    if spec is None or spec == "":
        return num(value) if isinstance(value, float) else str(value)
    if spec == "code":
        return f"`{value}`"
    match = _PCT.match(spec)
    if match:
        if isinstance(value, str):
            raise ValueError(f"format {spec!r} needs a number, got the text {value!r}")
        return pct(value, int(match[1]) if match[1] else 1)
    try:
        return format(value, spec)
    except (ValueError, TypeError) as err:
        raise ValueError(f"format {spec!r} does not apply to {value!r}: {err}") from None


def _is_glue(output: Any) -> bool:
    return output.get("output_type") in ("display_data", "execute_result") and MIME in output.get("data", {})


def glued_values(nb: Any, notebook: str = "notebook") -> dict[str, Value]:
    """Every value the code cells of the executed notebook ``nb`` glued, by name, in the order glued.

    ``ValueError`` naming ``notebook`` and the name for a name glued by two cells.
    """
    values: dict[str, Value] = {}
    where: dict[str, int] = {}
    for index, cell in enumerate(nb.cells):
        for output in filter(_is_glue, cell.get("outputs", [])):
            payload = output["data"][MIME]
            if isinstance(payload, str):  # nbformat may keep a JSON output as its text
                payload = json.loads(payload)
            for name, value in payload.items():
                if name in values:
                    raise ValueError(f"{notebook}: glue value {name!r} is glued by cells {where[name]} and {index}; "
                                     "glue each name once")
                values[name], where[name] = _checked(name, value), index
    return values


def fill_text(source: str, values: Mapping[str, Value], where: str = "markdown") -> str:
    """``source`` with every placeholder's text replaced by its value, formatted (the comments kept).

    ``ValueError`` naming ``where`` and the name for a placeholder without a value (with the closest
    glued name, when one is close).
    """
    parts, last = [], 0
    for p in placeholders(source, where):
        if p.name not in values:
            close = difflib.get_close_matches(p.name, list(values), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"{where}: glue placeholder {p.name!r} has no value: no code cell glues it "
                             f"(glue({p.name}=...)){hint}")
        try:
            text = format_value(values[p.name], p.spec)
        except ValueError as err:
            raise ValueError(f"{where}: glue placeholder {p.name!r}: {err}") from None
        spec = "" if p.spec is None else f":{p.spec}"
        parts += [source[last:p.start], f"<!--glue:{p.name}{spec}-->{text}<!--/glue-->"]
        last = p.end
    return "".join(parts) + source[last:]


def fill(nb: Any, notebook: str = "notebook") -> dict[str, Value]:
    """Fill the prose of the executed notebook ``nb`` in place with the values its code cells glued, and
    remove the outputs that carried them; return the values.

    Raises
    ------
    ValueError
        Naming ``notebook`` and the name: a placeholder without a value, a value no placeholder uses, a name
        glued twice, a malformed placeholder.
    """
    values = glued_values(nb, notebook)
    used: set[str] = set()
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            where = f"{notebook}, markdown cell {index}"
            used |= {p.name for p in placeholders(cell.source, where)}
            cell.source = fill_text(cell.source, values, where)
    unused = [name for name in values if name not in used]
    if unused:
        raise ValueError(f"{notebook}: glued value(s) {unused} are placed in no markdown cell; place each with "
                         f"<!--glue:NAME-->...<!--/glue--> or stop gluing it")
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs if not _is_glue(o)]
    return values


def differences(committed: Any, filled: Any) -> list[str]:
    """Where the committed notebook's prose holds other values than the filled (executed) copy: one line per
    placeholder, ``cell 4, mad: committed '1', computed '0'``. Empty when the prose is up to date."""
    prose = [(i, c.source) for i, c in enumerate(committed.cells) if c.cell_type == "markdown"]
    again = [c.source for c in filled.cells if c.cell_type == "markdown"]
    if len(prose) != len(again):
        return [f"the notebooks have {len(prose)} and {len(again)} markdown cells: not the same notebook"]
    lines = []
    for (index, old), new in zip(prose, again):
        before, after = placeholders(old, f"cell {index}"), placeholders(new, f"cell {index}")
        for a, b in zip(before, after):
            if a.text != b.text:
                lines.append(f"cell {index}, {a.name}: committed {a.text!r}, computed {b.text!r}")
    return lines


def update_prose(source: str | Path, filled: Any) -> list[str]:
    """Write the values of the filled (executed) copy ``filled`` into the prose of the notebook file ``source``;
    return :func:`differences` (what changed). Only the text between placeholders' comments changes; the
    file is written as the repository keeps notebooks (sorted keys, one-space indent), and only if a value
    changed."""
    import nbformat

    path = Path(source)
    committed = nbformat.read(path, as_version=4)
    changed = differences(committed, filled)
    if not changed:
        return []
    if changed[0].startswith("the notebooks have"):
        raise ValueError(f"{path.name}: {changed[0]}")
    markdown = iter(c.source for c in filled.cells if c.cell_type == "markdown")
    raw = json.loads(path.read_text(encoding="utf-8"))
    for cell in raw["cells"]:
        if cell["cell_type"] == "markdown":
            cell["source"] = next(markdown).splitlines(keepends=True)
    path.write_text(json.dumps(raw, sort_keys=True, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return changed
