"""The notebook series: committed clean, executed top to bottom, figures saved where asked.

Parametrized over :func:`robustgrpo.book.execute.list_notebooks`, so every notebook added to
``notebooks/`` is executed too. No wall-clock limits here (the machine is shared); the
per-cell timeout of the runner only guards against a hung kernel.
"""

from __future__ import annotations

import html
from pathlib import Path

import nbformat
import pytest
from nbclient.exceptions import CellExecutionError
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from robustgrpo.book.execute import CALL_TAG, NOTEBOOK_DIR, list_notebooks, reading_html, run_notebook
from robustgrpo.book.glue import differences
from robustgrpo.book.figures import report_figures

NOTEBOOKS = list_notebooks()


def _ids(path: Path) -> str:
    return path.stem


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_committed_notebook_has_no_outputs_and_opens_with_a_title(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3", "kernelspec must be python3"
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [], f"cell {i} of {path.name} is committed with outputs"
            assert cell.execution_count is None, f"cell {i} of {path.name} is committed with an execution count"
    first = nb.cells[0]
    assert first.cell_type == "markdown", f"{path.name} must open with a markdown cell"
    assert first.source.lstrip().startswith("# ") and len(first.source.splitlines()[0]) > 4, (
        f"{path.name} must open with a '# title'"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_every_chapter_shows_the_call_a_trainer_writes(path):
    """Each chapter has a code cell tagged "call" (the reading page keeps its source) that calls the package the way a
    trainer does; the run test checks that the page shows it."""
    nb = nbformat.read(path, as_version=4)
    calls = [c.source for c in nb.cells if c.cell_type == "code" and CALL_TAG in c.metadata.get("tags", [])]
    assert any(f in s for s in calls for f in ("compute_advantages(", "RobustGRPOTrainer(")), (
        f"{path.name} shows no call a trainer writes: tag a cell {CALL_TAG!r} that calls compute_advantages or "
        "RobustGRPOTrainer")


def figure_cells(nb) -> list[int]:
    """Indices of the cells tagged ``figure``: the cells that show a matplotlib figure."""
    return [i for i, c in enumerate(nb.cells) if "figure" in c.get("metadata", {}).get("tags", [])]


def image_cells(nb) -> list[int]:
    """Indices of the cells with an image/png output."""
    return [i for i, c in enumerate(nb.cells) if any("image/png" in o.get("data", {}) for o in c.get("outputs", []))]


@pytest.fixture(scope="module")
def executed(tmp_path_factory) -> Path:
    """Where this file's runs keep the executed notebooks: the book test builds the book from them (xdist keeps a
    file on one worker, so they are there when it runs, after every run)."""
    return tmp_path_factory.mktemp("executed")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_notebook_runs_top_to_bottom_and_saves_its_figures(path, tmp_path, executed):
    figures = tmp_path / "figures"
    run = run_notebook(path, figures=figures, out=executed)  # fails if a placeholder or a glued value is unmatched
    executed = nbformat.read(run.executed, as_version=4)  # the copy the main job writes to out/notebooks
    errors = [o for c in executed.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    # the committed prose holds the values the code computes (what Lab and GitHub show before a run)
    stale = differences(nbformat.read(path, as_version=4), executed)
    assert not stale, (f"{path.name}: the committed prose holds other values than the notebook computes: {stale}; run "
                       f"python -m robustgrpo notebooks --out DIR --only {path.stem} --update-prose")
    # every cell tagged "figure" shows its figure as an image, and every image is in a tagged cell
    # (the Lab test in test_browser_lab.py finds the figure cells by the same tag)
    assert figure_cells(executed), f"{path.name} tags no cell as a figure cell"
    assert image_cells(executed) == figure_cells(executed), f"{path.name}: image outputs and 'figure' tags differ"
    # beside it, the page to read without the code: every figure and every heading, no line of any code cell
    page = run.executed.with_suffix(".html").read_text(encoding="utf-8")
    template = reading_html(new_notebook()).count("data:image/png;base64,")  # the page's own (its stylesheet's)
    assert page.count("data:image/png;base64,") - template == sum(
        "image/png" in o.get("data", {}) for c in executed.cells for o in c.get("outputs", []))
    # the only code shown is that of the cells tagged "call" (the call a trainer would write), without a prompt
    calls = [c for c in executed.cells if c.cell_type == "code" and CALL_TAG in c.metadata.get("tags", [])]
    assert page.count("<div class=\"jp-CodeMirrorEditor") == len(calls) and "<div class=\"jp-InputPrompt" not in page
    for cell in calls:  # a trainer's call, and the page shows it
        called = [f for f in ("compute_advantages", "RobustGRPOTrainer") if f"{f}(" in cell.source]
        assert called and all(f in page for f in called), f"{path.name}: a 'call' cell calls neither: {cell.source}"
    for cell in executed.cells:
        if cell.cell_type == "code" and cell not in calls:
            imports = [line for line in cell.source.splitlines() if line.startswith(("from robustgrpo", "import "))]
            assert not any(html.escape(line) in page for line in imports), imports
        elif cell.source.startswith("# "):
            assert html.escape(cell.source.splitlines()[0][2:]).split()[0] in page
    # a matplotlib Figure shown without an inline backend prints as "<Figure size ...>" instead of a picture
    for i, cell in enumerate(executed.cells):
        for output in cell.get("outputs", []):
            text = output.get("data", {}).get("text/plain", "")
            assert not (text.startswith("<Figure size") and "image/png" not in output["data"]), (
                f"cell {i} of {path.name} shows a figure as text, not as an image"
            )
    prefix = path.name[:2]
    assert prefix.isdigit(), f"{path.name} should start with its two-digit number"
    saved = {p.name for p in figures.glob(f"{prefix}*")} if figures.exists() else set()
    assert any(n.endswith(".png") for n in saved), f"{path.name} saved no {prefix}*.png into {figures}"
    assert any(n.endswith(".svg") for n in saved), f"{path.name} saved no {prefix}*.svg into {figures}"
    # the notebook shows the same figures the report rebuilds: every builder registered for it
    for spec in report_figures().values():
        if spec.notebook == path.name:
            assert {f"{spec.name}.png", f"{spec.name}.svg"} <= saved, f"{path.name} never saves {spec.name}"


DASHBOARD_PAGES = list_notebooks(NOTEBOOK_DIR / "dashboards")


@pytest.mark.parametrize("path", DASHBOARD_PAGES, ids=_ids)
def test_dashboard_page_is_clean_and_shows_one_widget(path, tmp_path):
    """The pages Voilà serves: committed clean, a title line, then the dashboard as the only output."""
    nb = nbformat.read(path, as_version=4)
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# ")
    assert len(nb.cells[0].source.splitlines()) <= 3, "no screen of prose before the dashboard"
    assert all(c.outputs == [] for c in nb.cells if c.cell_type == "code")
    executed = nbformat.read(run_notebook(path, figures=tmp_path / "figures", out=tmp_path / "nb").executed, as_version=4)
    outputs = [o for c in executed.cells if c.cell_type == "code" for o in c.outputs]
    assert [o.output_type for o in outputs] == ["execute_result"]
    assert "application/vnd.jupyter.widget-view+json" in outputs[0].data


def test_a_notebook_that_raises_fails_the_runner(tmp_path):
    nb = new_notebook(cells=[new_markdown_cell("# Broken"), new_code_cell("x = 1"),
                             new_code_cell("raise RuntimeError('deliberate failure in cell 3')")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "99_broken.ipynb"
    nbformat.write(nb, path)
    with pytest.raises(CellExecutionError, match="deliberate failure in cell 3"):
        run_notebook(path, figures=tmp_path / "figures", out=tmp_path / "nb")
    assert not (tmp_path / "nb" / path.name).exists()


# ------------------------------------------------------------------ the book, built from the runs above

#: JavaScript: what a check of a book page reads: its title, the text outside code, every link and picture, the
#: widest element, the first contentful paint (ms), and the dashboards' pictures with their commands.
BOOK_PAGE = """() => {
  const prose = document.body.cloneNode(true);
  prose.querySelectorAll('code, pre').forEach(e => e.remove());
  const paint = performance.getEntriesByType('paint').find(e => e.name === 'first-contentful-paint');
  return {
    title: document.title, text: prose.innerText,
    links: [...document.querySelectorAll('a[href]')].map(a => a.getAttribute('href')),
    images: [...document.querySelectorAll('img')].map(i => ({src: i.getAttribute('src'), alt: i.getAttribute('alt'),
                                                             loaded: i.complete && i.naturalWidth > 0})),
    scroll_width: document.documentElement.scrollWidth,
    paint_ms: paint ? paint.startTime : null,
    prev: document.querySelector('a[rel=prev]') && document.querySelector('a[rel=prev]').getAttribute('href'),
    next: document.querySelector('a[rel=next]') && document.querySelector('a[rel=next]').getAttribute('href'),
    snapshots: [...document.querySelectorAll('.rg-dashboard-snapshot')].map(f => f.innerText),
  };
}"""


WIDGET = "application/vnd.jupyter.widget-view+json"


def _book_files(page: Path, book: Path, refs: list[str]) -> set[Path]:
    """The files of the book that ``refs`` (a page's links and pictures) name; AssertionError for one outside it."""
    files = set()
    for ref in refs:
        target = ref.split("#")[0]
        assert "://" not in ref and not ref.startswith("//"), f"{page.name} links outside the book: {ref}"
        if target:
            path = (page.parent / target).resolve()
            assert path.is_file() and book.resolve() in path.parents, f"{page.name} links {ref}, not a file of the book"
            files.add(path)
    return files


@pytest.mark.slow
def test_the_book_built_from_the_executed_chapters_reads_offline(executed, tmp_path, chromium, artifacts):
    """The book from the executed copies above: each page opened in Chromium at 1280 x 800 and at 390 px, every
    request leaving the machine blocked and counted: none is made, no page error, no '$' outside code, a title of
    its own, every link and picture a file of the book, at most 2 MB with its pictures, nothing wider than 390 px;
    chapters linked in order, cards on the home page, dashboards as pictures with their live commands. The first
    contentful paint of each page is measured into ``book_paint.json`` beside the screenshots (not asserted)."""
    import json
    import os

    from robustgrpo.book.figures import build_all
    from robustgrpo.book.site import BOOK_INDEX, build_book, chapter_head, dashboard_figures
    from robustgrpo.book.trap_page import write_trap_page

    ran = [p for p in NOTEBOOKS if (executed / p.name).is_file()]
    if len(ran) < len(NOTEBOOKS):
        pytest.skip(f"the book is built from this file's runs; {len(NOTEBOOKS) - len(ran)} chapter(s) did not run here")
    report = tmp_path / "report"
    build_all(report, formats=("png", "svg"), names=list(report_figures())[:2], progress=False)
    book = tmp_path / "book"
    pages = build_book(book, executed=executed, report=report, trap_page=write_trap_page(tmp_path, group_sizes=range(2, 5)),
                       progress=False)
    chapters = [book / f"{p.stem}.html" for p in NOTEBOOKS]
    assert pages[0] == book / BOOK_INDEX and set(chapters) <= set(pages)
    assert sorted(pages) == sorted([*book.glob("*.html"), book / "report" / "index.html"])
    seen, paint = {}, {}
    for width, height in ((1280, 800), (390, 844)):
        context = chromium.new_context(viewport={"width": width, "height": height})
        outside: list[str] = []
        context.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file://")
                      else (outside.append(r.request.url), r.abort()))
        tab = context.new_page()
        errors: list[str] = []
        tab.on("pageerror", lambda e: errors.append(str(e)))
        tab.on("requestfailed", lambda r: errors.append(f"failed: {r.url}"))
        for page in pages:
            tab.goto(page.as_uri())
            tab.wait_for_load_state("load")
            tab.evaluate("() => document.querySelectorAll('img').forEach(i => { i.loading = 'eager'; })")  # below the fold too
            tab.wait_for_function("() => [...document.images].every(i => i.complete)")
            got = tab.evaluate(BOOK_PAGE)
            name = str(page.relative_to(book))
            seen[name] = got
            paint.setdefault(name, {})[width] = got["paint_ms"]
            assert "$" not in got["text"], f"{name}: a raw '$' in its text"
            assert got["scroll_width"] <= width, f"{name} is {got['scroll_width']} px wide in a {width} px window"
            files = _book_files(page, book, got["links"] + [i["src"] for i in got["images"]])
            size = page.stat().st_size + sum(f.stat().st_size for f in files if f.suffix == ".png")
            assert size <= 2_000_000, f"{name}: {size / 1e6:.2f} MB with its pictures"
            assert all(i["loaded"] and i["alt"] and "No description" not in i["alt"] for i in got["images"]), name
            if page in (pages[0], chapters[0], chapters[2]):
                tab.screenshot(path=str(artifacts / f"book_{page.stem}_{width}.png"), full_page=width == 390)
        context.close()
        assert outside == [] and errors == [], (outside, errors)
    titles = [got["title"] for got in seen.values()]
    assert len(set(titles)) == len(titles), titles
    home, shown = seen[BOOK_INDEX], 0
    for i, (path, page) in enumerate(zip(NOTEBOOKS, chapters)):
        nb = nbformat.read(executed / path.name, as_version=4)
        title, lead = chapter_head(nb, path.name)
        got = seen[page.name]
        assert got["title"] == title and page.name in home["links"] and title in home["text"]
        assert " ".join(lead.split()[:4]) in home["text"]  # the card's sentence
        assert got["prev"] == (chapters[i - 1].name if i else None)
        assert got["next"] == (chapters[i + 1].name if i + 1 < len(chapters) else None)
        assert BOOK_INDEX in got["links"]
        widgets = [o["data"][WIDGET]["model_id"] for c in nb.cells for o in c.get("outputs", []) if WIDGET in o.get("data", {})]
        assert len(got["snapshots"]) == sum(bool(dashboard_figures(nb, w)) for w in widgets), (page.name, got["snapshots"])
        lesson = [p.name for p in DASHBOARD_PAGES if p.name[:2] == path.name[:2]]
        commands = [f".venv/bin/jupyter lab notebooks/{path.name}", *(f".venv/bin/voila notebooks/dashboards/{n}" for n in lesson)]
        assert all(c in s for s in got["snapshots"] for c in commands), (page.name, got["snapshots"])
        shown += len(got["snapshots"])
    assert shown >= len(DASHBOARD_PAGES)  # every dashboard that has a page of its own is shown in its chapter
    assert {"trap_lesson.html", "report/index.html"} <= set(home["links"])
    assert BOOK_INDEX in seen["trap_lesson.html"]["links"]  # the lesson leads back home
    (artifacts / "book_paint.json").write_text(json.dumps(
        {"load_average": os.getloadavg(), "first_contentful_paint_ms": paint}, indent=1))
