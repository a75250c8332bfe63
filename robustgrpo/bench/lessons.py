"""The live lessons of notebooks 01, 02 and 04: every control at the largest sizes they offer.

Part of :mod:`robustgrpo.bench` (its docstring says what each benchmark measures and its target).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from robustgrpo.advantages import ESTIMATORS
from robustgrpo.checks import check_int
from robustgrpo.bench._common import load_average, load_text

__all__ = [
    "LESSON_TARGET_MS",
    "LessonBenchRow",
    "LessonBench",
    "run_lessons_benchmark",
    "format_lessons_table",
]


LESSON_TARGET_MS = 150.0


@dataclass(frozen=True)
class LessonBenchRow:
    """One timed case of a lesson: the data function alone, or a control's move through the widget."""

    lesson: str
    case: str
    ms: float
    max_ms: float
    n: int
    target: bool = True


@dataclass(frozen=True)
class LessonBench:
    """:func:`run_lessons_benchmark`'s result."""

    rows: tuple[LessonBenchRow, ...]
    threads: int
    load: tuple[float, float, float] | None


def _timed_calls(fn: Callable[[object], object], values: Sequence[object], before: Callable[[], None] | None = None) -> list[float]:
    times = []
    for v in values:
        if before is not None:
            before()
        t0 = time.perf_counter()
        fn(v)
        times.append(1e3 * (time.perf_counter() - t0))
    return times


