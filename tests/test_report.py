"""Report figures: house-style checks on every registered builder, and the numbers of notebooks 01 and 02.

The generic tests iterate over :func:`robustgrpo.book.figures.report_figures`, so a builder added for
any notebook is checked the same way: name and notebook, caption, titles and labels on every
axes, determinism (same seed, same bytes in PNG, SVG and PDF), ``build_all`` and the ``figures`` command. Each
builder runs twice in this module (once cached for the checks, once inside ``build_all``).

Reference values come from ``data/reference/`` (seed 000's group, published efficiencies), never
typed into the tests.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from figure_util import clashes

from robustgrpo.lab.metrics import mad_zero_fraction, samuelson_bound
from robustgrpo.book.style import save_figure
from robustgrpo.book.robust_statistics_primer.plots import plot_breakdown, plot_mad_zero
from robustgrpo.book.outlier_poisoning.plots import (
    plot_advantages_by_role,
    plot_group_rewards,
    plot_sensitivity,
)
from robustgrpo.book.figures import ReportFigure, build_all, report_figures
from robustgrpo.book.robust_statistics_primer import report as P
from robustgrpo.book.outlier_poisoning import report as S
from prose import notebook_prose, takeaway_faults

ROOT = Path(__file__).resolve().parents[1]
SEED = json.loads((ROOT / "data" / "reference" / "seed_000.json").read_text())
REF = {k: v["value"] for k, v in SEED["values"].items()}
EFF = json.loads((ROOT / "data" / "reference" / "efficiency.json").read_text())

SPECS = report_figures()
NAMES = list(SPECS)
Z = 4.5  # Monte Carlo tolerance in standard errors

_BUILT: dict[str, ReportFigure] = {}


def built(name: str) -> ReportFigure:
    """The figure of builder ``name``, built once per test session."""
    if name not in _BUILT:
        _BUILT[name] = SPECS[name].builder()
    return _BUILT[name]


# ------------------------------------------------------------------ generic checks


def test_the_registry_holds_the_figures_of_notebooks_01_and_02():
    for name in ("01_seed_group", "01_seed_advantages", "01_seed_sensitivity", "01_seed_scale", "01_binary_groups",
                 "02_breakdown", "02_resolution", "02_update_weight", "02_influence", "02_efficiency", "02_samuelson",
                 "02_tie_collapse", "02_mad_zero"):
        assert name in SPECS, name


@pytest.mark.parametrize("name", NAMES)
def test_name_starts_with_its_notebooks_prefix_and_the_notebook_exists(name):
    spec = SPECS[name]
    assert re.fullmatch(r"\d\d_\w+\.ipynb", spec.notebook), spec.notebook
    assert name.startswith(spec.notebook[:3]), (name, spec.notebook)
    assert (ROOT / "notebooks" / spec.notebook).is_file(), f"{name} belongs to a notebook that does not exist"


@pytest.mark.parametrize("name", NAMES)
def test_builder_returns_its_figure_with_a_caption(name):
    rf = built(name)
    assert isinstance(rf, ReportFigure) and rf.name == name
    assert isinstance(rf.figure, Figure)
    caption = rf.caption.strip()
    assert caption and caption.endswith((".", ")")), caption
    assert not re.search(r"\b(nan|None)\b", caption), f"formatting slip in the caption: {caption}"
    takeaway = rf.takeaway.strip()
    assert not takeaway or takeaway.endswith((".", ")")), takeaway
    assert not re.search(r"\b(nan|None)\b", takeaway), f"formatting slip in the takeaway: {takeaway}"


def _is_colorbar(ax: Axes) -> bool:
    """Colorbar axes: matplotlib sets ``ax._colorbar`` and labels the axes '<colorbar>' (fig.colorbar)."""
    return getattr(ax, "_colorbar", None) is not None or ax.get_label() == "<colorbar>"


def _label_of_shared(ax: Axes, which: str) -> str:
    """The axis label of ``ax`` or, for shared axes, of any axes it shares that axis with (labelled once),
    or the figure's own label for that axis (``supxlabel``, one label under side-by-side panels)."""
    group = ax.get_shared_x_axes() if which == "x" else ax.get_shared_y_axes()
    getter = "get_xlabel" if which == "x" else "get_ylabel"
    own = " ".join(getattr(a, getter)() for a in group.get_siblings(ax)).strip()
    return own or (ax.figure.get_supxlabel() if which == "x" else ax.figure.get_supylabel())


@pytest.mark.parametrize("name", NAMES)
def test_every_axes_has_a_title_and_axis_labels(name):
    """Visible non-colorbar axes need a title (or the figure a suptitle) and x and y labels,
    where a shared axis may carry its label on one of the axes sharing it. A colorbar (recognised by
    matplotlib's ``_colorbar`` attribute or its '<colorbar>' label) needs a label instead."""
    fig = built(name).figure
    suptitle = fig._suptitle.get_text() if fig._suptitle is not None else ""
    visible = [ax for ax in fig.axes if ax.get_visible() and ax.axison]
    assert visible, f"{name} has no visible axes"
    for i, ax in enumerate(visible):
        where = f"{name} axes {i}"
        if _is_colorbar(ax):
            assert (ax.get_ylabel() or ax.get_xlabel()).strip(), f"{where}: colorbar without a label"
            continue
        title = " ".join(ax.get_title(loc) for loc in ("left", "center", "right")).strip()
        assert title or suptitle.strip(), f"{where}: no title"
        assert _label_of_shared(ax, "x"), f"{where}: no x label"
        assert _label_of_shared(ax, "y"), f"{where}: no y label"


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory) -> tuple[Path, list]:
    out = tmp_path_factory.mktemp("report")
    return out, build_all(out, formats=("png", "svg", "pdf"), progress=False)


