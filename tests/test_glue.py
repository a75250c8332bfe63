"""Numbers in prose (robustgrpo.book.glue): values glued in code cells fill the placeholders of the markdown.

The rules of the mechanism on notebooks built here (no kernel), then one small notebook executed by the
runner: the executed copy and its page show the values, the committed prose is checked against them and
updated on request. The series itself is checked in tests/test_notebooks.py (every notebook's committed
values are the computed ones).
"""

from __future__ import annotations

import json

import nbformat
import numpy as np
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from robustgrpo.book import glue as G
from robustgrpo.book.execute import CALL_TAG, reading_html, run_notebook


def _executed(markdown: list[str], glued: list[dict]) -> nbformat.NotebookNode:
    """A notebook as the runner leaves it: its markdown cells, then one code cell per glued mapping with the output
    ``glue`` displays."""
    cells = [new_markdown_cell(m) for m in markdown]
    for values in glued:
        cells.append(new_code_cell("glue(...)", outputs=[new_output("display_data", data={G.MIME: values})]))
    return new_notebook(cells=cells)


def test_glue_displays_the_checked_values_as_one_output_no_front_end_renders(monkeypatch):
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj, raw=False: shown.append((obj, raw)))
    G.glue({"mean": np.float64(1.375)}, k=np.int64(6), method="rank")
    assert shown == [({G.MIME: {"mean": 1.375, "k": 6, "method": "rank"}}, True)]
    assert type(shown[0][0][G.MIME]["mean"]) is float and type(shown[0][0][G.MIME]["k"]) is int


@pytest.mark.parametrize("values, message", [
    ({"x": float("nan")}, "'x' is nan, not a finite number"),
    ({"x": float("inf")}, "'x' is inf"),
    ({"x": True}, "'x' is a bool"),
    ({"x": np.bool_(False)}, "'x' is a bool"),
    ({"x": [1, 2]}, "'x' is a list; glue an int, a float or a str"),
    ({"2x": 1.0}, "'2x' is not a Python identifier"),
    ({}, "no values"),
])
def test_glue_refuses_what_prose_cannot_say(monkeypatch, values, message):
    import IPython.display

    monkeypatch.setattr(IPython.display, "display", lambda obj, raw=False: None)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        G.glue(values)
    with pytest.raises(ValueError, match=r"\['x'\] are given twice"):
        G.glue({"x": 1}, x=2)


def test_a_tensor_is_refused_with_the_way_out():
    import torch

    with pytest.raises(ValueError, match=r"'a' is a Tensor; .*float\(x\) for a tensor"):
        G._checked("a", torch.tensor(0.5))


def test_format_value_writes_numbers_as_the_book_does():
    assert G.format_value(0.28550623) == "0.286" and G.format_value(1e-12) == "0" and G.format_value(12345.6) == "12,346"
    assert G.format_value(6) == "6" and G.format_value("dr_grpo") == "dr_grpo"
    assert G.format_value(0.2855, ".2f") == "0.29" and G.format_value(0.7265625, ".1%") == "72.7%"
    assert G.format_value(0.7265625, "pct") == "72.7 %" and G.format_value(0.0042, "pct2") == "0.42 %"
    assert G.format_value(-0.19, "+.2f") == "-0.19" and G.format_value("rank", "code") == "`rank`"
    with pytest.raises(ValueError, match="format 'pct' needs a number"):
        G.format_value("rank", "pct")
    with pytest.raises(ValueError, match="format '.3f' does not apply to 'rank'"):
        G.format_value("rank", ".3f")


def test_fill_places_each_value_keeps_the_comments_and_removes_the_carrier():
    nb = _executed(["The mean is **<!--glue:mean:.3f--><!--/glue-->** and the MAD <!--glue:mad-->1<!--/glue-->.",
                    "Use <!--glue:method:code-->x<!--/glue--> (<!--glue:mean:.1f-->?<!--/glue-->)."],
                   [{"mean": 1.375, "mad": 0.0}, {"method": "rank"}])
    values = G.fill(nb, "01_test.ipynb")
    assert values == {"mean": 1.375, "mad": 0.0, "method": "rank"}
    assert nb.cells[0].source == "The mean is **<!--glue:mean:.3f-->1.375<!--/glue-->** and the MAD <!--glue:mad-->0<!--/glue-->."
    assert nb.cells[1].source == "Use <!--glue:method:code-->`rank`<!--/glue--> (<!--glue:mean:.1f-->1.4<!--/glue-->)."
    assert all(c.outputs == [] for c in nb.cells if c.cell_type == "code")
    again = nbformat.from_dict(json.loads(json.dumps(nb)))
    assert G.differences(again, nb) == []  # filling twice gives the same prose


def test_a_placeholder_without_a_value_names_the_notebook_the_cell_and_the_closest_name():
    nb = _executed(["# T", "The mean is <!--glue:maen-->?<!--/glue-->."], [{"mean": 1.375}])
    with pytest.raises(ValueError, match=r"^01_test.ipynb, markdown cell 1: glue placeholder 'maen' has no value: "
                                         r"no code cell glues it \(glue\(maen=...\)\); did you mean 'mean'\?$"):
        G.fill(nb, "01_test.ipynb")


def test_a_glued_value_no_placeholder_uses_is_an_error_naming_it():
    nb = _executed(["The mean is <!--glue:mean-->?<!--/glue-->."], [{"mean": 1.375, "std": 3.5}])
    with pytest.raises(ValueError, match=r"^01_test.ipynb: glued value\(s\) \['std'\] are placed in no markdown cell"):
        G.fill(nb, "01_test.ipynb")


