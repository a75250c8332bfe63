"""The static trap lesson (robustgrpo.book.trap_page): its numbers are the package's, offline, in Chromium.

The page is written by the command (``python -m robustgrpo trap-page``) once per module; the browser
test moves its controls to a grid of settings and compares every number shown with
:func:`~robustgrpo.book.outlier_poisoning.engine.trap_data` (range undeclared) and
:func:`~robustgrpo.advantages.compute_advantages` with the declared range, formatted as the live
lesson's readout formats them. Every request that would leave the machine is blocked and counted.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from browser_util import ROOT, TIMEOUT

from robustgrpo.advantages import compute_advantages
from robustgrpo.lab.catalogue import clip_setting
from robustgrpo.book.outlier_poisoning.engine import M_GRID, trap_data, trap_rewards
from robustgrpo.book.trap_page import DECLARED_RANGE, PAGE_GROUP_SIZES, PAGE_METHODS, trap_page_tables


def _text(value: float) -> str:
    return "n/a" if value != value else f"{value:.4f}"


def _expected(M: float, k: int, G: int, c: float, declared: bool) -> dict[str, str]:
    """What the page must show: the live lesson's numbers (trap_data), or with the range declared the entry
    point's (the same call trap_data makes, plus reward_range)."""
    d = trap_data(M=M, k=k, G=G, c=c, methods=PAGE_METHODS)
    shown = {"M": f"{M:.1f}", "k": str(k), "G": str(G), "c": f"{c:.1f}", "wrong-count": str(G - k - 1),
             "crossing": f"{d.crossing:g}",
             **{key: _text(d.summary()[key]) for key in ("mean", "median", "std", "mad")}}
    if declared:
        group = torch.as_tensor(trap_rewards(M, k, G)).unsqueeze(0)
        for m in PAGE_METHODS:
            a = compute_advantages(group, m, tie_reference="group", reward_range=DECLARED_RANGE,
                                   **clip_setting(m, c)).advantages[0]
            wrong = float(a[0]) if G - k - 1 > 0 else float("nan")
            shown.update({f"{m}/wrong": _text(wrong), f"{m}/correct": _text(float(a[G - k - 1])),
                          f"{m}/glitch": _text(float(a[G - 1]))})
    else:
        for row in d.role_advantages().itertuples():
            shown.update({f"{row.method}/wrong": _text(row.wrong), f"{row.method}/correct": _text(row.correct),
                          f"{row.method}/glitch": _text(row.outlier)})
    return shown


