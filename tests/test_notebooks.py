"""The notebook series: committed clean, executed top to bottom, figures saved where asked.

Parametrized over :func:`robustgrpo.execute.list_notebooks`, so every notebook added to
``notebooks/`` is executed too. No wall-clock limits here (the machine is shared); the
per-cell timeout of the runner only guards against a hung kernel.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient.exceptions import CellExecutionError
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from robustgrpo.execute import list_notebooks, run_notebook
from robustgrpo.report import report_figures

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
def test_notebook_runs_top_to_bottom_and_saves_its_figures(path, tmp_path):
    figures = tmp_path / "figures"
    run = run_notebook(path, figures=figures, out=tmp_path / "nb")
    executed = nbformat.read(run.executed, as_version=4)
    errors = [o for c in executed.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    # cells tagged "figure" show a matplotlib figure: their output must be an image
    for i, cell in enumerate(executed.cells):
        if "figure" in cell.get("metadata", {}).get("tags", []):
            images = [o for o in cell.outputs if "image/png" in o.get("data", {})]
            assert images, f"figure cell {i} of {path.name} shows no image"
    prefix = path.name[:2]
    assert prefix.isdigit(), f"{path.name} should start with its two-digit number"
    saved = {p.name for p in figures.glob(f"{prefix}*")} if figures.exists() else set()
    assert any(n.endswith(".png") for n in saved), f"{path.name} saved no {prefix}*.png into {figures}"
    assert any(n.endswith(".svg") for n in saved), f"{path.name} saved no {prefix}*.svg into {figures}"
    # the notebook shows the same figures the report rebuilds: every builder registered for it
    for spec in report_figures().values():
        if spec.notebook == path.name:
            assert {f"{spec.name}.png", f"{spec.name}.svg"} <= saved, f"{path.name} never saves {spec.name}"
    # a matplotlib Figure shown without an inline backend prints as "<Figure size ...>" instead of a picture
    for i, cell in enumerate(executed.cells):
        for output in cell.get("outputs", []):
            text = output.get("data", {}).get("text/plain", "")
            if text.startswith("<Figure size") and int(prefix) >= 5:
                assert "image/png" in output["data"], f"cell {i} of {path.name} shows a figure without an image"
        if "figure" in cell.get("metadata", {}).get("tags", []):
            images = [o for o in cell.outputs if "image/png" in o.get("data", {})]
            assert images, f"figure cell {i} of {path.name} produced no image/png output"
    if int(prefix) >= 5:
        tagged = [c for c in executed.cells if "figure" in c.get("metadata", {}).get("tags", [])]
        assert tagged, f"{path.name} tags no cell as a figure cell"


def test_a_notebook_that_raises_fails_the_runner(tmp_path):
    nb = new_notebook(cells=[new_markdown_cell("# Broken"), new_code_cell("x = 1"),
                             new_code_cell("raise RuntimeError('deliberate failure in cell 3')")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "99_broken.ipynb"
    nbformat.write(nb, path)
    with pytest.raises(CellExecutionError, match="deliberate failure in cell 3"):
        run_notebook(path, figures=tmp_path / "figures", out=tmp_path / "nb")
    assert not (tmp_path / "nb" / path.name).exists()
