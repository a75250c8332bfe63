"""Every estimator keeps one colour everywhere, and nothing else uses it (robustgrpo.book.style).

The rule over the colour map (:data:`~robustgrpo.book.style.ESTIMATOR_COLORS` from the registry,
:data:`~robustgrpo.book.style.REFERENCE_COLORS` for the rest, the primer's statistics), over the colours
written in the book's code, and on the figures where it was broken: the trap lesson's mean and median
lines (drawn in grpo's and robust's colours, with a legend label that changed with the value), the
learned critic (drawn in batch_huber's indigo) and the primer's statistics (each in the colour of the
estimator built on it).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from matplotlib.colors import to_hex, to_rgba

from robustgrpo.book.style import ESTIMATOR_COLORS, REFERENCE_COLORS, colour_clashes

BOOK = Path(__file__).resolve().parents[1] / "robustgrpo" / "book"
ESTIMATOR_HEX = {to_hex(c): m for m, c in ESTIMATOR_COLORS.items()}
#: A colour written in code: a hex literal, or a named colour given to a colour keyword.
LITERAL = re.compile(r"""["'](#[0-9A-Fa-f]{6})["']|\b(?:colou?r|c|facecolors?|edgecolors?|markeredgecolor)\s*=\s*["']([a-z]+)["']""")


def test_the_colour_map_gives_each_estimator_its_own_colour_and_nothing_else_uses_one():
    assert colour_clashes(ESTIMATOR_COLORS, REFERENCE_COLORS) == []
    assert len(ESTIMATOR_HEX) == len(ESTIMATOR_COLORS)


def test_the_primers_statistics_take_no_estimators_colour():
    """They took the colour of the estimator built on them (the mean grpo's, the median robust's, ...)."""
    from robustgrpo.book.robust_statistics_primer.plots import STATISTIC_COLORS

    assert colour_clashes(ESTIMATOR_COLORS, STATISTIC_COLORS) == []


def test_the_rule_finds_a_shared_colour_and_a_borrowed_one():
    assert colour_clashes({"a": "#000000", "b": "black"}, {}) == ["a and b share the colour black"]
    assert colour_clashes({"grpo": "#D55E00"}, {"critic": "#d55e00"}) == ["'critic' uses grpo's colour #D55E00"]


def _docstring_lines(text: str) -> set[int]:
    """The lines of a module's docstrings (their examples speak of colours; they draw nothing)."""
    lines: set[int] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and ast.get_docstring(node):
            doc = node.body[0]
            lines |= set(range(doc.lineno, doc.end_lineno + 1))
    return lines


def _borrowed(text: str) -> list[str]:
    """Each line of code (docstrings left out) that writes an estimator's colour."""
    out = []
    skip = _docstring_lines(text)
    for i, line in enumerate(text.splitlines(), 1):
        if i in skip:
            continue
        for hex_, named in LITERAL.findall(line):
            colour = hex_ or named
            try:
                rgba = to_rgba(colour)
            except ValueError:
                continue  # not a colour ("auto", a style name)
            if rgba[3] > 0 and to_hex(rgba) in ESTIMATOR_HEX:
                out.append(f"{i}: {colour} is {ESTIMATOR_HEX[to_hex(rgba)]}'s: {line.strip()}")
    return out


def test_the_scan_finds_an_estimators_colour_written_in_code():
    assert _borrowed('"""c="black" """\nax.axhline(1, color="#0072B2")\nax.plot(x, c="black")\nfill="none"') == [
        '2: #0072B2 is robust\'s: ax.axhline(1, color="#0072B2")', '3: black is winsor\'s: ax.plot(x, c="black")']


@pytest.mark.parametrize("path", sorted(BOOK.rglob("*.py")), ids=lambda p: str(p.relative_to(BOOK)))
def test_the_books_code_writes_no_estimators_colour(path):
    """A figure takes an estimator's colour from the registry (for that estimator) and every other colour from
    REFERENCE_COLORS or a neutral of its own: no module of the book writes an estimator's colour by hand."""
    assert _borrowed(path.read_text()) == []


def test_the_trap_lessons_mean_and_median_lines_are_neutral_and_keep_their_legend_label():
    pytest.importorskip("plotly")
    from robustgrpo.book.interactive import trace_by_meta
    from robustgrpo.book.outlier_poisoning.engine import trap_data
    from robustgrpo.book.outlier_poisoning.views import trap_views, update_trap_views

    fig = trap_views(trap_data())
    traces = trace_by_meta(fig)
    names = {key: traces[f"line:{key}"].name for key in ("mean", "median")}
    assert names == {"mean": "mean", "median": "median"}
    assert {to_hex(traces[f"line:{key}"].line.color) for key in names}.isdisjoint(ESTIMATOR_HEX)
    update_trap_views(fig, trap_data(M=40.0, k=3, G=12))  # the legend's labels do not move with the numbers
    assert {key: traces[f"line:{key}"].name for key in names} == names


def test_the_critic_and_the_seed_groups_lines_take_no_estimators_colour():
    from robustgrpo.book.policy_gradient_drift.plots import curve_colors
    from robustgrpo.book.outlier_poisoning.plots import ROLE_COLORS
    from robustgrpo.lab.simulate import CRITIC

    colours = curve_colors([*ESTIMATOR_COLORS, CRITIC])
    assert to_hex(colours[CRITIC]) not in ESTIMATOR_HEX
    assert len({to_hex(c) for c in colours.values()}) == len(colours)
    assert {to_hex(c) for c in ROLE_COLORS.values()}.isdisjoint(ESTIMATOR_HEX)