def test_a_name_glued_by_two_cells_is_an_error():
    nb = _executed(["<!--glue:mean-->?<!--/glue-->"], [{"mean": 1.375}, {"mean": 1.5}])
    with pytest.raises(ValueError, match=r"01_test.ipynb: glue value 'mean' is glued by cells 1 and 2"):
        G.fill(nb, "01_test.ipynb")


@pytest.mark.parametrize("source, message", [
    ("the <!--glue:mean-->1.375 without its end", "malformed glue placeholder near '<!--glue:mean-->1.375"),
    ("a stray end <!--/glue--> here", "malformed glue placeholder near '<!--/glue-->"),
    ("x <!--glue:mean:.3q-->1<!--/glue-->", "'mean' has an unknown format '.3q'"),
    ("x <!--glue:my mean-->1<!--/glue-->", "name 'my mean' is not a Python identifier"),
    ("x <!--glue:a--><!--glue:b-->1<!--/glue--><!--/glue-->", "malformed glue placeholder"),
    ("a line\n<!--glue:mean-->1<!--/glue--> begins with it", "the line '<!--glue:mean-->1<!--/glue--> begins wi.*"
                                                            "begins with a glue placeholder, which Markdown reads as raw HTML"),
    ("- <!--glue:mean-->1<!--/glue--> in a list", "begins with a glue placeholder"),
    ("> 2. <!--glue:mean-->1<!--/glue--> in a quoted list", "begins with a glue placeholder"),
])
def test_a_malformed_placeholder_is_an_error_naming_where(source, message):
    nb = _executed([source], [{"mean": 1.375}])
    with pytest.raises(ValueError, match="01_test.ipynb, markdown cell 0: .*" + message.replace("(", r"\(")):
        G.fill(nb, "01_test.ipynb")


def test_differences_name_each_stale_value():
    committed = _executed(["a <!--glue:x-->1<!--/glue--> b <!--glue:y-->2<!--/glue-->"], [])
    filled = _executed(["a <!--glue:x-->1<!--/glue--> b <!--glue:y-->3<!--/glue-->"], [])
    assert G.differences(committed, filled) == ["cell 0, y: committed '2', computed '3'"]
    assert G.differences(committed, _executed(["a", "b"], [])) == [
        "the notebooks have 1 and 2 markdown cells: not the same notebook"]


NOTEBOOK = [
    new_markdown_cell("# 99 · A glued page"),
    new_code_cell("import torch\nfrom robustgrpo.book.glue import glue\nfrom robustgrpo import compute_advantages"),
    new_code_cell("result = compute_advantages(torch.tensor([[0.0, 0, 0, 0, 0, 0, 1, 10]]), 'grpo')\nresult.advantages[0, 6].item()",
                  metadata={"tags": [CALL_TAG]}),
    new_code_cell("glue(correct=result.advantages[0, 6].item(), group_size=result.advantages.shape[-1])"),
    new_markdown_cell("Of <!--glue:group_size-->?<!--/glue--> answers the correct one gets "
                      "**<!--glue:correct:.3f-->?<!--/glue-->**."),
]


def test_the_runner_fills_the_executed_copy_and_its_page_and_updates_the_prose_on_request(tmp_path):
    nb = new_notebook(cells=NOTEBOOK)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "99_glued.ipynb"
    nbformat.write(nb, path)
    run = run_notebook(path, figures=tmp_path / "figures", out=tmp_path / "nb")
    assert run.values == {"correct": pytest.approx(-0.10706, abs=1e-5), "group_size": 8} and run.updated == []
    executed = nbformat.read(run.executed, as_version=4)
    sentence = "Of <!--glue:group_size-->8<!--/glue--> answers the correct one gets **<!--glue:correct:.3f-->-0.107<!--/glue-->**."
    assert executed.cells[-1].source == sentence
    assert not any(G.MIME in o.get("data", {}) for c in executed.cells if c.cell_type == "code" for o in c.outputs)
    page = run.executed.with_suffix(".html").read_text(encoding="utf-8")
    assert "<strong><!--glue:correct:.3f-->-0.107<!--/glue--></strong>" in page
    assert "compute_advantages</span><span" in page or "compute_advantages(" in page  # the call cell keeps its source
    assert "glue</span>(" not in page and "glue(correct" not in page  # other code cells do not
    stale = ["cell 4, group_size: committed '?', computed '8'", "cell 4, correct: committed '?', computed '-0.107'"]
    assert G.differences(nbformat.read(path, as_version=4), executed) == stale
    # the file is written as the repository keeps notebooks, and only the placeholders' text changes
    assert run_notebook(path, figures=tmp_path / "figures", update_prose=True).updated == stale
    updated = nbformat.read(path, as_version=4)
    assert updated.cells[-1].source == sentence and [c.source for c in updated.cells[:-1]] == [c.source for c in nb.cells[:-1]]
    assert path.read_text(encoding="utf-8") == json.dumps(json.loads(path.read_text(encoding="utf-8")), sort_keys=True,
                                                          indent=1, ensure_ascii=False) + "\n"
    assert G.differences(updated, executed) == []


def test_reading_html_keeps_the_call_cells_source_only():
    nb = new_notebook(cells=[new_markdown_cell("# T"), new_code_cell("hidden_name = 1"),
                             new_code_cell("shown_name = 2", metadata={"tags": [CALL_TAG]})])
    page = reading_html(nb)
    assert "shown_name" in page and "hidden_name" not in page
    assert nb.cells[1].metadata == {}  # the notebook itself is left as it was