def run_lessons_benchmark(repeats: int = 7, *, progress: bool = True) -> LessonBench:
    """Time the live lessons of notebooks 01, 02 and 04 at the largest sizes they offer.

    For each lesson, the pure data function alone and each control's move through the widget
    (``control.value = v``: the same ``observe`` callback a browser move runs: data function,
    in-place FigureWidget update, readout), ``repeats`` times to values not shown just before:

    * 01, the trap: G = 32 and every estimator the lesson offers;
    * 02, the playground: n = 50 (the largest n); moves of n and the seed are first visits
      (caches cleared), and the efficiency button (a Monte Carlo, no target) is timed once;
    * 04, distributions: G and scenario changes to a (scenario, G) not seen (caches cleared) and
      seen before, and adding an estimator.
    """
    from tqdm.auto import tqdm

    from robustgrpo.book.advantage_distributions import engine as lesson04
    from robustgrpo.book.robust_statistics_primer import engine as lesson02
    from robustgrpo.book.outlier_poisoning.engine import ESTIMATOR_CHOICES, trap_data
    from robustgrpo.book.dashboards import distributions_dashboard, playground_dashboard, trap_dashboard

    check_int("repeats", repeats, minimum=1)
    rows: list[LessonBenchRow] = []
    bar = tqdm(total=3, desc="lessons bench", disable=not progress, leave=False)

    def add(lesson: str, case: str, times: list[float], target: bool = True) -> None:
        rows.append(LessonBenchRow(lesson, case, float(np.median(times)), float(np.max(times)), len(times), target))

    # 01 -----------------------------------------------------------------
    top = 32
    m_values = [0.5 * (i + 1) for i in range(repeats)]
    add("01 trap", "trap_data, G = 32, every estimator",
        _timed_calls(lambda M: trap_data(M=M, k=1, G=top, methods=ESTIMATOR_CHOICES), m_values))
    dash = trap_dashboard(G=top, methods=ESTIMATOR_CHOICES)
    ctl = dash.controls
    add("01 trap", "move M", _timed_calls(lambda v: setattr(ctl["M"], "value", v), [10.0 + v for v in m_values]))
    add("01 trap", "move k", _timed_calls(lambda v: setattr(ctl["k"], "value", v), [2 + i % 20 for i in range(repeats)]))
    add("01 trap", "move c", _timed_calls(lambda v: setattr(ctl["c"], "value", v),
                                          [round(1.5 + 0.1 * i, 1) for i in range(repeats)]))
    add("01 trap", "move G (31 <-> 32)", _timed_calls(lambda v: setattr(ctl["G"], "value", v),
                                                      [31 if i % 2 == 0 else 32 for i in range(repeats)]))
    bar.update()

    # 02 -----------------------------------------------------------------
    n = lesson02.SAMPLE_SIZE_RANGE[1]

    def clear02() -> None:
        lesson02._curves.cache_clear()
        lesson02._breakdown.cache_clear()

    add("02 playground", f"playground_data, n = {n}, new sample", _timed_calls(
        lambda seed: lesson02.playground_data(n=n, seed=seed), list(range(50, 50 + repeats)), clear02))
    dash = playground_dashboard(n=n)
    ctl = dash.controls
    add("02 playground", "move x", _timed_calls(lambda v: setattr(ctl["x"], "value", v),
                                                [round(-2.0 + 0.1 * i, 1) for i in range(repeats)]))
    add("02 playground", "move m", _timed_calls(lambda v: setattr(ctl["m"], "value", v), [i + 1 for i in range(repeats)]))
    add("02 playground", "move the outlier size", _timed_calls(
        lambda v: setattr(ctl["size"], "value", v), [10 ** round(0.1 * (i + 1), 1) for i in range(repeats)]))
    add("02 playground", "move the seed (a new sample)", _timed_calls(
        lambda v: setattr(ctl["seed"], "value", v), [i + 1 for i in range(repeats)], clear02))
    add("02 playground", f"move n ({n - 1} <-> {n}, a new sample)", _timed_calls(
        lambda v: setattr(ctl["n"], "value", v), [n - 1 if i % 2 == 0 else n for i in range(repeats)], clear02))
    add("02 playground", f"efficiency button (Monte Carlo, n = {n})", _timed_calls(lambda _v: dash.show_efficiency(), [0]),
        target=False)
    bar.update()

    # 04 -----------------------------------------------------------------
    def clear04() -> None:
        lesson04._VIEWS.clear()
        lesson04.distributions_record.cache_clear()

    sizes = lesson04.GROUP_SIZES
    add("04 distributions", "distributions_data, a new (scenario, G)", _timed_calls(
        lambda G: lesson04.distributions_data(G=G), [sizes[i % len(sizes)] for i in range(repeats)], clear04))
    dash = distributions_dashboard()
    ctl = dash.controls
    targets = [sizes[(i + 2) % len(sizes)] for i in range(repeats)]

    def back() -> None:
        ctl["G"].value = sizes[1]

    def back_cleared() -> None:
        back()
        clear04()

    add("04 distributions", "move G, first visit (caches cleared)",
        _timed_calls(lambda v: setattr(ctl["G"], "value", v), targets, back_cleared))
    add("04 distributions", "move G, revisit", _timed_calls(lambda v: setattr(ctl["G"], "value", v), targets, back))
    scenarios = lesson04.SCENARIO_CHOICES
    add("04 distributions", "another scenario, first visit (caches cleared)", _timed_calls(
        lambda v: setattr(ctl["scenario"], "value", v), [scenarios[1 + i % (len(scenarios) - 1)] for i in range(repeats)],
        lambda: (setattr(ctl["scenario"], "value", scenarios[0]), clear04())))
    extra = [m for m in ESTIMATORS if m not in ctl["methods"].value]
    chosen = tuple(ctl["methods"].value)
    add("04 distributions", "add an estimator not shown before", _timed_calls(
        lambda m: setattr(ctl["methods"], "value", chosen + (m,)), extra[:repeats],
        lambda: setattr(ctl["methods"], "value", chosen)))
    bar.update()
    bar.close()
    load = load_average()
    return LessonBench(tuple(rows), torch.get_num_threads(), load)


def format_lessons_table(result: LessonBench) -> str:
    """Render :func:`run_lessons_benchmark`'s result with the target and verdicts."""
    load = load_text(result.load)
    lines = [
        f"live lessons (notebooks 01, 02, 04) at their largest sizes; torch {torch.__version__}, "
        f"{result.threads} thread(s); load average {load}",
        "time = the data function alone, or control.value = v until the callback returns "
        "(data function + in-place FigureWidget update + readout)",
        "",
        f"{'lesson':<18}{'case':<48}{'calls':>6}{'median ms':>11}{'max ms':>9}   target",
    ]
    for r in result.rows:
        verdict = (f"< {LESSON_TARGET_MS:g} ms: {'met' if r.ms < LESSON_TARGET_MS else 'NOT met'}" if r.target
                   else "none (a button)")
        lines.append(f"{r.lesson:<18}{r.case[:47]:<48}{r.n:>6}{r.ms:>11.1f}{r.max_ms:>9.1f}   {verdict}")
    return "\n".join(lines)


# ------------------------------------------------------------------ simulator

#: Target of the simulator case (256 prompts x G = 16 x 500 steps x 8 seeds, tabular) on two cores.
