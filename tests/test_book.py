"""The book's builder (robustgrpo.book.site): chapter heads, maths as MathML, alt texts, dashboards' figures.

The book built from the executed notebooks is checked in Chromium in tests/test_notebooks.py, where the
notebooks are executed once for both.
"""

from __future__ import annotations

import subprocess
import sys

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from robustgrpo.book.execute import list_notebooks
from robustgrpo.book.site import (alt_text, build_book, chapter_head, dashboard_figures, latex_to_mathml, markdown_html,
                                  write_report_page)
from browser_util import ROOT


def _nb(*sources: str):
    return new_notebook(cells=[new_markdown_cell(s) for s in sources])


@pytest.mark.parametrize("path", list_notebooks(), ids=lambda p: p.stem)
def test_every_chapter_opens_with_its_title_and_a_one_sentence_lead(path):
    title, lead = chapter_head(nbformat.read(path, as_version=4), path.name)
    assert title.startswith(path.stem[:2] + " · ")
    assert lead.endswith(".") and lead.count(". ") == 0 and len(lead.split()) >= 8


def test_a_chapter_head_is_its_title_and_its_one_sentence():
    assert chapter_head(_nb("# 01 · Title\n\nOne sentence that\nwraps, with $x$ in it.", "More."), "a.ipynb") == (
        "01 · Title", "One sentence that wraps, with $x$ in it.")
    with pytest.raises(ValueError, match=r"a.ipynb: the first cell must be markdown opening with '# NN · Title'"):
        chapter_head(_nb("Text first.\n\n# 01 · Title"), "a.ipynb")
    with pytest.raises(ValueError, match=r"one paragraph under its title .*found 2; move the rest into the next cell"):
        chapter_head(_nb("# 01 · T\n\nOne.\n\nTwo."), "a.ipynb")
    with pytest.raises(ValueError, match=r"found 0"):
        chapter_head(_nb("# 01 · T"), "a.ipynb")
    with pytest.raises(ValueError, match=r"must be one sentence ending with a full stop, got 'One. Two.'"):
        chapter_head(_nb("# 01 · T\n\nOne. Two."), "a.ipynb")
    with pytest.raises(ValueError, match="first cell must be markdown"):
        chapter_head(new_notebook(cells=[new_code_cell("# 01 · T")]), "a.ipynb")


def test_maths_becomes_mathml_and_code_keeps_its_dollars():
    assert latex_to_mathml("A_i").startswith('<math xmlns="http://www.w3.org/1998/Math/MathML" display="inline">')
    assert "<msub><mi>A</mi><mi>i</mi></msub>" in latex_to_mathml("A_i")
    assert "<msqrt><mrow><mi>G</mi></mrow></msqrt>" in latex_to_mathml(r"\sqrt{G}", display=True)
    out = markdown_html("Scores $A_i = r_i - \\bar r$ and\n\n$$\\frac{G-1}{\\sqrt{G}}$$\n\nSet `$HOME` or\n\n```\necho $PATH\n```")
    assert out.count("<math") == 2 and 'display="block"' in out and "<mfrac>" in out
    assert "<code>$HOME</code>" in out and "echo $PATH" in out
    assert "$" not in out.replace("$HOME", "").replace("$PATH", "")
    table = markdown_html("| a | b |\n|---|---|\n| 1 | $x$ |")
    assert table.startswith('<div class="rg-wide"><table>') and "<mi>x</mi>" in table


def test_an_unpaired_dollar_or_a_bad_formula_is_refused_with_the_fix():
    with pytest.raises(ValueError, match=r"cell 3: a '\$' without its pair in .*close the formula, or write the sign "
                                         r"inside `code`"):
        markdown_html("It costs $5 here.", "x.ipynb, cell 3")
    with pytest.raises(ValueError, match=r"the formula 'x\^' does not convert to MathML \(MissingSuperScriptOrSubscript"):
        latex_to_mathml("x^")


def test_a_figures_alt_text_is_its_takeaway_else_its_caption():
    cells = [new_markdown_cell("Caption: the x axis is G.\n\nWhat is drawn: **bars** per `method`."),
             new_code_cell("fig"),
             new_markdown_cell("The median gives <!--glue:n-->7<!--/glue--> answers *no* signal ($A = 0$).\n\n"
                               "<details><summary>Numbers behind the figure</summary>\n\n| a |\n|---|\n</details>\n\n"
                               "The next figure: the spread per G."),
             new_code_cell("fig2"), new_markdown_cell("## Next section"), new_code_cell("fig3")]
    assert alt_text(cells, 1, "fallback") == "The median gives 7 answers no signal (A = 0)."
    assert alt_text(cells, 3, "fallback") == "The next figure: the spread per G."  # a heading below: the caption
    assert alt_text(cells, 5, "fallback") == "fallback"  # a heading above, nothing below
    assert alt_text([cells[0], cells[1]], 1, "fallback") == "What is drawn: bars per method."