def test_build_all_writes_every_figure_in_every_format_and_an_index(report_dir):
    out, result = report_dir
    assert [rf.name for rf, _, _ in result] == NAMES
    index = (out / "index.md").read_text()
    for rf, spec, paths in result:
        assert sorted(p.name for p in paths) == sorted(f"{rf.name}.{fmt}" for fmt in ("png", "svg", "pdf"))
        for p in paths:
            assert p.is_file() and p.stat().st_size > 0, p
        assert f"## {rf.name}" in index and rf.caption in index and spec.notebook in index
    _check_index(index, [rf for rf, _, _ in result])


def _entries(index: str) -> dict[str, str]:
    """The entries of a report index by figure name (the text under each ``## name`` heading)."""
    return {part.split("\n", 1)[0]: part.split("\n", 1)[1] for part in index.split("\n## ")[1:]}


def _check_index(index: str, figures: list[ReportFigure]) -> None:
    """Issue 45, item 3: an overview table first (each name linked to its entry, one line of message), then one entry
    per figure whose caption is printed once and whose takeaway never holds the caption."""
    from robustgrpo.book.figures import index_takeaway

    overview = index.split("\n## ", 1)[0]
    rows = [line for line in overview.splitlines() if line.startswith("| [")]
    assert [re.match(r"\| \[(\w+)\]\(#(\w+)\) \| (.+) \|$", r).group(1, 2) for r in rows] == [(f.name, f.name.lower())
                                                                                                   for f in figures]
    entries = _entries(index)
    for rf, row in zip(figures, rows):
        entry = entries[rf.name]
        assert entry.count(rf.caption) == 1, f"{rf.name}: the caption is printed {entry.count(rf.caption)} times"
        printed = index_takeaway(rf)
        assert rf.caption not in printed and (not printed or printed in entry)
        message = row.rsplit(" | ", 1)[1][:-2]
        assert message and message in " ".join((printed or rf.caption).split()).replace("|", "\\|"), (rf.name, message)
        if rf.numbers:
            assert f"<summary>Numbers behind the figure</summary>\n\n{rf.numbers}\n\n</details>" in entry


def test_the_index_drops_a_caption_repeated_inside_a_takeaway():
    from robustgrpo.book.figures import index_markdown, index_takeaway

    fig = built(NAMES[0]).figure
    once = ReportFigure("x_once", fig, "Bars of the group.", takeaway="Bars of the group. The mean moves.", numbers="| a |")
    twice = ReportFigure("x_same", fig, "Bars of the group.", takeaway="Bars of the group.")
    assert index_takeaway(once) == "The mean moves." and index_takeaway(twice) == ""
    index = index_markdown([(once, SPECS[NAMES[0]], []), (twice, SPECS[NAMES[0]], [])], ("png",))
    _check_index(index, [once, twice])
    assert "| [x_once](#x_once) | The mean moves. |" in index and "| [x_same](#x_same) | Bars of the group. |" in index
    assert "**Takeaway:**" not in _entries(index)["x_same"]


def test_the_books_report_page_shows_every_figure_within_2_mb(report_dir, tmp_path):
    """The book's page of this index (robustgrpo.book.site): every figure shown small and linked whole, the page
    with its pictures at most 2 MB (the book's pages are checked in Chromium in test_notebooks.py)."""
    from robustgrpo.book.site import write_report_page

    out, result = report_dir
    page = write_report_page(out, tmp_path / "report").read_text()
    shown = re.findall(r'<a href="([^"]+\.png)"><img loading="lazy" src="(small/[^"]+)"', page)
    assert sorted(full for full, _ in shown) == sorted(f"{rf.name}.png" for rf, _, _ in result)
    size = len(page.encode()) + sum((tmp_path / "report" / small).stat().st_size for _, small in shown)
    assert size <= 2_000_000, f"{size / 1e6:.2f} MB"


@pytest.mark.parametrize("name", NAMES)
def test_a_rebuild_gives_the_same_files(name, report_dir, tmp_path):
    """Same bytes in every format (a fresh process is tried in test_determinism).

    Both builds are made here, in one process on one machine, from the same code: their numbers are the same to
    the bit by construction, so the bytes can only differ through the writers (ids, dates, dict order), which is
    what this checks. Nothing is compared with a figure file made elsewhere."""
    out, _ = report_dir
    for again in save_figure(built(name).figure, tmp_path, name, ("png", "svg", "pdf")):
        assert again.read_bytes() == (out / again.name).read_bytes(), f"{again.name} is not deterministic"


def test_figures_command_builds_one_figure(tmp_path):
    name = NAMES[0]
    out = subprocess.run(
        [sys.executable, "-m", "robustgrpo", "figures", "--out", str(tmp_path), "--only", name, "--no-progress"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout
    assert name in out and str(tmp_path.resolve()) in out
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f"{name}.png", f"{name}.svg", f"{name}.pdf", "index.md"])


# ------------------------------------------------------------- notebook 01 values


def _advantage(data: pd.DataFrame, method: str, role: str, condition: str = "poisoned") -> float:
    row = data[(data["method"] == method) & (data["role"] == role) & (data["condition"] == condition)]
    assert len(row) == 1, (method, role, condition)
    return float(row["advantage"].iloc[0])


def test_seed_group_figure_draws_the_scenario():
    rf = built("01_seed_group")
    assert rf.data["reward"].tolist() == [0.0] * 6 + [1.0, 10.0]
    assert rf.data["role"].tolist() == ["wrong"] * 6 + ["correct", "outlier"]
    assert f"{REF['mean']:.3f}" in rf.takeaway and "G = 8 as one bar per answer" in rf.caption


