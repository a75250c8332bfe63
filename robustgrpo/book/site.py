"""The book: the executed notebooks as linked pages that read offline, with a home page.

``python -m robustgrpo book --out DIR`` writes, into ``DIR``:

* ``index.html``, the home page: one card per chapter of :func:`~robustgrpo.book.execute.list_notebooks`
  (its first figure as a small picture, its title and its lead: the one sentence under the title in the
  notebook's first cell, :func:`chapter_head`), and links to the trap lesson and to the report figures;
* ``NN_name.html``, one page per chapter: its H1 as the page's ``<title>``, links home and to the previous and
  next chapters, the prose, the printed text and tables and the figures, and no code but the cells tagged
  :data:`~robustgrpo.book.execute.CALL_TAG` (the call a trainer writes). Each figure's alt text is its
  takeaway, the markdown cell just below it (:func:`alt_text`). Each dashboard, which needs a kernel, is shown
  as a picture of its figure at its default setting (:func:`dashboard_figures`, drawn by plotly's image export)
  beside the commands that open it live; a finished progress bar as the line of text it ended on; a widget of
  any other kind is an error, not a blank;
* ``trap_lesson.html``, notebook 01's trap lesson (:mod:`robustgrpo.book.trap_page`);
* ``report/index.html``, the report figures' index (``index.md`` of ``python -m robustgrpo figures``) as a page,
  with the files it links;
* ``img/``, the pictures the pages show.

Nothing on a page asks for anything outside the book: no script, font or style from elsewhere. Maths
(``$...$`` and ``$$...$$`` in markdown) is turned into MathML when the book is built
(:func:`latex_to_mathml`), which the browser draws itself; a ``$`` left unpaired is an error, not text.
"""

from __future__ import annotations

import html
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from robustgrpo.book.execute import CALL_TAG, list_notebooks, read_notebook, run_all
from robustgrpo.lab.files import make_folder

__all__ = ["Chapter", "BOOK_INDEX", "DASHBOARD_DIR", "chapter_head", "latex_to_mathml", "markdown_html", "alt_text",
           "dashboard_figures", "write_report_page", "build_book"]

#: The home page's file name.
BOOK_INDEX = "index.html"
#: Where each chapter's dashboard has a page of its own (Voilà), named by the chapter's two-digit number.
DASHBOARD_DIR = Path(__file__).resolve().parents[2] / "notebooks" / "dashboards"
#: The MIME type of a widget's output (a dashboard): it needs a kernel to draw.
_WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
#: The widget state nbclient saves with an executed notebook.
_STATE_MIME = "application/vnd.jupyter.widget-state+json"
#: Width (px) of a small picture: a card's on the home page, a figure's on the report page (which links the full one).
THUMBNAIL_WIDTH = 480
#: Colours a small picture keeps (a palette PNG: a quarter of the bytes of a full-colour one at this size).
THUMBNAIL_COLOURS = 128

_STYLE = """
*, *::before, *::after { box-sizing: border-box; }
html { -webkit-text-size-adjust: 100%; }
body { margin: 0; font: 17px/1.55 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d1d1f;
       background: #fff; }
h1 { font-size: clamp(1.7rem, 6vw, 2.3rem); line-height: 1.2; }
main, .rg-nav { max-width: 52rem; margin: 0 auto; padding: 0 1rem; }
.rg-nav { display: flex; flex-wrap: wrap; gap: .4rem 1.2rem; padding-top: .8rem; padding-bottom: .8rem;
          border-bottom: 1px solid #ddd; font-size: .95rem; }
.rg-nav.rg-bottom { border-top: 1px solid #ddd; border-bottom: 0; margin-top: 2rem; }
a { color: #0b57d0; }
p, li, td, th, figcaption, h1, h2, h3, h4 { overflow-wrap: anywhere; }
img { max-width: 100%; height: auto; display: block; }
pre { overflow-x: auto; background: #f6f8fa; padding: .6rem .8rem; font-size: .85rem; line-height: 1.4; }
code { font-size: .9em; overflow-wrap: anywhere; }
pre code { overflow-wrap: normal; }
.rg-wide { max-width: 100%; overflow-x: auto; margin: 1rem 0; }
table { border-collapse: collapse; font-size: .9rem; }
th, td { border: 1px solid #ddd; padding: .25rem .5rem; text-align: right; vertical-align: top; }
th:first-child, td:first-child { text-align: left; }
math { font-size: 1.1em; }
math:not([display="block"]) { display: inline-block; max-width: 100%; overflow-x: auto; vertical-align: middle; }
math[display="block"] { overflow-x: auto; max-width: 100%; margin: .6rem 0; }
figure { margin: 1.2rem 0; }
figcaption { font-size: .9rem; color: #444; }
.rg-progress { font-size: .85rem; color: #555; }
.rg-stderr { background: #fff4e5; }
details { margin: .6rem 0 1rem; }
.rg-cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(15rem, 1fr)); gap: 1rem; padding: 0;
            list-style: none; }
.rg-card { border: 1px solid #ddd; border-radius: 8px; padding: .8rem; }
.rg-card img { width: 100%; height: 9rem; object-fit: contain; }
.rg-card h2 { font-size: 1.05rem; margin: .6rem 0 .3rem; }
.rg-card p { margin: 0; font-size: .95rem; }
"""


