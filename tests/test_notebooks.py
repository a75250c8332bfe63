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


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_notebook_runs_top_to_bottom_and_saves_its_figures(path, tmp_path):
    figures = tmp_path / "figures"
    run = run_notebook(path, figures=figures, out=tmp_path / "nb")  # fails if a placeholder or a glued value is unmatched
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