def test_show_puts_the_figure_then_its_takeaway_then_its_caption_folded(monkeypatch):
    """What a notebook cell shows: the figure, the takeaway in the open, the numbers behind the figure and the caption
    (what the figure draws) each inside a collapsed view whose summary names it; nothing else."""
    import IPython.display

    from robustgrpo.book.figures import CAPTION_SUMMARY, show

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj))
    rf = built("03_heatmap_update_cosine")
    show(rf, caption=True)
    assert shown[0] is rf.figure and len(shown) == 4
    assert shown[1].data == f"**Takeaway:** {rf.takeaway}"
    assert shown[2].data.startswith("<details><summary>Numbers behind the figure</summary>") and rf.numbers in shown[2].data
    folded = shown[3].data
    assert folded.startswith(f"<details><summary>{CAPTION_SUMMARY}</summary>\n\n") and folded.endswith("\n\n</details>")
    assert rf.caption in folded
    shown.clear()
    show(rf)  # no caption asked: the figure, its takeaway and the numbers behind it
    assert len(shown) == 3 and rf.caption not in shown[1].data and rf.caption not in shown[2].data



def _sentences(text: str) -> set[str]:
    """The sentences of a caption or takeaway, without Markdown emphasis, for comparing the two."""
    plain = re.sub(r"[*_`]", "", text)
    return {s.strip() for s in re.split(r"(?<=[.:;])\s+", plain) if len(s.strip()) > 20}


#: The chapters whose figures' captions say what is drawn and whose takeaways say what it shows (issue 41's
#: item 5, carried through one chapter at a time; the others still share sentences between the two).
SPLIT_CAPTIONS = ("01_outlier_poisoning.ipynb", "02_robust_statistics_primer.ipynb", "03_sweep_G_and_c.ipynb",
                  "04_advantage_distributions.ipynb", "05_policy_gradient_drift.ipynb",
                  "06_grouping_and_dynamic_clipping.ipynb", "07_your_rewards.ipynb", "08_real_trainer.ipynb",
                  "09_composite_reward.ipynb")
#: Those of them that draw their figures in the notebook rather than register them: the markdown cell above each
#: figure cell is its caption, the one below its takeaway.
NOTEBOOK_CAPTIONS = tuple(n for n in SPLIT_CAPTIONS if not any(s.notebook == n for s in SPECS.values()))


@pytest.mark.parametrize("name", [n for n in NAMES if SPECS[n].notebook in SPLIT_CAPTIONS])
def test_caption_says_what_is_drawn_and_the_takeaway_what_it_shows_without_repeating_it(name):
    """Each report figure of a converted chapter has both, and they differ: no sentence (or clause) of one is in
    the other."""
    rf = built(name)
    assert rf.caption.strip() and rf.takeaway.strip(), name
    shared = _sentences(rf.caption) & _sentences(rf.takeaway)
    assert not shared, f"{name}: caption and takeaway repeat {shared}"
    assert rf.caption not in rf.takeaway and rf.takeaway not in rf.caption


@pytest.mark.parametrize("notebook", NOTEBOOK_CAPTIONS)
def test_a_notebook_drawn_figure_has_a_caption_above_and_a_different_takeaway_below(notebook):
    """Every cell tagged 'figure' sits between two markdown cells: the caption above, the takeaway below (it opens with
    **Takeaway:**), sharing no sentence; glued numbers as committed (tests/test_diagnose.py checks them for 07)."""
    import nbformat

    cells = nbformat.read(ROOT / "notebooks" / notebook, as_version=4).cells
    shown = [i for i, c in enumerate(cells) if "figure" in c.get("metadata", {}).get("tags", [])]
    assert shown, f"{notebook} tags no figure cell"
    for i in shown:
        caption, takeaway = cells[i - 1], cells[i + 1]
        assert caption.cell_type == takeaway.cell_type == "markdown", (notebook, i)
        assert takeaway.source.startswith("**Takeaway:**"), (notebook, i, takeaway.source[:60])
        shared = _sentences(caption.source) & _sentences(takeaway.source)
        assert not shared, f"{notebook}, cell {i}: caption and takeaway repeat {shared}"


def _takeaways(notebook: str) -> list[tuple[str, str]]:
    """(where, takeaway) for every figure of ``notebook``: its registered figures' takeaways, or, for a chapter that
    draws its figures in the notebook, the markdown cell below each cell tagged 'figure'."""
    import nbformat

    registered = [(n, built(n).takeaway) for n in NAMES if SPECS[n].notebook == notebook]
    if registered:
        return registered
    cells = nbformat.read(ROOT / "notebooks" / notebook, as_version=4).cells
    return [(f"cell {i + 1}", cells[i + 1].source) for i, c in enumerate(cells)
            if "figure" in c.get("metadata", {}).get("tags", [])]


@pytest.mark.parametrize("notebook", SPLIT_CAPTIONS)
def test_every_takeaway_of_an_edited_chapter_is_one_sentence_with_at_most_three_numbers(notebook):
    """Issue 45, item 3: the rule of tests/prose.py (takeaway_faults: what counts as a number is stated there); the
    other numbers go in the folded "Numbers behind the figure"."""
    takeaways = _takeaways(notebook)
    assert takeaways, f"{notebook} has no figure"
    faults = {where: takeaway_faults(text) for where, text in takeaways if takeaway_faults(text)}
    assert not faults, f"{notebook}: {faults}"


def test_the_takeaway_rule_counts_numbers_and_sentences_as_stated():
    from prose import numbers_in, sentences_in

    assert numbers_in("at G = 8, 12.5 % of 1,000 groups; 1e-3 and 10^6 and -0.107") == ["8", "12.5 %", "1,000", "1e-3",
                                                                                          "10^6", "-0.107"]
    assert numbers_in("seed 000's 0/1 rewards (notebook 04, section 2), `reward_range=(0, 1)`, k3 and 01_seed") == []
    assert numbers_in("the mean <!--glue:mean:.3f-->1.375<!--/glue--> and (G - 1)/sqrt(G)") == ["1.375", "1"]
    assert numbers_in("grpo ends at 0.000 under the judge “hack: '#' judged 1.5”") == ["0.000"]
    assert len(sentences_in("**Takeaway:** grpo gives 0.5 at p = 0.3. Robust gives 1.")) == 2
    assert sentences_in("robust keeps 1.871; seed_mad gets 0.286.") == ["robust keeps 1.871; seed_mad gets 0.286."]
    assert takeaway_faults("one, 2, 3, 4 and 5. Two.") == ["2 sentences", "4 numbers ['2', '3', '4', '5']"]