@dataclass(frozen=True)
class Chapter:
    """One chapter of the book: its executed notebook, its title and lead, its page's file name."""

    notebook: Path
    title: str
    lead: str

    @property
    def page(self) -> str:
        return f"{self.notebook.stem}.html"


def chapter_head(nb, name: str) -> tuple[str, str]:
    """The title and lead of a chapter: its first cell, ``# Title`` then one paragraph of one sentence.

    Returns the title (the H1's text) and the lead (the paragraph, markdown). ``ValueError`` naming the
    notebook if the first cell is not markdown, holds no H1 first, or holds more or less than one paragraph
    after it, or a paragraph of more than one sentence (a full stop followed by a capital inside it).
    """
    first = nb.cells[0] if nb.cells else None
    source = first.source.strip() if first is not None and first.cell_type == "markdown" else ""
    heading, _, rest = source.partition("\n")
    if not heading.startswith("# ") or not heading[2:].strip():
        raise ValueError(f"{name}: the first cell must be markdown opening with '# NN · Title'; write the chapter's "
                         "title there")
    paragraphs = [p for p in re.split(r"\n\s*\n", rest.strip()) if p.strip()]
    if len(paragraphs) != 1:
        raise ValueError(f"{name}: the first cell must hold one paragraph under its title (the chapter's lead), "
                         f"found {len(paragraphs)}; move the rest into the next cell")
    lead = " ".join(paragraphs[0].split())
    if re.search(r"[.!?]\s+[A-Z]", lead) or not lead.endswith((".", "!", "?")):
        raise ValueError(f"{name}: the lead under the title must be one sentence ending with a full stop, got "
                         f"{lead[:120]!r}")
    return heading[2:].strip(), lead


# ------------------------------------------------------------------ markdown and maths

_FENCE = re.compile(r"(```.*?```|`[^`\n]+`)", re.S)
_DISPLAY = re.compile(r"\$\$(.+?)\$\$", re.S)
_INLINE = re.compile(r"\$([^$\n]+?)\$")


def latex_to_mathml(latex: str, *, display: bool = False) -> str:
    """A LaTeX formula as MathML (``<math>``), which Chromium and Firefox draw without a script
    (latex2mathml's converter). ``ValueError`` naming the formula if it does not parse."""
    from latex2mathml.converter import convert

    try:
        return convert(latex.strip(), display="block" if display else "inline")
    except Exception as err:  # noqa: BLE001 - the converter raises its own exception types
        raise ValueError(f"the formula {latex!r} does not convert to MathML ({type(err).__name__}: {err}); "
                         "write it in the LaTeX subset latex2mathml reads") from None


def _protect_maths(text: str, where: str) -> tuple[str, dict[str, str]]:
    """``text`` with each formula outside code replaced by a placeholder, and the MathML of each."""
    maths: dict[str, str] = {}

    def keep(match: re.Match, display: bool) -> str:
        key = f"RGMATH{len(maths)}X"
        maths[key] = latex_to_mathml(match.group(1), display=display)
        return key

    parts = _FENCE.split(text)
    for i in range(0, len(parts), 2):  # the even parts lie outside code
        part = _DISPLAY.sub(lambda m: keep(m, True), parts[i])
        part = _INLINE.sub(lambda m: keep(m, False), part)
        if "$" in part:
            raise ValueError(f"{where}: a '$' without its pair in {part[max(0, part.index('$') - 40):][:100]!r}; "
                             "close the formula, or write the sign inside `code`")
        parts[i] = part
    return "".join(parts), maths


