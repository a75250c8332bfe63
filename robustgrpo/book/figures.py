"""Report figures: every key figure of the notebooks, rebuilt by one command.

A report figure is a *builder*: a function that computes its data with
:mod:`robustgrpo.lab.metrics` (fixed seeds), draws it with its chapter's ``plots``
and returns a :class:`ReportFigure` (figure, caption, and the numbers behind
it). Builders register with :func:`report_figure` in the ``report`` module of
each chapter (``robustgrpo.book.<chapter>.report``, one chapter per notebook);
the notebooks call the same builders, so the
notebook figure and the report figure are one piece of code.

``python -m robustgrpo figures --out DIR`` runs :func:`build_all`: every
builder, saved as PNG, SVG and PDF, plus ``index.md`` (:func:`index_markdown`): an
overview table, then each figure with its caption, takeaway and the numbers behind it.
Builds are deterministic: same code, same bytes, on one machine and
environment (another processor's vector kernels may move a value in its last bits).
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping, Sequence

from matplotlib.figure import Figure

from robustgrpo.lab.files import make_folder
from robustgrpo.book.style import save_figure
from robustgrpo.book.text import num

__all__ = [
    "ReportFigure",
    "FigureSpec",
    "report_figure",
    "report_figures",
    "figure_dir",
    "save",
    "show",
    "caption_view",
    "numbers_view",
    "numbers_table",
    "CAPTION_SUMMARY",
    "NUMBERS_SUMMARY",
    "index_markdown",
    "index_takeaway",
    "build_all",
    "FIGURES_ENV",
]

#: Environment variable naming the folder notebooks save their figures to.
FIGURES_ENV = "ROBUSTGRPO_FIGURES"


@dataclass(frozen=True)
class ReportFigure:
    """A built figure: the matplotlib figure, its caption and its data.

    Attributes
    ----------
    name : str
        File stem (``01_seed_advantages``).
    figure : matplotlib.figure.Figure
    caption : str
        What the figure draws: its panels, marks, axes and setting (the
        setting's numbers included), never what they show.
    data : Any
        The numbers drawn (usually a tidy DataFrame).
    takeaway : str
        What the figure shows: what a reader should keep from it, in Markdown,
        with the numbers computed by the builder from ``data``. It shares no
        sentence with the caption (``tests/test_report.py`` checks every
        registered figure). Notebooks show it beneath the figure with
        :func:`show`, and the report index beneath the caption. In a chapter
        edited for readers it is one sentence with at most three numbers.
    numbers : str
        The numbers behind the figure that the takeaway leaves out, in
        Markdown (a table where they form one); shown folded beneath the
        takeaway (:func:`numbers_view`). Empty when there are none.
    """

    name: str
    figure: Figure
    caption: str
    data: Any = None
    takeaway: str = ""
    numbers: str = ""

    def _repr_png_(self) -> bytes:  # shown inline when a notebook cell returns it
        import io

        buf = io.BytesIO()
        self.figure.savefig(buf, format="png")
        return buf.getvalue()


@dataclass(frozen=True)
class FigureSpec:
    """A registered builder: name, notebook it belongs to, and the function."""

    name: str
    notebook: str
    builder: Callable[[], ReportFigure] = field(repr=False)


_REGISTRY: dict[str, FigureSpec] = {}


def report_figure(name: str, *, notebook: str) -> Callable[[Callable[..., ReportFigure]], Callable[..., ReportFigure]]:
    """Register a builder under ``name``; it must run with no arguments (defaults fixed)."""

    def decorate(fn: Callable[..., ReportFigure]) -> Callable[..., ReportFigure]:
        if name in _REGISTRY:
            raise ValueError(f"a report figure named {name!r} is already registered")
        _REGISTRY[name] = FigureSpec(name, notebook, fn)
        return fn

    return decorate


def report_figures() -> Mapping[str, FigureSpec]:
    """Every registered report figure, in name order (imports each chapter's ``report`` module)."""
    for chapter in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if chapter.ispkg:
            importlib.import_module(f"robustgrpo.book.{chapter.name}.report")
    return MappingProxyType(dict(sorted(_REGISTRY.items())))


_REPO = Path(__file__).resolve().parents[2]


def figure_dir(default: str | Path | None = None) -> Path:
    """The folder figures go to: ``$ROBUSTGRPO_FIGURES`` if set, else ``default``.

    Without ``default``: ``figures/`` at the top of the repository (ignored by
    git), or under the working directory when the package is used outside
    its repository.
    """
    if os.environ.get(FIGURES_ENV):
        return Path(os.environ[FIGURES_ENV])
    if default is not None:
        return Path(default)
    return _REPO / "figures" if (_REPO / "notebooks").is_dir() else Path("figures")


def save(rf: ReportFigure, directory: str | Path | None = None, formats: Sequence[str] = ("png", "svg")) -> list[Path]:
    """Save a built figure into ``directory`` (default :func:`figure_dir`)."""
    return save_figure(rf.figure, figure_dir() if directory is None else directory, rf.name, formats)


#: The summary line of the collapsed view that holds a figure's caption (what it draws) beneath its takeaway.
CAPTION_SUMMARY = "what the figure draws"
#: The summary line of the collapsed view that holds the numbers behind a figure beneath its takeaway.
NUMBERS_SUMMARY = "Numbers behind the figure"


def show(rf: ReportFigure, *, caption: bool = False) -> None:
    """Display a built figure in a notebook, then its takeaway (if it has one) as Markdown beneath it, headed
    "Takeaway:" unless it opens with its own bold heading, then the numbers behind it (if any) folded under
    :data:`NUMBERS_SUMMARY`, then (with ``caption``) its caption, folded.

    The caption, what the figure draws, sits in a collapsed ``<details>`` view (:data:`CAPTION_SUMMARY`): the
    notebook's prose above the figure says what is drawn already, and a reader opens the caption when wanted (Lab,
    Voila and exported HTML all fold it).
    """
    from IPython.display import Markdown, display

    display(rf.figure)
    if rf.takeaway:
        display(Markdown(rf.takeaway if rf.takeaway.startswith("**") else f"**Takeaway:** {rf.takeaway}"))
    if rf.numbers:
        display(Markdown(numbers_view(rf.numbers)))
    if caption:
        display(Markdown(caption_view(rf.caption)))


def caption_view(caption: str) -> str:
    """``caption`` as Markdown folded under :data:`CAPTION_SUMMARY` (blank lines around it: Markdown inside HTML).

    >>> print(caption_view("*x* against *y*."))
    <details><summary>what the figure draws</summary>
    <BLANKLINE>
    *x* against *y*.
    <BLANKLINE>
    </details>
    """
    return f"<details><summary>{CAPTION_SUMMARY}</summary>\n\n{caption}\n\n</details>"


def numbers_view(numbers: str) -> str:
    """``numbers`` as Markdown folded under :data:`NUMBERS_SUMMARY`, as :func:`caption_view` folds a caption.

    >>> print(numbers_view("| G | 8 |"))
    <details><summary>Numbers behind the figure</summary>
    <BLANKLINE>
    | G | 8 |
    <BLANKLINE>
    </details>
    """
    return f"<details><summary>{NUMBERS_SUMMARY}</summary>\n\n{numbers}\n\n</details>"


def numbers_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table for :attr:`ReportFigure.numbers`: ``header`` then one line per row; a float is written
    as :func:`~robustgrpo.book.text.num` writes it (3 decimals, ``0`` within 1e-8, thousands with separators),
    anything else as ``str``.

    >>> print(numbers_table(["estimator", "correct"], [["grpo", -0.10714], ["mc_grpo", 1000.0]]))
    | estimator | correct |
    |---|---|
    | grpo | -0.107 |
    | mc_grpo | 1,000 |
    """
    if not rows or any(len(r) != len(header) for r in rows):
        raise ValueError(f"numbers_table needs at least one row, each of {len(header)} cells (one per header)")

    def cell(x: object) -> str:
        return num(x) if isinstance(x, float) else str(x).replace("|", "\\|")

    return "\n".join([f"| {' | '.join(map(str, header))} |", "|" + "---|" * len(header),
                       *(f"| {' | '.join(cell(x) for x in r)} |" for r in rows)])


def index_takeaway(rf: ReportFigure) -> str:
    """The takeaway the report index prints for ``rf``: its takeaway without the caption where the takeaway repeats
    the caption inside it (a chapter not yet edited for readers composed one as caption plus more); empty when
    nothing is left.

    >>> index_takeaway(ReportFigure("x", None, "A drawn.", takeaway="A drawn. B shown."))
    'B shown.'
    >>> index_takeaway(ReportFigure("x", None, "A drawn.", takeaway="A drawn."))
    ''
    """
    caption, takeaway = rf.caption.strip(), rf.takeaway.strip()
    if caption and caption in takeaway:
        takeaway = " ".join(takeaway.replace(caption, " ").split())
    return takeaway


def _first_sentence(text: str) -> str:
    """The first sentence of ``text``: up to the first ``.``, ``!`` or ``?`` followed by a space and a capital."""
    return re.split(r"(?<=[.!?])\s+(?=[A-Z*_`(])", text.strip(), maxsplit=1)[0]


def index_markdown(built: Sequence[tuple[ReportFigure, FigureSpec, Sequence[Path]]], formats: Sequence[str]) -> str:
    """The report index: a title, an overview table (each figure's name linked to its entry, and its message: the
    first sentence of its takeaway as :func:`index_takeaway` gives it, or of its caption when it has none), then one
    entry per figure: image, caption, takeaway, the numbers behind it folded, notebook and files.

    A figure's entry is its name's heading (``## 01_seed_group``), so its anchor is the name in lower case.
    """
    def cell(text: str) -> str:  # one line of a Markdown table
        return " ".join(text.split()).replace("|", "\\|")

    lines = ["# robustgrpo report figures", "",
             "Rebuilt by `python -m robustgrpo figures`; each figure as " + ", ".join(formats) + ".", "",
             "| figure | what it shows |", "|---|---|"]
    for rf, _, _ in built:
        message = _first_sentence(index_takeaway(rf) or rf.caption)
        lines.append(f"| [{rf.name}](#{rf.name.lower()}) | {cell(message)} |")
    lines.append("")
    for rf, spec, paths in built:
        files = " ".join(f"[{p.suffix[1:]}]({p.name})" for p in paths)
        takeaway = index_takeaway(rf)
        shown = [takeaway if takeaway.startswith("**") else f"**Takeaway:** {takeaway}", ""] if takeaway else []
        numbers = [numbers_view(rf.numbers), ""] if rf.numbers else []
        lines += [f"## {rf.name}", "", f"![{rf.name}]({rf.name}.png)" if "png" in formats else "", "", rf.caption, "",
                  *shown, *numbers, f"Notebook: `{spec.notebook}`. Files: {files}", ""]
    return "\n".join(lines)


def build_all(
    out: str | Path,
    *,
    formats: Sequence[str] = ("png", "svg", "pdf"),
    names: Sequence[str] | None = None,
    progress: bool = True,
) -> list[tuple[ReportFigure, FigureSpec, list[Path]]]:
    """Build and save report figures into ``out``; write ``out/index.md``.

    Parameters
    ----------
    out : folder to write into (created if missing)
    formats : file formats per figure
    names : only these figures (default: all)
    progress : show a progress bar

    Returns
    -------
    list of (figure, spec, paths), in name order
    """
    from tqdm.auto import tqdm

    specs = report_figures()
    chosen = list(specs) if names is None else list(names)
    unknown = [n for n in chosen if n not in specs]
    if unknown:
        raise ValueError(f"unknown report figure(s) {unknown}; known: {', '.join(specs)}")
    out = make_folder(out)
    built = []
    for name in tqdm(chosen, desc="figures", disable=not progress):
        spec = specs[name]
        rf = spec.builder()
        if rf.name != name:
            raise RuntimeError(f"builder {name!r} returned a figure named {rf.name!r}")
        built.append((rf, spec, save_figure(rf.figure, out, rf.name, formats)))
    (out / "index.md").write_text(index_markdown(built, formats))
    return built