@pytest.mark.parametrize("notebook", SPLIT_CAPTIONS)
def test_the_index_entry_of_an_edited_chapter_prints_its_own_takeaway_whole(notebook):
    """In a chapter edited for readers the index prints the registered takeaway as it is (nothing cut) and the
    overview's message is that one sentence."""
    from robustgrpo.book.figures import index_markdown

    names = [n for n in NAMES if SPECS[n].notebook == notebook]
    if not names:
        pytest.skip(f"{notebook} registers no report figure (its figures are drawn in the notebook)")
    figures = [built(n) for n in names]
    index = index_markdown([(rf, SPECS[rf.name], []) for rf in figures], ("png",))
    _check_index(index, figures)
    for rf in figures:
        assert f"**Takeaway:** {rf.takeaway}" in _entries(index)[rf.name]
        in_cell = " ".join(rf.takeaway.split()).replace("|", "\\|")  # a Markdown table cell escapes its bars
        assert f"| [{rf.name}](#{rf.name}) | {in_cell} |" in index


def test_notebook_01s_prose_places_the_seed_numbers():
    """Every number notebook 01's prose states is glued from the package, and reads as seed 000's reference."""
    from robustgrpo import compute_advantages, recommended_method

    group = built("01_seed_group")
    assert f"grpo gives the correct answer **{REF['grpo_correct_bessel']:.3f}**" in group.takeaway
    assert "| population std, ddof = 0 (seed 000's text) | 3.276 |" in group.numbers
    rewards = torch.tensor([[0.0] * 6 + [1.0, 10.0]])
    call = S.call_values(compute_advantages(rewards, "rank", reward_range=(0, 1)), rewards)
    assert call["call_method"] == "rank" and call["call_glitch"] == 0 and call["call_correct"] > 0 > call["call_wrong"]
    assert call["call_method"] == recommended_method("binary", reward_range_declared=True)  # as the prose says
    values = {**S.fallback_values(), **S.mad_zero_values(), **S.mc_grpo_values(), **call, **S.closing_values()}
    assert values["mad"] == 0 and values["tie_limit"] == 500 and values["resolution"] == 1e-3
    prose = notebook_prose("01_outlier_poisoning.ipynb", values)
    assert "and the MAD is **0**: six of the eight rewards tie at 0" in prose
    assert f"the correct answer gets **{REF['seed_mad_correct']:.3f}** instead of about {REF['clean_grpo_correct']:.2f}" in prose
    assert f"correct answer **{REF['robust_correct']:.3f}**, glitch clipped at c" in prose
    assert "up to 500 times the reward gap; beyond, the gap of 1 is below the estimator's resolution and ties" in prose
    assert "| robust's resolution, a share of the group's range | 0.1 % |" in prose
    assert "P(MAD = 0) at G = 8 is 86.4 % at p = 0.3, and 100 % at every p with torch's lower median." in prose
    assert "| P(MAD = 0), G = 8 | 99.5 % | 86.4 % | 72.7 % |" in prose
    assert "the glitch gets 10,000 against the correct answer's 1,000, that is 10 times its weight" in prose
    assert "`winsor` (20 % per tail) erases the lone correct answer of the clean group" in prose
    assert S.estimator_table().loc["winsor", "correct, clean"] == 0  # what that sentence says
    assert (f"The call with `rank` and `reward_range=(0, 1)` gives the correct answer {call['call_correct']:.3f}, each "
            f"wrong answer {call['call_wrong']:.3f} and the masked glitch 0") in prose
    assert f"keeps {REF['robust_correct']:.3f} for any glitch up to 500 times the reward gap" in prose
    assert f"`{recommended_method('binary', reward_range_declared=True)}` with `reward_range` declared" in prose
    assert f"`{recommended_method('binary', reward_range_declared=False)}` without" in prose
    assert built("01_binary_groups").numbers.endswith("returns 0, not 0.5 (the mean of the two middle values), so seed "
                                                       "000's code centres on the wrong answers and only the correct ones "
                                                       "get a signal.")


def test_notebook_01s_table_has_every_estimator_on_both_groups():
    table = S.estimator_table()
    assert list(table.index) == list(S.ESTIMATORS)
    assert table.loc["grpo", "correct"] == pytest.approx(REF["grpo_correct_bessel"], abs=1e-6)
    assert table.loc["grpo", "correct, clean"] == pytest.approx(REF["clean_grpo_correct"], abs=1e-6)
    assert table.loc["seed_mad", "fallback"] == "yes" and table.loc["grpo", "fallback"] == "no"
    other = torch.tensor([[0.0, 1.0]])
    with pytest.raises(ValueError, match="seed 000's group"):
        S.call_values(S.compute_advantages(other, "grpo"), other)