def markdown_html(text: str, where: str = "markdown") -> str:
    """Markdown (tables, raw HTML and ``$``-maths allowed) as HTML, the maths as MathML; ``where`` names the text
    in an error."""
    import mistune

    protected, maths = _protect_maths(text, where)
    out = mistune.create_markdown(escape=False, plugins=["table", "strikethrough"])(protected)
    for key, mathml in maths.items():
        out = out.replace(key, mathml)
    return _wrap_tables(out)


def _wrap_tables(body: str) -> str:
    """Every ``<table>`` in a box that scrolls sideways, so a wide table never widens the page."""
    return re.sub(r"(<table\b.*?</table>)", r'<div class="rg-wide">\1</div>', body, flags=re.S)


def _plain(markdown: str) -> str:
    """Markdown as one line of plain text: tags, comments, emphasis and ``$`` dropped, formulas kept as written."""
    text = re.sub(r"<!--.*?-->", "", markdown, flags=re.S)
    text = re.sub(r"<[^>]+>", "", text)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.replace("$", "").replace("**", "").replace("`", "")
    text = re.sub(r"(?<!\w)[*_](\S.*?\S|\S)[*_](?!\w)", r"\1", text)
    return " ".join(text.split())


def alt_text(cells: Sequence, index: int, fallback: str) -> str:
    """The alt text of the figure in cell ``index``, as plain text: its takeaway, the markdown cell just below it
    (up to a folded ``<details>`` block); where the cell below is not such a takeaway (a code cell, or a markdown
    cell opening a new section with a heading), the last paragraph of the markdown cell just above it, folded blocks
    left out (the caption); ``fallback`` where neither is there."""
    below = cells[index + 1] if index + 1 < len(cells) else None
    if below is not None and below.cell_type == "markdown" and not below.source.lstrip().startswith("#"):
        text = _plain(below.source.split("<details")[0])
        if text:
            return text
    above = cells[index - 1] if index > 0 else None
    if above is not None and above.cell_type == "markdown":
        caption = re.sub(r"<details>.*?</details>", "", above.source, flags=re.S)
        paragraphs = [q for q in re.split(r"\n\s*\n", caption) if q.strip()]
        text = _plain(paragraphs[-1]) if paragraphs else ""
        if text and not paragraphs[-1].lstrip().startswith("#"):
            return text
    return fallback


# ------------------------------------------------------------------ dashboards

def _widget_state(nb, model_id: str) -> dict[str, Any]:
    """The widget state saved with the executed notebook ``nb``; ``ValueError`` if ``model_id`` is not in it."""
    state = nb.metadata.get("widgets", {}).get(_STATE_MIME, {}).get("state")
    if not state or model_id not in state:
        raise ValueError(f"widget {model_id} has no saved state in the executed notebook; execute it with nbclient "
                         "(python -m robustgrpo notebooks), which stores the widgets' state")
    return state


def _widget_models(state: dict[str, Any], model_id: str) -> list[dict[str, Any]]:
    """The widget ``model_id`` and every widget inside it, depth first, in the order they appear."""
    found: list[dict[str, Any]] = []

    def walk(key: str) -> None:
        if key not in state or any(m is state[key] for m in found):
            return
        found.append(state[key])
        for value in state[key]["state"].values():
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, str) and item.startswith("IPY_MODEL_"):
                    walk(item[len("IPY_MODEL_"):])

    walk(model_id)
    return found


def dashboard_figures(nb, model_id: str) -> list[dict[str, Any]]:
    """The plotly figures (``{"data", "layout"}``) of the widget ``model_id`` and the widgets inside it, in the
    order they appear, read from the widget state saved with the executed notebook ``nb`` (empty for a widget
    without a figure). ``ValueError`` if the notebook holds no state for the widget."""
    models = _widget_models(_widget_state(nb, model_id), model_id)
    return [{"data": m["state"]["_widget_data"], "layout": m["state"]["_widget_layout"]}
            for m in models if "_widget_data" in m["state"] and "_widget_layout" in m["state"]]