def _settings() -> list[tuple[float, int, int, float, bool]]:
    """42 settings: G = 2, 3, 8 and 16; k at 1, G // 2 and G - 1; M at 0, one step below, at and past M* = G - k,
    and 50; c at both ends and between; the range declared and not."""
    out = []
    for G in (2, 3, 8, max(PAGE_GROUP_SIZES)):
        for k in sorted({1, G // 2, G - 1} - {0}):
            star = G - k
            for M, c, declared in ((0.0, 1.0, False), (star - 0.5, 2.5, False), (star, 5.0, True), (star + 0.5, 2.5, False),
                                   (50.0, 1.7, True)):
                if M >= 0:
                    out.append((M, k, G, c, declared))
    out.append((10.0, 1, 8, 2.5, True))  # seed 000 with the range declared
    return out


def test_the_grid_holds_the_settings_the_brief_names():
    grid = _settings()
    assert len(grid) >= 30
    assert {G for _, _, G, _, _ in grid} >= {2, 16} and {d for *_, d in grid} == {True, False}
    assert any(k == G - 1 for _, k, G, _, _ in grid) and any(k == 1 for _, k, _, _, _ in grid)
    assert any(M > G - k for M, k, G, _, _ in grid) and all(M in M_GRID for M, *_ in grid)


def test_bad_tables_are_refused_with_the_fix():
    with pytest.raises(ValueError, match=r"group_sizes must be consecutive integers from 2 up, e.g. range\(2, 17\)"):
        trap_page_tables(group_sizes=[])
    with pytest.raises(ValueError, match=r"group size must be an integer >= 2, got 1; pass group sizes such as range"):
        trap_page_tables(group_sizes=[1, 2])
    with pytest.raises(ValueError, match=r"group size must be an integer >= 2, got 2.5"):
        trap_page_tables(group_sizes=[2.5])
    with pytest.raises(ValueError, match="consecutive"):
        trap_page_tables(group_sizes=[2, 4])
    with pytest.raises(ValueError, match=r"methods must be among \['grpo'"):
        trap_page_tables(group_sizes=[2], methods=["batch_std"])


def _cell(tables: dict, G: int, k: int, table: str, method: str, role: str, M: float) -> str:
    """One stored value as the page's script reads it (runs expanded)."""
    values = []
    for part in tables["cells"][str(G)][str(k)][table][method][role].split(","):
        value, _, n = part.partition("*")
        values += [value] * int(n or 1)
    assert len(values) == M_GRID.size
    return values[list(M_GRID).index(M)]


def test_the_three_steps_say_what_the_numbers_show():
    tables = trap_page_tables(group_sizes=range(2, 9))
    # 1. past M* = G - k grpo's correct answer turns negative; below it, positive
    for k in range(1, 8):
        star = 8 - k
        assert float(_cell(tables, 8, k, "plain", "grpo", "correct", star - 0.5)) > 0
        assert float(_cell(tables, 8, k, "plain", "grpo", "correct", star + 0.5)) < 0
    # 2. k = 4 of G = 8: M* = 4, the median is 1, seed_mad and robust give the correct answers 0 (the wrong ones not)
    assert tables["crossing"]["8"]["4"] == "4"
    for M in (2.0, 10.0, 50.0):
        assert _expected(M, 4, 8, 2.5, False)["median"] == "1.0000"
        for m in ("seed_mad", "robust"):
            assert _cell(tables, 8, 4, "plain", m, "correct", M) == "0.0000"
            assert float(_cell(tables, 8, 4, "plain", m, "wrong", M)) < 0
    # 3. declared: the glitch outside (0, 1) gets 0, every other answer what the group without it gets
    for m in PAGE_METHODS:
        clean = compute_advantages(torch.tensor([[0.0] * 6 + [1.0]], dtype=torch.float64), m, tie_reference="group",
                                   **clip_setting(m, 1e300)).advantages[0]
        for M in (1.5, 10.0, 50.0):
            assert _cell(tables, 8, 1, "declared", m, "glitch", M) == "0.0000"
            assert _cell(tables, 8, 1, "declared", m, "wrong", M) == _text(float(clean[0]))
            assert _cell(tables, 8, 1, "declared", m, "correct", M) == _text(float(clean[6]))


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """The page as the command writes it."""
    out = tmp_path_factory.mktemp("trap_page")
    done = subprocess.run([sys.executable, "-m", "robustgrpo", "trap-page", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    assert "trap_lesson.html" in done.stdout
    return out / "trap_lesson.html"


SHOWN = """() => { const out = {};
  document.querySelectorAll('.rg-readout [data-key]:not([data-method])').forEach(n => { out[n.dataset.key] = n.textContent; });
  document.querySelectorAll('td[data-method]').forEach(n => { out[n.dataset.method + '/' + n.dataset.key] = n.textContent; });
  return out; }"""

SET = """([M, k, G, c, declared]) => {
  const set = (id, v) => { const el = document.getElementById(id); el.value = String(v);
                           el.dispatchEvent(new Event('input', {bubbles: true})); };
  set('rg-G', G); set('rg-k', k); set('rg-M', M); set('rg-c', c);
  const box = document.getElementById('rg-declared');
  if (box.checked !== declared) box.click(); }"""


@pytest.mark.slow
def test_the_page_shows_the_packages_numbers_offline_on_a_grid_of_settings(chromium, page, artifacts):
    assert page.stat().st_size < 1_000_000
    outside: list[str] = []
    context = chromium.new_context(viewport={"width": 1280, "height": 800})

    def route(r):
        if r.request.url.startswith("file://"):
            r.continue_()
        else:
            outside.append(r.request.url)
            r.abort()

    context.route("**/*", route)
    p = context.new_page()
    errors: list[str] = []
    p.on("pageerror", lambda e: errors.append(str(e)))
    p.goto(page.as_uri(), timeout=TIMEOUT)
    p.wait_for_selector("body[data-drawn]", timeout=TIMEOUT)
    assert p.title().startswith("The mean-variance trap, live")
    assert "$" not in p.inner_text("body")
    assert p.evaluate(SHOWN) == _expected(10.0, 1, 8, 2.5, False)  # opens on seed 000
    p.screenshot(path=str(artifacts / "trap_page_1280x800.png"), full_page=True)
    for M, k, G, c, declared in _settings():
        p.evaluate(SET, [M, k, G, c, declared])
        drawn = "|".join([f"{M:g}", str(k), str(G), f"{c:g}", str(declared).lower()])
        p.wait_for_selector(f'body[data-drawn="{drawn}"]', timeout=TIMEOUT)
        assert p.evaluate(SHOWN) == _expected(M, k, G, c, declared), (M, k, G, c, declared)
        assert p.evaluate("document.getElementById('rg-chart').querySelectorAll('polyline').length") == len(PAGE_METHODS)
    p.set_viewport_size({"width": 390, "height": 844})
    p.evaluate(SET, [10.0, 1, 8, 2.5, False])
    p.wait_for_selector('body[data-drawn="10|1|8|2.5|false"]', timeout=TIMEOUT)
    assert p.evaluate("document.documentElement.scrollWidth") <= 390  # nothing wider than a phone
    p.screenshot(path=str(artifacts / "trap_page_390.png"), full_page=True)
    context.close()
    assert errors == [] and outside == []