def test_clip_schedule_anneals_c_linearly_or_along_a_cosine_and_names_a_bad_setting():
    from robustgrpo.book.sweep_g_and_c.report import clip_schedule

    np.testing.assert_allclose(clip_schedule([0.0, 0.5, 1.0]), [2.0, 2.75, 3.5])
    np.testing.assert_allclose(clip_schedule([0.0, 0.5, 1.0], kind="cosine"), [2.0, 2.75, 3.5])
    np.testing.assert_allclose(clip_schedule(0.25, kind="cosine"), 2.0 + 1.5 * (1 - math.cos(math.pi / 4)) / 2)
    with pytest.raises(ValueError, match="progress must lie in"):
        clip_schedule([1.5])
    with pytest.raises(ValueError, match="kind must be"):
        clip_schedule(0.5, kind="step")
    with pytest.raises(ValueError, match="start must be a finite number > 0"):
        clip_schedule(0.5, start=0.0)
    with pytest.raises(ValueError) as err:
        clip_schedule(0.5, 1.0, -1.0)
    assert str(err.value) == "clip_schedule end must be a finite number > 0, got -1.0"
    with pytest.raises(ValueError) as err:
        clip_schedule(0.5, 0.0, 1.0)
    assert str(err.value) == "clip_schedule start must be a finite number > 0, got 0.0"


def test_notebook_03s_sentences_read_the_heat_maps_and_the_dashboard_data():
    from robustgrpo.book.sweep_g_and_c.engine import dashboard_data
    from robustgrpo.book.sweep_g_and_c import report as W

    heat = built("03_heatmap_update_cosine")
    grpo4, grpo256 = (W.cell_value(heat.data, "grpo", g, "update_cosine") for g in (4, 256))
    assert f"(cosine {grpo4:.3f} at G = 4, {grpo256:.3f} at the largest G)" in heat.takeaway and grpo256 < grpo4
    assert f"| grpo | {grpo4:.3f} | " in heat.numbers and heat.numbers.count(f"{grpo256:.3f}") >= 1
    robust4, robust256 = (W.cell_value(heat.data, "robust", g, "update_cosine") for g in (4, 256))
    assert robust256 > robust4 and "while the median-centred robust gets closer." in heat.takeaway
    fallback = built("03_heatmap_fallback")
    assert f"{100 * W.cell_value(fallback.data, 'seed_mad', 8, 'fallback_rate'):.1f} %" in fallback.takeaway
    assert "for robust." in built("03_clip_schedule").takeaway
    trap = dashboard_data(G=8, c=2.5, rate=0.05, size=10.0, methods=["grpo", "seed_mad", "robust", "rank"], n_groups=500)
    big = dashboard_data(G=16, rate=0.05, size=10.0, methods=["seed_mad", "robust"], n_groups=500)
    huge = dashboard_data(G=8, rate=0.05, size=1000.0, methods=["grpo", "seed_mad", "robust", "rank"], n_groups=500)
    values = W.dashboard_values(trap, big, huge)
    assert (values["trap_G"], values["big_G"], values["huge_size"]) == (8, 16, 1000)
    text = notebook_prose("03_sweep_G_and_c.ipynb", values, partial=True)
    assert f"takes its fallback in {100 * trap.fallback_rate['seed_mad']:.1f} % of the groups at G = 8;" in text
    assert f"seed_mad's fallback rate is {100 * big.fallback_rate['seed_mad']:.1f} % at G = 16" in text
    assert trap.sign_agreement["robust"] > trap.sign_agreement["grpo"]  # "whose signs robust keeps more often than grpo"
    assert (f"| robust | {trap.update_cosine['robust']:.3f} | {huge.update_cosine['robust']:.3f} | "
            f"{trap.contaminated_mean_advantage['robust']:+.2f} | {100 * trap.sign_agreement['robust']:.1f} % |") in text
    assert f"| rank | | {huge.update_cosine['rank']:.3f} | | |" in text and "update cosine, glitch 1000 |" in text
    assert "below robust's and rank's resolution (a share of the group's range" in text


def test_notebook_02s_sentences_read_its_figures_tables():
    from robustgrpo.book.robust_statistics_primer import report as P

    breakdown, mad_zero, efficiency = built("02_breakdown"), built("02_mad_zero"), built("02_efficiency")
    d = breakdown.data[breakdown.data["G"] == 8].set_index("method")
    assert f"a single glitch, {d.loc['grpo', 'breakdown']:.1%} of the group, already breaks grpo" in breakdown.takeaway
    assert "12.5%" in breakdown.takeaway  # one of eight
    exact = mad_zero.data.query("source == 'exact'")
    assert mad_zero.takeaway.endswith(f"over the whole map it is 0 in {exact['mad_zero'].mean():.1%} of groups.")
    assert f"| the whole map (mean) | {100 * exact['mad_zero'].mean():.1f} % |" in mad_zero.numbers
    e = efficiency.data.set_index("estimator")
    assert f"The MAD buys its 50 % breakdown with {e.loc['mad', 'efficiency']:.1%} efficiency" in efficiency.takeaway
    values = P.closing_values(breakdown, mad_zero, efficiency)
    assert values["tie_limit"] == 500 and values["robust_glitches"] == int(d.loc["robust", "glitches"]) - 1
    closing = notebook_prose("02_robust_statistics_primer.ipynb", values, partial=True).split("## Takeaway", 1)[1]
    assert closing.count(" - ") == 4 and "published: MAD 36.75%, Qn 82.27%, Huber 95%" in closing
    assert f"keeps its lead against {int(d.loc['robust', 'glitches']) - 1} glitch under robust" in closing
    assert "(glitches beyond 500 reward gaps tie the gap)" in closing
    assert f"| {d.loc['robust', 'breakdown']:.3f} | {d.loc['robust', 'theory']:.3f} | 2 | 2 |" in breakdown.numbers
    for name in ("02_influence", "02_samuelson", "02_tie_collapse", "02_update_weight"):  # were the caption repeated
        assert built(name).takeaway not in built(name).caption and built(name).numbers
    assert built("02_resolution").takeaway.endswith("so no glitch size matters.")