def _progress_text(nb, model_id: str) -> str | None:
    """What a finished progress bar (tqdm's widget: texts around a progress model) said, as plain text; None for
    any other widget."""
    models = _widget_models(_widget_state(nb, model_id), model_id)
    if not any(m["model_name"] in ("FloatProgressModel", "IntProgressModel") for m in models):
        return None
    texts = [html.unescape(_plain(str(m["state"].get("value", "")))) for m in models if m["model_name"] == "HTMLModel"]
    return " ".join(t for t in texts if t)


def _snapshot(figures: Sequence[dict[str, Any]], paths: Sequence[Path]) -> None:
    """Draw ``figures`` as PNG files, all in one browser (plotly's image export: kaleido, with the machine's
    Chromium)."""
    import plotly.graph_objects as go
    import plotly.io as pio

    figs = [go.Figure(f) for f in figures]
    for fig in figs:  # a dashboard's figure fills its box in the page; here it gets a size of its own
        fig.update_layout(width=fig.layout.width or 1000, height=fig.layout.height or 560)
    try:
        pio.write_images(figs, [str(p) for p in paths], format="png")
    except Exception as err:  # noqa: BLE001 - kaleido and its browser driver raise their own types
        if "chrom" not in f"{type(err).__name__} {err}".lower():
            raise
        raise OSError(f"plotly's image export (kaleido) could not start Chromium to draw the dashboards' pictures "
                      f"({type(err).__name__}: {' '.join(str(err).split())[:200]}); install it (apt-get install "
                      "chromium, or plotly_get_chrome)") from None


def _live_commands(chapter: Chapter) -> str:
    """The commands that open ``chapter``'s dashboard live, as HTML."""
    number = chapter.notebook.stem[:2]
    lesson = sorted(DASHBOARD_DIR.glob(f"{number}_*.ipynb"))
    lines = [f".venv/bin/voila notebooks/dashboards/{lesson[0].name}   # the dashboard alone"] if lesson else []
    lines.append(f".venv/bin/jupyter lab notebooks/{chapter.notebook.name}   # the chapter (as root: add --allow-root)")
    return "<pre><code>" + html.escape("\n".join(lines)) + "</code></pre>"


# ------------------------------------------------------------------ pages

def _page(title: str, body: str, nav: str = "") -> str:
    bottom = nav.replace('class="rg-nav"', 'class="rg-nav rg-bottom"')
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{html.escape(title)}</title>\n<style>{_STYLE}</style></head>\n<body>\n{nav}\n<main>\n{body}\n"
            f"</main>\n{bottom}\n</body></html>\n")


def _nav(chapters: Sequence[Chapter], i: int) -> str:
    links = [f'<a href="{BOOK_INDEX}">Home: all chapters</a>']
    if i > 0:
        links.append(f'<a rel="prev" href="{chapters[i - 1].page}">&larr; {html.escape(chapters[i - 1].title)}</a>')
    if i + 1 < len(chapters):
        links.append(f'<a rel="next" href="{chapters[i + 1].page}">{html.escape(chapters[i + 1].title)} &rarr;</a>')
    return '<nav class="rg-nav">' + " ".join(links) + "</nav>"


def _write_png(data: str | list[str], path: Path) -> None:
    import base64

    path.write_bytes(base64.b64decode("".join(data)))