def _widget_nb(state: dict) -> object:
    nb = new_notebook()
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": state, "version_major": 2}}
    return nb


def test_a_dashboards_figures_are_read_from_the_saved_widget_state():
    figure = {"_widget_data": [{"type": "bar", "y": [1, 2]}], "_widget_layout": {"title": {"text": "t"}}}
    state = {
        "box": {"model_name": "BoxModel", "state": {"children": ["IPY_MODEL_col", "IPY_MODEL_fig2"]}},
        "col": {"model_name": "VBoxModel", "state": {"children": ["IPY_MODEL_fig1", "IPY_MODEL_box"]}},
        "fig1": {"model_name": "AnyModel", "state": figure},
        "fig2": {"model_name": "AnyModel", "state": {**figure, "_widget_data": []}},
        "bar": {"model_name": "FloatProgressModel", "state": {"value": 3.0}},
    }
    assert dashboard_figures(_widget_nb(state), "box") == [
        {"data": [{"type": "bar", "y": [1, 2]}], "layout": {"title": {"text": "t"}}}, {"data": [], "layout": {"title": {"text": "t"}}}]
    assert dashboard_figures(_widget_nb(state), "bar") == []
    with pytest.raises(ValueError, match="widget nope has no saved state in the executed notebook; execute it with nbclient"):
        dashboard_figures(_widget_nb(state), "nope")
    with pytest.raises(ValueError, match="has no saved state"):
        dashboard_figures(new_notebook(), "box")


def test_the_book_refuses_a_folder_without_the_executed_chapters(tmp_path):
    (tmp_path / "executed").mkdir()
    with pytest.raises(ValueError, match=r"lacks the executed chapter\(s\) 01_outlier_poisoning.ipynb, .*pass the folder"):
        build_book(tmp_path / "book", executed=tmp_path / "executed")
    with pytest.raises(ValueError, match=r"is not a trap lesson page; pass the trap_lesson.html"):
        build_book(tmp_path / "book", executed=tmp_path / "executed", trap_page=tmp_path / "other.html")
    done = subprocess.run([sys.executable, "-m", "robustgrpo", "book", "--out", str(tmp_path / "book"), "--executed",
                           str(tmp_path / "executed")], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "lacks the executed chapter(s) 01_outlier_poisoning.ipynb" in done.stderr


def test_a_missing_browser_for_the_dashboards_pictures_is_named_with_the_fix(tmp_path, monkeypatch):
    from robustgrpo.book.site import _snapshot

    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "no-chromium"))
    with pytest.raises(OSError, match=r"plotly's image export \(kaleido\) could not start Chromium .*install it "
                                      r"\(apt-get install chromium, or plotly_get_chrome\)"):
        _snapshot([{"data": [], "layout": {}}], [tmp_path / "x.png"])
    assert not (tmp_path / "x.png").exists()


def test_the_report_page_gives_each_figure_its_takeaway_as_alt_text(tmp_path):
    from robustgrpo.book.site import write_report_page

    from PIL import Image

    (tmp_path / "r").mkdir()
    for name in ("a.png", "b.png"):
        Image.new("RGB", (960, 600), (200, 30, 30)).save(tmp_path / "r" / name)
    (tmp_path / "r" / "a.svg").write_text("<svg/>")
    (tmp_path / "r" / "index.md").write_text(
        "# Report figures\n\n## a\n\n![a](a.png)\n\nCaption of a: x against y.\n\n**Takeaway:** the mean moves by "
        "$1.4$ [see 01].\n\nFiles: [svg](a.svg)\n\n## b\n\n![b](b.png)\n\nCaption of b only.\n")
    write_report_page(tmp_path / "r", tmp_path / "book" / "report")
    page = (tmp_path / "book" / "report" / "index.html").read_text()
    assert 'alt="the mean moves by 1.4 (see 01)."' in page and 'alt="Caption of b only."' in page
    assert '<a href="a.png"><img loading="lazy" src="small/a.png"' in page  # a small picture linking the full one
    folder = tmp_path / "book" / "report"
    assert sorted(p.name for p in folder.iterdir()) == ["a.png", "a.svg", "b.png", "index.html", "small"]
    with Image.open(folder / "small" / "b.png") as small:
        assert small.size == (480, 300) and small.mode == "P"
    assert "<title>Report figures</title>" in page and 'href="../index.html"' in page
    (tmp_path / "r" / "b.png").unlink()
    with pytest.raises(ValueError, match=r"index.md links b.png, which is not in .*; rebuild the report figures"):
        write_report_page(tmp_path / "r", tmp_path / "book2")