def test_seed_advantages_figure_has_the_seed_numbers():
    rf = built("01_seed_advantages")
    d = rf.data
    assert _advantage(d, "grpo", "correct") == pytest.approx(REF["grpo_correct_bessel"], abs=1e-6)
    assert _advantage(d, "grpo", "correct", "clean") == pytest.approx(REF["clean_grpo_correct"], abs=1e-6)
    assert _advantage(d, "grpo", "outlier") == pytest.approx(REF["grpo_outlier_bessel"], abs=1e-6)
    assert _advantage(d, "seed_mad", "correct") == pytest.approx(REF["seed_mad_correct"], abs=1e-6)
    assert _advantage(d, "seed_mad", "outlier") == REF["seed_mad_outlier"]
    assert _advantage(d, "robust", "correct") == pytest.approx(REF["robust_correct"], abs=1e-6)
    assert _advantage(d, "mc_grpo", "correct") == pytest.approx(1000.0)  # 1 / (MAD 0 + 1e-3)
    for m in ("robust", "seed_mad", "mc_grpo"):  # a median centre: the majority gets nothing
        assert _advantage(d, m, "wrong") == 0.0
    for m in ("huber_m", "rank"):
        assert _advantage(d, m, "wrong") < 0 < _advantage(d, m, "correct")
    assert set(d["method"]) == set(S.ESTIMATORS)
    assert f"{REF['grpo_correct_bessel']:.3f}" in rf.takeaway and f"| seed_mad | {REF['seed_mad_correct']:.3f} |" in rf.numbers


def test_seed_advantages_figure_writes_no_label_over_another():
    """mc_grpo's clean and poisoned bars are both off scale (1,000): their two labels, one with a white patch behind
    it, sit one above the other without touching (they overlapped by 0.8 px at 0.22 in a row)."""
    fig = built("01_seed_advantages").figure
    labels = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert labels.count("1,000") == 2
    assert not clashes(fig)


def test_seed_advantages_figure_takes_a_subset_of_methods():
    rf = S.seed_advantages_figure(methods=["grpo", "robust"])
    assert set(rf.data["method"]) == {"grpo", "robust"} and "-0.107" in rf.takeaway
    with pytest.raises(ValueError, match="unknown method 'nope'"):
        S.seed_advantages_figure(methods=["nope"])


def test_sensitivity_figure_follows_the_correct_answer():
    rf = built("01_seed_sensitivity")
    d = rf.data[rf.data["sample"] == SEED["correct_index"]]
    grpo = d[d["method"] == "grpo"].set_index("value")["advantage"]
    assert grpo[10.0] == pytest.approx(REF["grpo_correct_bessel"], abs=1e-6)
    assert grpo[0.0] == pytest.approx(REF["clean_grpo_correct"], abs=1e-6)
    # the mean (1 + M) / 8 passes the correct answer's 1 at M = 7
    assert abs(grpo[7.0]) < 1e-9 and (grpo[grpo.index > 7] < 0).all() and (grpo[grpo.index < 7] > 0).all()
    robust = d[(d["method"] == "robust") & (d["value"] >= 1)]["advantage"]
    assert np.allclose(robust, REF["robust_correct"])
    assert "above 7" in rf.takeaway


def test_scale_figure_shows_the_std_fallback_growing():
    rf = built("01_seed_scale")
    d = rf.data
    seed_mad = d[d["method"] == "seed_mad"].set_index("value")
    assert seed_mad["fallback"].all()
    assert seed_mad.loc[10.0, "scale"] == pytest.approx(REF["std_bessel"] + 1e-6, abs=1e-6)
    assert (np.diff(seed_mad["scale"].to_numpy()[seed_mad.index > 1]) > 0).all()
    robust = d[(d["method"] == "robust") & (d["value"] >= 1)].set_index("value")["scale"]
    # the bounded fallback: b = the correct answer's resolved deviation, s = b sqrt(2/7), t = 1e-3 M
    expected = (1 - 1e-3 * robust.index.to_numpy()) * math.sqrt(2 / 7)
    np.testing.assert_allclose(robust.to_numpy(), expected, rtol=1e-12)