def _chapter_body(chapter: Chapter, nb, images: Path, snapshots: list[tuple[dict[str, Any], Path]]) -> tuple[str, Path | None]:
    """The HTML of a chapter's cells, its figures written into ``images``; also the first figure's file. Each
    dashboard's figures are added to ``snapshots`` with the file to draw them into (drawn together, later)."""
    stem = chapter.notebook.stem
    parts: list[str] = []
    first_figure: Path | None = None
    count = 0
    for i, cell in enumerate(nb.cells):
        where = f"{chapter.notebook.name}, cell {i}"
        if cell.cell_type == "markdown":
            parts.append(markdown_html(cell.source, where))
            continue
        if cell.cell_type != "code":
            continue
        if CALL_TAG in cell.get("metadata", {}).get("tags", []):
            parts.append(f'<pre><code class="language-python">{html.escape(cell.source)}</code></pre>')
        for output in cell.get("outputs", []):
            kind = output.get("output_type")
            if kind == "stream":  # printed text; stderr (a warning) too, marked
                marked = ' class="rg-stderr"' if output.get("name") == "stderr" else ""
                parts.append(f"<pre{marked}>{html.escape(''.join(output.get('text', '')))}</pre>")
                continue
            if kind == "error":
                raise ValueError(f"{where} ended in an error ({output.get('ename')}); fix the notebook and run it again")
            data = output.get("data", {})
            if _WIDGET_MIME in data:
                model_id = data[_WIDGET_MIME]["model_id"]
                figures = dashboard_figures(nb, model_id)
                if not figures:
                    progress = _progress_text(nb, model_id)
                    if progress is None:
                        raise ValueError(f"{where} shows a widget that is neither a dashboard with a plotly figure nor "
                                         "a progress bar; the book cannot show it without a kernel")
                    parts.append(f'<p class="rg-progress">{html.escape(progress)}</p>')
                    continue
                paths = [images / f"{stem}-dashboard-{count + j}.png" for j in range(len(figures))]
                count += len(figures)
                snapshots += zip(figures, paths)
                pictures = "".join(
                    f'<img src="img/{p.name}" alt="{html.escape(_figure_title(f, chapter.title))}" loading="lazy">'
                    for p, f in zip(paths, figures))
                parts.append(f'<figure class="rg-dashboard-snapshot">{pictures}<figcaption>The dashboard at its '
                             "default setting, as a picture: its sliders need a Python kernel. Open it live with:"
                             f"{_live_commands(chapter)}</figcaption></figure>")
            elif "image/png" in data:
                path = images / f"{stem}-{count}.png"
                count += 1
                _write_png(data["image/png"], path)
                first_figure = first_figure or path
                alt = alt_text(nb.cells, i, f"A figure of {chapter.title}")
                parts.append(f'<img src="img/{path.name}" alt="{html.escape(alt)}" loading="lazy">')
            elif "text/html" in data:
                parts.append(_wrap_tables("".join(data["text/html"])))
            elif "text/markdown" in data:
                parts.append(markdown_html("".join(data["text/markdown"]), where))
            elif "text/plain" in data:
                parts.append(f"<pre>{html.escape(''.join(data['text/plain']))}</pre>")
    return "\n".join(parts), first_figure


def _figure_title(figure: dict[str, Any], chapter_title: str) -> str:
    """A dashboard picture's alt text: the figure's title, else its panel titles, after the chapter's name."""
    layout = figure.get("layout", {})
    title = layout.get("title", {})
    text = title.get("text", "") if isinstance(title, dict) else str(title)
    panels = [a.get("text", "") for a in layout.get("annotations", []) if a.get("text")]
    said = _plain(text or "; ".join(panels[:6]))
    return f"The dashboard of {chapter_title} at its default setting" + (f": {said}" if said else "")


def _card(chapter: Chapter, picture: Path | None) -> str:
    img = (f'<img src="img/{picture.name}" alt="The first figure of {html.escape(chapter.title)}" '
           f'width="{THUMBNAIL_WIDTH}">' if picture else "")
    lead = markdown_html(chapter.lead, chapter.notebook.name).strip()
    lead = re.sub(r"^<p>(.*)</p>$", r"\1", lead, flags=re.S)
    return (f'<li class="rg-card"><a href="{chapter.page}">{img}</a>'
            f'<h2><a href="{chapter.page}">{html.escape(chapter.title)}</a></h2><p>{lead}</p></li>')


def _home(chapters: Sequence[Chapter], cards: Sequence[Path | None]) -> str:
    items = "\n".join(_card(c, p) for c, p in zip(chapters, cards))
    body = ("<h1>robustgrpo: robust group advantages for GRPO</h1>\n"
            "<p>Executed notebooks on what one outlier reward does to GRPO's group-relative advantages, and what "
            "robust estimators change; every number on these pages was computed when the notebooks ran.</p>\n"
            f'<ul class="rg-cards">\n{items}\n</ul>\n<h2>Beside the chapters</h2>\n<ul>\n'
            '<li><a href="trap_lesson.html">The mean-variance trap, live</a>: notebook 01\'s lesson in the page, '
            "with sliders and no kernel.</li>\n"
            '<li><a href="report/index.html">The report figures</a>: every figure the report rebuilds, with its caption '
            "and takeaway.</li>\n</ul>")
    return _page("robustgrpo: the book", body, '<nav class="rg-nav"><a href="index.html">Home: all chapters</a></nav>')


def write_report_page(report: str | Path, out: str | Path) -> Path:
    """Write ``report/index.md`` (what ``python -m robustgrpo figures`` writes) as ``out/index.html``, with every
    file it links copied beside it; return the page's path.

    Each figure is shown small (:data:`THUMBNAIL_WIDTH` px, in ``out/small/``) and linked to its full picture, so
    that the page with its pictures stays under 2 MB (the 48 report figures: about 1 MB); its alt text is its
    takeaway (:func:`_report_alt_texts`). ``ValueError`` for a link to a file the folder lacks.
    """
    report, out = Path(report), Path(out)
    index = report / "index.md"
    text = index.read_text(encoding="utf-8")
    make_folder(out)
    for target in dict.fromkeys(re.findall(r"\]\(([^)\s]+)\)", text)):
        if "://" in target or target.startswith("#"):
            continue
        source = report / target
        if not source.is_file():
            raise ValueError(f"{index} links {target}, which is not in {report}; rebuild the report figures")
        shutil.copyfile(source, out / Path(target).name)
    text = _report_alt_texts(text)
    small = make_folder(out / "small")
    text = re.sub(r"!\[([^\]]*)\]\(([^)\s]+\.png)\)",  # each figure as a small picture that links the full one
                  lambda m: f"[![{m.group(1)}](small/{_thumbnail(out / m.group(2), small / m.group(2)).name})]({m.group(2)})",
                  text)
    title = next((line[2:].strip() for line in text.splitlines() if line.startswith("# ")), "Report figures")
    nav = '<nav class="rg-nav"><a href="../index.html">Home: all chapters</a></nav>'
    body = markdown_html(text, str(index)).replace("<img ", '<img loading="lazy" ')
    (out / "index.html").write_text(_page(title, body, nav), encoding="utf-8")
    return out / "index.html"


def _report_alt_texts(index: str) -> str:
    """The report index (markdown) with each figure's alt text set to its takeaway: in each ``## `` section, the
    paragraph that opens with ``**Takeaway:**`` (that word left out), else the first paragraph after the picture
    (its caption); a section without either keeps its alt text."""
    sections = re.split(r"(?m)^(?=## )", index)
    for n, section in enumerate(sections):
        picture = re.search(r"!\[[^\]]*\]\(([^)\s]+)\)", section)
        if picture is None:
            continue
        after = [q.strip() for q in re.split(r"\n\s*\n", section[picture.end():]) if q.strip()]
        said = next((q for q in after if q.startswith("**Takeaway:**")), after[0] if after else "")
        alt = _plain(said.removeprefix("**Takeaway:**")).replace("[", "(").replace("]", ")")
        if alt:
            sections[n] = section[:picture.start()] + f"![{alt}]({picture.group(1)})" + section[picture.end():]
    return "".join(sections)