def test_binary_groups_figure():
    rf = built("01_binary_groups")
    d = rf.data.set_index(["method", "k", "role"])["advantage"]
    g = 8
    for k in range(1, g // 2):
        assert d["robust", k, "wrong"] == 0.0 and d["robust", k, "correct"] > 0
    assert d["robust", 1, "correct"] == 2.5  # sqrt(7) = 2.65, clipped at c
    assert d["grpo", 1, "wrong"] == pytest.approx(-(1 / 8) / math.sqrt(7 / 56), abs=1e-5)
    split = np.array([0.0] * 4 + [1.0] * 4)
    # seed 000's lower median centres the even split on 0: the wrong answers get nothing
    assert d["seed_mad", 4, "wrong"] == 0.0
    assert d["seed_mad", 4, "correct"] == pytest.approx(1 / (split.std(ddof=1) + 1e-6), abs=1e-6)
    assert d["robust", 4, "correct"] == pytest.approx(-d["robust", 4, "wrong"])
    assert d["robust", 4, "correct"] == pytest.approx(0.5 / (1.482602218505602 * 0.5), abs=1e-9)
    assert d["mc_grpo", 1, "correct"] == pytest.approx(1000.0)
    for m in ("huber_m", "rank"):
        assert all(d[m, k, "wrong"] < 0 < d[m, k, "correct"] for k in range(1, g))


@pytest.mark.parametrize("name", ["01_binary_groups", "01_seed_sensitivity"])
def test_side_by_side_panels_share_one_x_label_and_no_text_meets_another(name):
    fig = built(name).figure
    assert not clashes(fig), f"{name}: overlapping texts {clashes(fig)}"
    assert all(not ax.get_xlabel() for ax in fig.axes) and fig.get_supxlabel()
    # nothing is written inside the panels: the off-scale note is a legend entry
    assert all(not ax.texts for ax in fig.axes)


COMPOSITE_CURVES = ["09_composite_curves_correct", "09_composite_curves_length", "09_composite_curves_hack"]


@pytest.mark.parametrize("name", COMPOSITE_CURVES)
def test_composite_curves_are_one_quantity_per_figure_a_row_per_range_and_no_text_meets_another(name):
    """Issue 45: the 6 estimators x 4 judges x 3 quantities of one figure became a figure per quantity, each with a
    row without and a row with the declared range, so a panel holds six curves, not twelve."""
    from robustgrpo.book.composite_reward import report as R
    from robustgrpo.book.real_trainer.report import CORE_ESTIMATORS
    from robustgrpo.book.style import estimator_color

    rf = built(name)
    metric = next(m for m, (n, _, _) in R.COMPOSITE_CURVES.items() if n == name)
    assert set(rf.data["metric"]) == {metric}
    judges, ranges = list(pd.unique(rf.data["judge"])), list(pd.unique(rf.data["range"]))
    assert len(judges) == 4 and ranges == ["no range", "range [-0.01, 1.2]"]
    axes = [ax for ax in rf.figure.axes if ax.get_visible()]
    assert len(axes) == len(judges) * len(ranges)
    for i, r in enumerate(ranges):
        assert r in axes[i * len(judges)].get_ylabel() and R.COMPOSITE_LABELS[metric] in axes[i * len(judges)].get_ylabel()
        for j, judge in enumerate(judges):
            lines = axes[i * len(judges) + j].get_lines()
            assert [line.get_color() for line in lines] == [estimator_color(e) for e in CORE_ESTIMATORS]
            for line, e in zip(lines, CORE_ESTIMATORS):  # each curve is its seed mean, panel by panel
                rows = rf.data[(rf.data["judge"] == judge) & (rf.data["range"] == r) & (rf.data["estimator"] == e)]
                np.testing.assert_array_equal(line.get_ydata(), rows.sort_values("step")["mean"].to_numpy())
    assert not clashes(rf.figure), f"{name}: overlapping texts {clashes(rf.figure)}"


def test_composite_curves_figure_names_the_closest_quantity():
    from robustgrpo.book.composite_reward import report as R

    with pytest.raises(ValueError, match="did you mean 'length'"):
        R.composite_curves_figure(metric="lenght")


def test_binary_groups_figure_names_the_off_scale_estimator_in_its_legend():
    legend = built("01_binary_groups").figure.legends[0]
    notes = [t.get_text() for t in legend.get_texts() if t.get_text().startswith("off scale")]
    assert notes == ["off scale, not drawn:\nmc_grpo: |A| up to 1000"]


# ------------------------------------------------------------- notebook 02 values


def test_breakdown_figure_matches_theory():
    rf = built("02_breakdown")
    d = rf.data
    for g in sorted(set(d["G"])):
        row = d[d["G"] == g].set_index("method")["breakdown"]
        assert row["grpo"] == pytest.approx(1 / g) and row["robust"] == 0.5
        assert row["seed_mad"] == pytest.approx((g // 2 + 1) / g)
        assert math.isinf(row["rank"])
    known = d[np.isfinite(d["theory"])]
    assert np.allclose(known["breakdown"], known["theory"])
    binary = d[d["binary_theory"].notna()]
    assert (binary["glitches"] == binary["binary_theory"]).all()
    assert len(binary) == len(d) - 2 * d["G"].nunique()  # huber_m and batch_huber: no closed form on 0/1 rewards
    g8 = d[d["G"] == 8].set_index("method")
    assert g8.loc["grpo", "glitches"] == 1 and g8.loc["robust", "glitches"] == 2 and g8.loc["rank", "glitches"] == 4


def test_resolution_figure_shows_the_jump_the_jitter_and_the_dynamic_range():
    rf = built("02_resolution")
    step, jitter, glitch = rf.data["step"], rf.data["jitter"], rf.data["glitch"]
    leave = step[step["value"].isin([0.0, 1e-9])].pivot_table(index=["method", "variant", "sample"], columns="value",
                                                               values="advantage")
    moved = (leave[1e-9] - leave[0.0]).abs().groupby(level=["method", "variant"]).max()
    assert moved[("rank", "exact (resolution 0)")] > 0.4  # mid-ranks jump when a tie splits
    assert moved[("robust", "resolution 0.001")] < 1e-8 and moved[("rank", "resolution 0.001")] == 0.0
    wp = jitter.set_index(["method", "variant", "jitter"])["wrong_positive"]
    small = jitter["jitter"].min()
    assert wp[("robust", "exact (resolution 0)", small)] > 0.2 and wp[("robust", "resolution 0.001", small)] == 0.0
    g = glitch.set_index(["method", "variant", "value"])["advantage"].sort_index()
    robust = g.loc[("robust", "resolution 0.001")]
    assert robust[robust.index <= 500].round(9).nunique() == 1  # constant over the dynamic range
    assert (robust[robust.index >= 1000] == 0).all()
    masked = g.loc[("robust", "reward_range (0, 1)")]
    assert np.allclose(masked[masked.index > 1], 6**0.5, rtol=1e-9)  # the glitch masked: one correct answer of 7
    # in a batch of clean groups the other groups cap the tolerance: the lead survives every glitch size
    batched = g.loc[("robust", "resolution 0.001, among 31 clean groups")]
    assert batched[batched.index > 2].round(9).nunique() == 1
    assert batched[batched.index > 2].iloc[0] == pytest.approx(robust[(robust.index > 2) & (robust.index <= 500)].iloc[0], rel=1e-12)
    rank_alone, rank_batched = g.loc[("rank", "resolution 0.001")], g.loc[("rank", "resolution 0.001, among 31 clean groups")]
    assert rank_alone.iloc[-1] < 0 < rank_batched.iloc[-1]
    assert "| (c) | rank at M = 10^6: among the clean groups, alone | 0.80, -0.20 |" in rf.numbers


def test_update_weight_figure_is_the_exact_enumeration():
    rf = built("02_update_weight")
    t = rf.data.set_index(["method", "p"])["w"]
    assert np.allclose(t.loc["rloo"], 1.0)
    assert t.loc[("robust", 0.06)] / t.loc[("robust", 0.5)] > t.loc[("grpo", 0.06)] / t.loc[("grpo", 0.5)] > 1


def test_influence_figure_mean_is_linear_and_median_bounded():
    rf = built("02_influence")
    d = rf.data
    mean = d[d["statistic"] == "mean"]
    # the fixed sample is symmetric (normal quantiles), so SC_n(x) of the mean is x itself
    assert np.allclose(mean["sensitivity"], mean["value"], atol=1e-9)
    for s in ("median", "huber_location", "mad", "qn"):
        assert d.loc[d["statistic"] == s, "sensitivity"].abs().max() < 10


def test_efficiency_figure_agrees_with_the_reference_table():
    rf = built("02_efficiency")
    d = rf.data.set_index("estimator")
    finite = EFF["finite_n"]["values"]
    for name, row in d.iterrows():
        ref = finite[name]
        tol = Z * math.hypot(row["se"], ref["se"])
        assert abs(row["efficiency"] - ref["efficiency"]) <= tol, (name, row["efficiency"], ref)
        assert row["published"] == EFF["values"][name]["efficiency"]
    # the published asymptotic values, within Monte Carlo error plus the finite-n gap of the reference run
    for name in ("mad", "huber_location", "qn"):
        lit = EFF["values"][name]["efficiency"]
        gap = abs(finite[name]["efficiency"] - lit)
        assert abs(d.loc[name, "efficiency"] - lit) <= Z * d.loc[name, "se"] + gap, name
    assert "| mad | " in rf.numbers and "| 36.75 % |" in rf.numbers and "| 82.27 % |" in rf.numbers


def test_samuelson_figure_is_attained():
    rf = built("02_samuelson")
    d = rf.data
    for ddof in (0, 1):
        part = d[d["ddof"] == ddof]
        assert np.allclose(part["bound"], samuelson_bound(part["G"].to_numpy(), ddof=ddof))
        # attained by a lone outlier, up to grpo's eps = 1e-6 in the denominator
        assert np.allclose(part["advantage"], part["bound"], rtol=1e-5)
    assert d[(d["ddof"] == 1) & (d["G"] == 8)]["bound"].item() == pytest.approx(REF["samuelson_bound_g8"], abs=1e-6)
    assert "| the G from which the bound exceeds the clip c = 2.5 | 9 |" in rf.numbers


def test_tie_collapse_figure():
    rf = built("02_tie_collapse")
    d = rf.data
    g = int(d["k"].max()) + 1
    past_half = d["k"] > g // 2
    for s in ("mad", "qn", "sn"):
        part = d[(d["statistic"] == s) & past_half]
        assert (part["zero_fraction"] == 1).all() and (part["relative_scale"] == 0).all(), s
    assert (d.loc[d["statistic"] == "std", "relative_scale"] > 0).all()


def test_mad_zero_map_is_the_exact_binomial_fraction():
    rf = built("02_mad_zero")
    exact = rf.data[rf.data["source"] == "exact"].drop(columns=["source", "method", "n_groups", "se"])
    expected = mad_zero_fraction(list(range(2, 65)), list(np.round(np.linspace(0, 1, 101), 10)))
    pd.testing.assert_frame_equal(exact.reset_index(drop=True), expected[exact.columns])
    mc = rf.data[rf.data["source"] == "monte_carlo"]
    assert len(mc) > 0
    truth = mad_zero_fraction(sorted(set(mc["G"])), sorted(set(mc["p"]))).set_index(["G", "p"])["mad_zero"]
    for _, row in mc.iterrows():
        assert abs(row["mad_zero"] - truth[row["G"], row["p"]]) <= Z * max(row["se"], 1 / row["n_groups"])


# ---------------------------------------------------------------- bad input


def test_plot_functions_reject_bad_data():
    with pytest.raises(ValueError, match="lacks column"):
        plot_group_rewards(pd.DataFrame({"sample": [0]}), {"mean": 0, "median": 0})
    with pytest.raises(ValueError, match="summary lacks"):
        plot_group_rewards(pd.DataFrame({"sample": [0], "reward": [1.0], "role": ["correct"]}), {})
    frame = pd.DataFrame({"method": ["grpo"], "role": ["correct"], "condition": ["dirty"], "advantage": [1.0]})
    with pytest.raises(ValueError, match="condition"):
        plot_advantages_by_role(frame)
    with pytest.raises(ValueError, match="limits"):
        plot_advantages_by_role(frame.assign(condition="clean"), limits=(3, -2))
    with pytest.raises(ValueError, match="not in the curve"):
        plot_sensitivity(pd.DataFrame({"method": ["grpo"], "value": [0.0], "sample": [0], "advantage": [0.0]}), {"x": 5})
    with pytest.raises(ValueError, match="must be a pandas DataFrame"):
        plot_breakdown([1, 2, 3])
    exact = mad_zero_fraction([2, 4], [0.0, 0.5, 1.0])
    with pytest.raises(ValueError, match="curve_sizes"):
        plot_mad_zero(exact, curve_sizes=(8,))


def test_builders_reject_bad_arguments():
    with pytest.raises(ValueError, match="group_size"):
        S.binary_groups_figure(group_size=1)
    with pytest.raises(ValueError, match="values"):
        S.seed_sensitivity_figure(values=[1.0])
    with pytest.raises(ValueError, match="scale statistics"):
        P.tie_collapse_figure(statistics=("mean",))
    with pytest.raises(ValueError, match="clip"):
        P.samuelson_figure(clip=-1.0)