def build_book(
    out: str | Path, *, executed: str | Path | None = None, report: str | Path | None = None,
    trap_page: str | Path | None = None, notebooks: Sequence[Path] | None = None, timeout: int = 600,
    progress: bool = True,
) -> list[Path]:
    """Write the book into ``out``; return the pages written, the home page first.

    Parameters
    ----------
    out : str or Path
        Folder to write into (created if missing).
    executed : str or Path, optional
        A folder holding the executed notebooks (what ``python -m robustgrpo notebooks --out D`` writes into
        ``D/notebooks``), one per chapter; without it the notebooks are executed here first.
    report : str or Path, optional
        The folder ``python -m robustgrpo figures --out R`` wrote (``index.md`` and the figures); without it the
        report figures are built here (PNG and SVG).
    trap_page : str or Path, optional
        The trap lesson's page as ``python -m robustgrpo trap-page`` wrote it, copied into the book; without it the
        page is written here (:func:`~robustgrpo.book.trap_page.write_trap_page`, which computes every number it
        shows: about 10 s on an idle core).
    notebooks : sequence of Path, optional
        The chapters (default :func:`~robustgrpo.book.execute.list_notebooks`).
    timeout, progress
        Passed to :func:`~robustgrpo.book.execute.run_all` when the notebooks are executed here.

    Raises
    ------
    ValueError
        A chapter's executed copy missing from ``executed``; a first cell without title and one-sentence lead
        (:func:`chapter_head`); an unpaired ``$``; a cell that ended in an error; a widget that is neither a
        dashboard nor a progress bar; ``report`` without ``index.md``; ``trap_page`` not a trap lesson page.
    OSError
        No Chromium for plotly's image export to draw the dashboards' pictures with.
    """
    from robustgrpo.book.figures import build_all
    from robustgrpo.book.trap_page import PAGE_NAME, write_trap_page

    sources = list(notebooks) if notebooks is not None else list_notebooks()
    if trap_page is not None and (Path(trap_page).name != PAGE_NAME or not Path(trap_page).is_file()):
        raise ValueError(f"{trap_page} is not a trap lesson page; pass the {PAGE_NAME} python -m robustgrpo trap-page "
                         "wrote, or leave it out to write one")
    if report is not None and not (Path(report) / "index.md").is_file():
        raise ValueError(f"{report} holds no index.md; pass the folder python -m robustgrpo figures --out wrote, or leave "
                         "it out to build the report figures here")
    out = make_folder(out)
    with tempfile.TemporaryDirectory() as scratch:
        if executed is None:
            run_all(scratch, notebooks=sources, timeout=timeout, progress=progress)
            executed = Path(scratch) / "notebooks"
        executed = Path(executed)
        missing = [p.name for p in sources if not (executed / p.name).is_file()]
        if missing:
            raise ValueError(f"{executed} lacks the executed chapter(s) {', '.join(missing)}; pass the folder "
                             "python -m robustgrpo notebooks --out D wrote (D/notebooks), or leave --executed out")
        nbs = [read_notebook(executed / p.name) for p in sources]
        chapters = [Chapter(executed / p.name, *chapter_head(nb, p.name)) for p, nb in zip(sources, nbs)]
        images = make_folder(out / "img")
        pages, cards, snapshots = [out / BOOK_INDEX], [], []
        for i, (chapter, nb) in enumerate(zip(chapters, nbs)):
            body, first = _chapter_body(chapter, nb, images, snapshots)
            cards.append(_thumbnail(first, images / f"{chapter.notebook.stem}-card.png") if first else None)
            nav = _nav(chapters, i)
            (out / chapter.page).write_text(_page(chapter.title, body, nav), encoding="utf-8")
            pages.append(out / chapter.page)
        if snapshots:
            _snapshot(*zip(*snapshots))
        if report is None:
            report = Path(scratch) / "report"
            build_all(report, formats=("png", "svg"), progress=progress)
        write_report_page(Path(report), out / "report")
    pages.append(out / "report" / "index.html")
    lesson = write_trap_page(out) if trap_page is None else Path(shutil.copyfile(trap_page, out / PAGE_NAME))
    pages.append(_link_home(lesson))
    (out / BOOK_INDEX).write_text(_home(chapters, cards), encoding="utf-8")
    return pages


def _link_home(page: Path) -> Path:
    """``page`` (a page of the book written by another module, such as the trap lesson) with a link to the home page
    as the first thing in its body. Raises ``ValueError`` if it has no ``<body>``."""
    text = page.read_text(encoding="utf-8")
    if "<body>" not in text:
        raise ValueError(f"{page} has no <body>: pass a page that python -m robustgrpo trap-page wrote")
    link = ('<nav style="font: 14px sans-serif; margin: 0 0 .4rem"><a href="index.html">Home: all chapters</a>'
            "</nav>")
    page.write_text(text.replace("<body>", "<body>\n" + link, 1), encoding="utf-8")
    return page


def _thumbnail(figure: Path, path: Path) -> Path:
    """A copy of the PNG ``figure`` :data:`THUMBNAIL_WIDTH` px wide in :data:`THUMBNAIL_COLOURS` colours, at ``path``."""
    from PIL import Image

    with Image.open(figure) as img:
        height = max(1, round(img.height * THUMBNAIL_WIDTH / img.width))
        small = img.convert("RGB").resize((THUMBNAIL_WIDTH, height), Image.LANCZOS).quantize(colors=THUMBNAIL_COLOURS)
        small.save(path, optimize=True)
    return path
