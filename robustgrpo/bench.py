"""Speed benchmark of the estimator catalogue, and a numpy + scipy reference.

``python -m robustgrpo bench`` times every estimator through
:func:`robustgrpo.compute_advantages` on float32 CPU tensors of shape
``[65536, 16]`` and ``[4096, 256]``, on three kinds of rewards
(:data:`BENCH_REWARDS`: uniform with an outlier, 0/1, 0/1 with jitter), at one
torch thread and at the default thread count, side by side in one run with:

* ``grpo (idiomatic)``: the two lines every trainer writes,
  ``std, mean = torch.std_mean(r, dim=-1, keepdim=True); (r - mean) / (std + eps)``;
* ``robust (numpy+scipy)``: the same computation as the ``robust`` estimator
  written with numpy array operations (:func:`robust_numpy_scipy`; the tests
  check it equals the estimator).

Ratios are measured in the same process, interleaved (each repeat runs every
case once, in turn, at each thread count), so machine noise hits all rows
alike; a row's ratio is the median of its per-repeat ratios. The targets
(:data:`ESTIMATOR_TARGETS`), on every kind of rewards and at every thread
count: ``robust`` within 1.2x grpo and ``rank``, ``huber_m`` and ``winsor``
within 3x at G = 16, 64 and 256 (the shapes timed of those), and ``robust`` at
least 3x faster than numpy + scipy. The table says which targets are not met.

``python -m robustgrpo bench --simulate`` runs :func:`run_simulate_benchmark`: the drift
simulator at 256 prompts x G = 16 x 500 steps x 8 seeds with a tabular policy (target: under
20 s on two cores), at one and at two torch threads side by side, and the notebook 05
dashboard's rerun after a slider move (target: under 2 s), printed by
:func:`format_simulate_table`.

``python -m robustgrpo bench --battery`` runs :func:`run_battery_benchmark`: the evidence battery
at its quick settings (target: under a minute) and its full ones (target: under five minutes), at
one torch thread, printed by :func:`format_simulate_table` with the load average.

``python -m robustgrpo bench --sweep`` runs :func:`run_sweep_benchmark`: the per-cell overhead
of each sweep engine (a cell that computes nothing) and the cells per second of a small
simulation cell run directly, on the local engine (batched and one by one) and on Ray, printed
by :func:`format_sweep_table` with the ceiling the driver's writes put on the Ray engine.

``python -m robustgrpo bench --trainer`` runs :func:`run_trainer_benchmark`: real TRL trainer
steps per second per estimator on the experiment's tiny model (the ``trl`` runnable), and the
share of a step the estimator's advantage block takes (target: under 5 %), measured side by
side in one run with one torch thread, printed by :func:`format_trainer_table`.

``python -m robustgrpo bench --lessons`` runs :func:`run_lessons_benchmark`: every control of the
live lessons of notebooks 01, 02 and 04 at the largest sizes they offer, the data function alone
and the move through the widget (target: median under 150 ms), printed by
:func:`format_lessons_table` with the torch thread count.

``python -m robustgrpo bench --dashboard`` runs :func:`run_dashboard_benchmark`
instead: the latency of each dashboard control at G = 256 with 10^4 groups, to the first view
drawn (target: median under 150 ms; a preview on the first groups when the setting is new) and
to the full data drawn, and notebook 03's heat-map sweep (target: under 10 s), printed by
:func:`format_dashboard_table`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import pandas as pd
import scipy.stats
import torch

from .checks import check_choice, check_int, check_int_list
from .advantages import ESTIMATORS, compute_advantages

__all__ = [
    "robust_numpy_scipy",
    "grpo_idiomatic",
    "BenchRow",
    "BENCH_REWARDS",
    "bench_rewards",
    "run_benchmark",
    "MAX_BENCH_REWARDS",
    "format_table",
    "DEFAULT_SHAPES",
    "ESTIMATOR_TARGETS",
    "DASHBOARD_TARGET_MS",
    "SWEEP_TARGET_S",
    "DashboardBenchRow",
    "DashboardBench",
    "run_dashboard_benchmark",
    "format_dashboard_table",
    "LESSON_TARGET_MS",
    "LessonBenchRow",
    "LessonBench",
    "run_lessons_benchmark",
    "format_lessons_table",
    "SIMULATE_TARGET_S",
    "RERUN_TARGET_S",
    "SimulateBenchRow",
    "run_simulate_benchmark",
    "BATTERY_TARGETS_S",
    "run_battery_benchmark",
    "format_simulate_table",
    "SWEEP_BENCH_SIM",
    "SweepBenchRow",
    "SweepBench",
    "run_sweep_benchmark",
    "format_sweep_table",
    "TRAINER_TARGET_SHARE",
    "TRAINER_BENCH_ESTIMATORS",
    "TrainerBenchRow",
    "TrainerBench",
    "run_trainer_benchmark",
    "format_trainer_table",
]

DEFAULT_SHAPES: tuple[tuple[int, int], ...] = ((65536, 16), (4096, 256))


def grpo_idiomatic(rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """GRPO advantages as trainers write them: one ``torch.std_mean`` pass."""
    std, mean = torch.std_mean(rewards, dim=-1, keepdim=True)
    return (rewards - mean) / (std + eps)


def robust_numpy_scipy(rewards: np.ndarray, c: float = 2.5, resolution: float = 1e-3) -> np.ndarray:
    """The ``robust`` estimator written with numpy and scipy.stats only.

    Same formulas as :func:`robustgrpo.advantages._robust` (median centre,
    tie tolerance ``resolution`` times the range clamped to the batch's
    typical gap, at least the float residue; resolved deviations, normal MAD
    and the bounded fallback scale with its continuous weighted lower median,
    clip at ``c``; degenerate groups get 0), for full ``[B, G]`` float arrays.
    """
    r = np.asarray(rewards)
    n = r.shape[-1]
    med = np.median(r, axis=-1, keepdims=True)
    d = r - med
    residue = 4 * np.finfo(r.dtype).eps * np.median(np.abs(r), axis=-1, keepdims=True)
    spread = r.max(axis=-1, keepdims=True) - r.min(axis=-1, keepdims=True)
    own = np.maximum(1e-6 * spread, residue)
    resolved = np.maximum(np.abs(d) - own, 0.0).ravel()
    weight = np.where(own > 0, np.minimum(np.maximum(np.abs(d) - own, 0.0) / np.where(own > 0, own, 1.0), 1.0),
                      (np.abs(d) > 0).astype(r.dtype)).ravel()
    if (weight > 0).any():  # the batch's typical gap: the weighted 80th percentile of the resolved deviations
        order = np.argsort(resolved, kind="stable")
        x, w = resolved[order], weight[order]
        cum = np.cumsum(w)
        i = min(int(np.searchsorted(cum, 0.8 * cum[-1])), len(x) - 1)
        prev = x[max(i - 1, 0)]
        typical = prev + (x[i] - prev) * (min(1.0, max(0.0, 2 * (0.8 * cum[-1] - cum[i] + w[i]) / w[i])) if w[i] > 0 else 1.0)
        spread = np.clip(spread, typical, 4 * typical)
    t = np.maximum(resolution * spread, residue)
    u = np.maximum(np.abs(d) - t, 0.0)
    sigma = np.median(u, axis=-1) / scipy.stats.norm.ppf(0.75)
    x = np.sort(u, axis=-1)
    safe_t = np.where(t > 0, t, 1.0)
    w = np.where(t > 0, np.minimum(x / safe_t, 1.0), (x > 0).astype(r.dtype))
    cum = np.cumsum(w, axis=-1)
    p = cum[:, -1:] / 2
    i = np.argmax(cum >= p, axis=-1)[:, None]
    w_i, x_i = np.take_along_axis(w, i, -1), np.take_along_axis(x, i, -1)
    x_prev = np.take_along_axis(x, np.maximum(i - 1, 0), -1)
    offset = p - (np.take_along_axis(cum, i, -1) - w_i)
    frac = np.where(w_i > 0, np.minimum(1.0, 2 * offset / np.where(w_i > 0, w_i, 1.0)), 1.0)
    b = x_prev + (x_i - x_prev) * frac
    s_fb = np.sqrt((np.minimum(u, b) ** 2).sum(axis=-1) / max(n - 1, 1))
    scale = np.maximum(np.maximum(sigma, s_fb), t[:, 0] / math.sqrt(max(n - 1, 1)))
    adv = np.clip(np.sign(d) * u / np.where(scale > 0, scale, 1.0)[:, None], -c, c)
    degenerate = (r.max(axis=-1) - r.min(axis=-1)) <= residue[:, 0]
    return np.where(degenerate[:, None], 0.0, adv).astype(r.dtype)


@dataclass(frozen=True)
class BenchRow:
    """One timed case: label, shape, kind of rewards, torch threads, median milliseconds, ratio to idiomatic grpo."""

    label: str
    shape: tuple[int, int]
    rewards: str
    threads: int
    ms: float
    ratio: float


#: Speed targets of the estimators: (estimator, G) -> the most times idiomatic grpo it may take,
#: on every kind of rewards in :data:`BENCH_REWARDS` and at every thread count timed.
ESTIMATOR_TARGETS: dict[tuple[str, int], float] = {
    **{("robust", G): 1.2 for G in (16, 64, 256)},
    **{(name, G): 3.0 for name in ("rank", "huber_m", "winsor") for G in (16, 64, 256)},
}

#: The kinds of rewards the estimators are timed on (real runs produce all three); see :func:`bench_rewards`.
BENCH_REWARDS: tuple[str, ...] = ("uniform+outlier", "0/1", "0/1+jitter")


def bench_rewards(kind: str, shape: tuple[int, int], generator: torch.Generator) -> torch.Tensor:
    """Float32 rewards of one of :data:`BENCH_REWARDS`.

    ``"uniform+outlier"``: uniform on [0, 1) with an outlier of 10 in every
    group (continuous, so the order-based estimators meet near-ties in their
    linear zones); ``"0/1"``: 1 with probability 0.3, else 0 (every group a
    run of exact ties); ``"0/1+jitter"``: the same plus normal jitter of
    standard deviation 1e-4 (near-ties within the tie tolerance).
    """
    check_choice("rewards", kind, BENCH_REWARDS)
    if kind == "uniform+outlier":
        r = torch.rand(shape, generator=generator, dtype=torch.float32)
        r[:, 0] = 10.0
        return r
    r = (torch.rand(shape, generator=generator, dtype=torch.float32) < 0.3).to(torch.float32)
    if kind == "0/1+jitter":
        r += 1e-4 * torch.randn(shape, generator=generator, dtype=torch.float32)
    return r


#: The most rewards in one timed shape: 2**27 float32 values are 512 MiB, and an estimator holds several copies.
MAX_BENCH_REWARDS = 2**27


def run_benchmark(
    shapes: Sequence[tuple[int, int]] = DEFAULT_SHAPES,
    repeats: int = 7,
    seed: int = 0,
    progress: bool = True,
    rewards: Sequence[str] = BENCH_REWARDS,
    threads: Sequence[int] | None = None,
) -> list[BenchRow]:
    """Time every estimator, the idiomatic grpo and the numpy+scipy robust.

    For every shape and kind of rewards (:func:`bench_rewards`), each repeat
    runs every case once, in turn, at each torch thread count of ``threads``
    (default: 1 and the current count), after one warm-up round. A row's
    time is the median over repeats and its ratio the median of the
    per-repeat ratios to ``grpo (idiomatic)`` at the same thread count in the
    same round, so a spell of load on a shared machine slows a whole round,
    not one row. The thread count is restored afterwards.
    """
    from tqdm.auto import tqdm

    check_int("repeats", repeats, minimum=1)
    if not shapes:
        raise ValueError("shapes is empty; pass at least one (groups, G) shape, e.g. (65536, 16)")
    for shape in shapes:
        check_int_list("shape", list(shape), minimum=1)
        if len(shape) != 2:
            raise ValueError(f"a shape is (groups, G), got {shape!r}")
        if shape[0] * shape[1] > MAX_BENCH_REWARDS:
            raise ValueError(f"shape {shape[0]}x{shape[1]} holds {shape[0] * shape[1]:,} rewards; the bench times at most "
                             f"{MAX_BENCH_REWARDS:,} per shape (each estimator makes several copies); pass a smaller shape")
    kinds = [check_choice("rewards", kind, BENCH_REWARDS) for kind in rewards]
    if not kinds:
        raise ValueError(f"rewards is empty; pass one or more of {list(BENCH_REWARDS)}")
    initial = torch.get_num_threads()
    counts = list(dict.fromkeys(check_int_list("threads", list(threads), minimum=1) if threads is not None else [1, initial]))
    gen = torch.Generator().manual_seed(seed)
    labels = ("grpo (idiomatic)", *ESTIMATORS, "robust (numpy+scipy)")
    rows: list[BenchRow] = []
    bar = tqdm(total=len(shapes) * len(kinds) * (repeats + 1), desc="bench", disable=not progress, leave=False)
    try:
        for shape in shapes:
            for kind in kinds:
                r = bench_rewards(kind, tuple(shape), gen)
                r_np = r.numpy().copy()
                calls: dict[str, Callable[[], object]] = {
                    "grpo (idiomatic)": lambda: grpo_idiomatic(r),
                    "robust (numpy+scipy)": lambda: robust_numpy_scipy(r_np),
                    **{label: (lambda label=label: compute_advantages(r, label)) for label in ESTIMATORS},
                }
                times = {(label, k): [] for label in labels for k in counts}
                for round_ in range(repeats + 1):  # round 0 warms up
                    for k in counts:
                        torch.set_num_threads(k)
                        for label in labels:
                            t0 = time.perf_counter()
                            calls[label]()
                            if round_:
                                times[(label, k)].append(time.perf_counter() - t0)
                    bar.update()
                for k in counts:
                    base = np.asarray(times[("grpo (idiomatic)", k)])
                    for label in labels:
                        t = np.asarray(times[(label, k)])
                        rows.append(BenchRow(label, tuple(shape), kind, k, 1e3 * float(np.median(t)),
                                             float(np.median(t / base))))
    finally:
        torch.set_num_threads(initial)
        bar.close()
    return rows


def _load_average() -> tuple[float, ...] | None:
    """The machine's load averages over 1, 5 and 15 minutes (None where unknown)."""
    try:
        import os

        return os.getloadavg()
    except (AttributeError, OSError):  # pragma: no cover - not on every platform
        return None


def _load_text(load: tuple[float, ...] | None) -> str:
    """Load averages as the tables print them ("n/a" where unknown)."""
    return "n/a" if load is None else ", ".join(f"{v:.2f}" for v in load)


def format_table(rows: Sequence[BenchRow]) -> str:
    """Render the rows as a table (one column pair per thread count), plus the targets and whether they are met."""
    counts = list(dict.fromkeys(r.threads for r in rows))
    by = {(r.label, r.shape, r.rewards, r.threads): r for r in rows}
    lines = [f"torch {torch.__version__}, float32 CPU, torch threads {' and '.join(map(str, counts))} side by side; "
             f"load average {_load_text(_load_average())}", ""]
    lines.append(f"{'estimator':<22}{'shape':>12}  {'rewards':<16}"
                 + "".join(f"{f'ms @{k}':>10}{f'x @{k}':>8}" for k in counts))
    for label, shape, kind in dict.fromkeys((r.label, r.shape, r.rewards) for r in rows):
        cells = "".join(f"{by[(label, shape, kind, k)].ms:>10.2f}{by[(label, shape, kind, k)].ratio:>8.2f}"
                        for k in counts if (label, shape, kind, k) in by)
        lines.append(f"{label:<22}{f'{shape[0]}x{shape[1]}':>12}  {kind:<16}{cells}")
    lines.append("")
    for r in rows:
        limit = ESTIMATOR_TARGETS.get((r.label, r.shape[1]))
        if limit is not None:
            verdict = "met" if r.ratio <= limit else "NOT met"
            lines.append(f"target {r.label} <= {limit:g}x grpo at G={r.shape[1]} ({r.shape[0]}x{r.shape[1]}, {r.rewards}, "
                         f"{r.threads} thread{'s' if r.threads > 1 else ''}): {r.ratio:.2f}x, {verdict}")
    for r in rows:
        if r.label == "robust" and ("robust (numpy+scipy)", r.shape, r.rewards, r.threads) in by:
            speedup = by[("robust (numpy+scipy)", r.shape, r.rewards, r.threads)].ms / r.ms
            verdict = "met" if speedup >= 3 else "NOT met"
            lines.append(f"target robust >= 3x faster than numpy+scipy at {r.shape[0]}x{r.shape[1]} ({r.rewards}, "
                         f"{r.threads} thread{'s' if r.threads > 1 else ''}): {speedup:.1f}x, {verdict}")
    return "\n".join(lines)


# ------------------------------------------------------------------ dashboard

#: Latency target of a slider move at G = 256 with 10^4 groups (median, two cores).
DASHBOARD_TARGET_MS = 150.0
#: Target of notebook 03's full heat-map sweep.
SWEEP_TARGET_S = 10.0


@dataclass(frozen=True)
class DashboardBenchRow:
    """One timed control: what moved, how, and over ``n`` moves the median and worst milliseconds to the first
    view drawn (``first_ms``, ``first_max_ms``: a preview, or the full data when no preview is made) and to the
    full data drawn (``ms``, ``max_ms``)."""

    control: str
    case: str
    ms: float
    max_ms: float
    n: int
    first_ms: float
    first_max_ms: float


@dataclass(frozen=True)
class DashboardBench:
    """Result of :func:`run_dashboard_benchmark`."""

    rows: tuple[DashboardBenchRow, ...]
    G: int
    n_groups: int
    methods: tuple[str, ...]
    build_s: float
    sweep_s: float | None
    sweep_cells: int
    threads: int
    load: tuple[float, float, float] | None
    notes: tuple[str, ...] = ()


def _timed_moves(
    dash, control, values: Sequence[object], before: Callable[[object], None] | None = None
) -> list[tuple[float, float]]:
    """For each value, milliseconds of ``control.value = v`` to the first view drawn and to the full data drawn.

    The callback runs synchronously (no event loop here), so the full data follows a preview within the
    call; the first view's time is the dashboard's own ``timing`` of that update.
    """
    times = []
    for v in values:
        if before is not None:
            before(v)
        t0 = time.perf_counter()
        control.value = v
        complete = 1e3 * (time.perf_counter() - t0)
        times.append((1e3 * dash.timing.get("first_view_s", complete / 1e3), complete))
    return times


_Timed = list[tuple[str, str, list[tuple[float, float]]]]  # (control, case, first-view and full-data ms per move)


def _slider_moves(dash, repeats: int) -> _Timed:
    """c, rate and outlier size to values not shown before, and other groups shown."""
    ctl = dash.controls
    base_c = float(ctl["c"].value)
    c_values = [round(1.0 + (base_c - 1.0 + 0.3 * (i + 1)) % 4.0, 1) for i in range(repeats)]
    rate0 = float(ctl["rate"].value)
    rates = [round(0.01 + (rate0 + 0.01 * i) % 0.49, 2) for i in range(1, repeats + 1)]  # stay on the slider
    size0 = math.log10(float(ctl["size"].value))
    sizes = [10 ** round((size0 + 0.1 * i) % 4.0, 1) for i in range(1, repeats + 1)]
    groups = [(i + 1) % dash.engine.n_groups for i in range(repeats)]
    return [
        ("c", "new c values (re-clip cached advantages)", _timed_moves(dash, ctl["c"], c_values)),
        ("rate", "new rates (every estimator reruns)", _timed_moves(dash, ctl["rate"], rates)),
        ("size", "new outlier sizes (every estimator reruns)", _timed_moves(dash, ctl["size"], sizes)),
        ("group", "another group shown", _timed_moves(dash, ctl["group"], groups)),
    ]


def _estimator_moves(dash, chosen: tuple[str, ...], repeats: int, notes: list[str]) -> _Timed:
    """Adding an estimator not shown before (up to ``repeats`` of them), and removing it again; a note per estimator."""
    added = [m for m in ESTIMATORS if m not in chosen][:repeats]
    if not added:
        return []
    add_times, remove_times = [], []
    for m in added:
        add_times.append(_timed_moves(dash, dash.controls["methods"], [chosen + (m,)])[0])
        remove_times.append(_timed_moves(dash, dash.controls["methods"], [chosen])[0])
    notes.append("estimator adds (first view / full data): "
                 + ", ".join(f"{m} {first:.0f} / {full:.0f} ms" for m, (first, full) in zip(added, add_times)))
    return [("estimators", f"add one not shown before ({len(added)} estimators)", add_times),
            ("estimators", "remove one", remove_times)]


def _group_size_moves(dash, G: int, repeats: int) -> _Timed:
    """From the next smaller G to ``G``: with the caches cleared before each move, and back to a pair seen before."""
    from .dashboards.sweep import GROUP_SIZES

    ctl = dash.controls["G"]
    other = GROUP_SIZES[GROUP_SIZES.index(G) - 1] if GROUP_SIZES.index(G) else GROUP_SIZES[1]

    def fresh_start(_value: object) -> None:
        ctl.value = other
        dash.engine.clear()

    return [("G", f"{other} -> {G}, first visit (caches cleared)", _timed_moves(dash, ctl, [G] * repeats, fresh_start)),
            ("G", f"{other} -> {G}, revisit", _timed_moves(dash, ctl, [G] * repeats, lambda _v: setattr(ctl, "value", other)))]


def _clean_model_moves(dash, G: int, repeats: int) -> _Timed:
    """From the starting clean model to each other one in turn: caches cleared, after idle time, and revisits."""
    ctl, engine = dash.controls["clean_model"], dash.engine
    start = ctl.value
    models = [key for _label, key in ctl.options if key != start]

    def moves(before: Callable[[], None]) -> list[tuple[float, float]]:
        times = []
        for i in range(repeats):
            ctl.value = start
            before()
            times += _timed_moves(dash, ctl, [models[i % len(models)]])
        return times

    def idle_time() -> None:  # what the kernel's idle time does after the previous move: the draws, no estimator
        engine.clear()
        for key in models:
            engine.prefetch(G, key)

    cold = moves(engine.clear)
    after_idle = moves(idle_time)
    for target in models:  # every model once, untimed: the revisits below all hit the cache
        ctl.value = target
    return [("clean_model", "another model, first visit (caches cleared)", cold),
            ("clean_model", "another model, first visit after idle time", after_idle),
            ("clean_model", "another model, revisit", moves(lambda: None))]


def run_dashboard_benchmark(
    G: int = 256,
    n_groups: int = 10_000,
    repeats: int = 7,
    methods: Sequence[str] | None = None,
    *,
    sweep: bool = True,
    progress: bool = True,
    preview_rewards: int | None = None,
) -> DashboardBench:
    """Time the dashboard's slider moves and notebook 03's heat-map sweep.

    Builds :func:`robustgrpo.widgets.dashboard` at group size ``G`` with
    ``n_groups`` groups and moves each control ``repeats`` times to values it
    has not had (so nothing comes from a cache unless the row says so),
    timing ``control.value = v``: the same ``observe`` callback a browser
    move triggers, i.e. the data function, the in-place update of the plotly
    ``FigureWidget``'s traces and the readout. Each row has two times: to the
    first view drawn (a preview on
    :data:`~robustgrpo.dashboards.sweep.PREVIEW_REWARDS` rewards where the
    dashboard makes one) and to the full data drawn. Moves into a new (G, clean
    model) pair draw 2.56 million new rewards and run every estimator twice;
    they are timed separately ("first visit", caches cleared) from returns to
    a pair seen before ("revisit"). A clean model's first visit is also timed
    after the kernel's idle time has drawn the other models' rewards
    (:meth:`~robustgrpo.dashboards.sweep.DashboardEngine.prefetch`), as it does
    in a notebook after every move.

    With ``sweep=True`` it also times :func:`robustgrpo.report.sweeps.heatmap_sweep`
    (uncached). ``preview_rewards`` sets the dashboard's preview size (default its own).
    """
    from tqdm.auto import tqdm

    from .dashboards.sweep import DEFAULT_METHODS, GROUP_SIZES, PREVIEW_REWARDS
    from .widgets import dashboard

    if G not in GROUP_SIZES:
        raise ValueError(f"G must be one of the dashboard's group sizes {GROUP_SIZES}, got {G!r}")
    check_int("repeats", repeats, minimum=1)
    chosen = tuple(DEFAULT_METHODS if methods is None else methods)
    t0 = time.perf_counter()
    dash = dashboard(n_groups=n_groups, G=G, methods=chosen,
                     preview_rewards=PREVIEW_REWARDS if preview_rewards is None else preview_rewards)
    build_s = time.perf_counter() - t0
    rows: list[DashboardBenchRow] = []
    notes: list[str] = []
    timings = (
        lambda: _slider_moves(dash, repeats),
        lambda: _estimator_moves(dash, chosen, repeats, notes),
        lambda: _group_size_moves(dash, G, repeats),
        lambda: _clean_model_moves(dash, G, repeats),
    )
    bar = tqdm(total=len(timings) + int(sweep), desc="dashboard bench", disable=not progress, leave=False)
    for timing in timings:
        for control, case, times in timing():
            first, full = np.array(times).T
            rows.append(DashboardBenchRow(control, case, float(np.median(full)), float(np.max(full)), len(times),
                                          float(np.median(first)), float(np.max(first))))
        bar.update()
    sweep_s, cells = None, 0
    if sweep:
        from .report.sweeps import heatmap_sweep

        t0 = time.perf_counter()
        table = heatmap_sweep()
        sweep_s = time.perf_counter() - t0
        cells = len(table)
        bar.update()
    bar.close()
    load = _load_average()
    return DashboardBench(tuple(rows), G, n_groups, chosen, build_s, sweep_s, cells, torch.get_num_threads(), load,
                          tuple(notes))


def format_dashboard_table(result: DashboardBench) -> str:
    """Render :func:`run_dashboard_benchmark`'s result as a table with the targets and verdicts."""
    from .dashboards.sweep import PREVIEW_REWARDS

    load = _load_text(result.load)
    lines = [
        f"dashboard: G = {result.G}, {result.n_groups:,} groups ({result.G * result.n_groups:,} rewards), "
        f"estimators {', '.join(result.methods)}",
        f"torch {torch.__version__}, {result.threads} thread(s); load average {load}; dashboard built in {result.build_s:.2f} s",
        "time from control.value = v (data function + in-place FigureWidget update + readout) to the first view drawn",
        f"(a preview on {PREVIEW_REWARDS:,} rewards when the setting is new and larger; the target applies to it) "
        "and to the full data drawn",
        "",
        f"{'control':<13}{'case':<46}{'moves':>6}{'first view ms':>14}{'max':>8}{'full data ms':>14}{'max':>8}"
        "   target (first view)",
    ]
    for r in result.rows:
        verdict = "met" if r.first_ms < DASHBOARD_TARGET_MS else "NOT met"
        lines.append(f"{r.control:<13}{r.case[:45]:<46}{r.n:>6}{r.first_ms:>14.1f}{r.first_max_ms:>8.1f}{r.ms:>14.1f}"
                     f"{r.max_ms:>8.1f}   < {DASHBOARD_TARGET_MS:g} ms: {verdict}")
    lines += result.notes
    if result.sweep_s is not None:
        verdict = "met" if result.sweep_s < SWEEP_TARGET_S else "NOT met"
        lines += ["", f"notebook 03 heat-map sweep ({result.sweep_cells} cells): {result.sweep_s:.2f} s   "
                      f"< {SWEEP_TARGET_S:g} s: {verdict}"]
    return "\n".join(lines)


# ------------------------------------------------------------------ lessons

#: Target of every move of a lesson's controls (data function + widget update), in milliseconds.
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

    from .dashboards import distributions as lesson04
    from .dashboards import playground as lesson02
    from .dashboards.trap import ESTIMATOR_CHOICES, trap_data
    from .widgets import distributions_dashboard, playground_dashboard, trap_dashboard

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
    load = _load_average()
    return LessonBench(tuple(rows), torch.get_num_threads(), load)


def format_lessons_table(result: LessonBench) -> str:
    """Render :func:`run_lessons_benchmark`'s result with the target and verdicts."""
    load = _load_text(result.load)
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
SIMULATE_TARGET_S = 20.0
#: Target of one rerun of the notebook 05 dashboard after a slider move.
RERUN_TARGET_S = 2.0


@dataclass(frozen=True)
class SimulateBenchRow:
    """One timed case: what ran, with how many torch threads, seconds, and the target."""

    case: str
    threads: int
    seconds: float
    target_s: float


def run_simulate_benchmark(
    threads: Sequence[int] = (1, 2),
    estimators: Sequence[str] = ("grpo", "robust"),
    *,
    n_prompts: int = 256,
    G: int = 16,
    steps: int = 500,
    n_seeds: int = 8,
    moves: int = 5,
    progress: bool = True,
) -> list[SimulateBenchRow]:
    """Time :func:`robustgrpo.simulate.simulate` and the notebook 05 dashboard's rerun.

    Each estimator runs alone on the case (every step recorded), once per thread count in
    ``threads`` (``simulate(..., threads=n)``). The dashboard rows time
    :meth:`robustgrpo.dashboards.drift.DriftEngine.data` for ``moves`` new contamination rates (a
    rate-slider move: one new run, the clean reference cached) and one new G (two new runs).
    """
    from tqdm.auto import tqdm

    from .dashboards.drift import DEFAULT_STATE, GROUP_SIZES, DriftEngine
    from .simulate import SimConfig, simulate

    check_int("moves", moves, minimum=1)
    rows: list[SimulateBenchRow] = []
    bar = tqdm(total=len(threads) * len(estimators) + 1, desc="simulate bench", disable=not progress, leave=False)
    for n in threads:  # interleaved per estimator would be fairer on a busy machine; runs are long enough
        for est in estimators:
            config = SimConfig(n_prompts=n_prompts, G=G, steps=steps, estimators=(est,))
            simulate(config.replace(steps=2), range(n_seeds), progress=False, threads=n)  # warm-up
            t0 = time.perf_counter()
            simulate(config, range(n_seeds), progress=False, threads=n)
            rows.append(SimulateBenchRow(f"{est}: {n_prompts} prompts x G={G} x {steps} steps x {n_seeds} seeds",
                                         n, time.perf_counter() - t0, SIMULATE_TARGET_S))
            bar.update()
    engine = DriftEngine()
    engine.data()  # the opening state, both runs
    rate0 = float(DEFAULT_STATE["rate"])
    times = []
    for i in range(1, moves + 1):
        t0 = time.perf_counter()
        engine.data(rate=round(rate0 + 0.01 * i, 2))
        times.append(time.perf_counter() - t0)
    rows.append(SimulateBenchRow(f"dashboard: new rate ({moves} moves, median)", 1, float(np.median(times)), RERUN_TARGET_S))
    other = next(g for g in GROUP_SIZES if g != DEFAULT_STATE["G"])
    t0 = time.perf_counter()
    engine.data(G=other)
    rows.append(SimulateBenchRow(f"dashboard: new G = {other} (two runs)", 1, time.perf_counter() - t0, RERUN_TARGET_S))
    bar.update()
    bar.close()
    return rows


def format_simulate_table(rows: Sequence[SimulateBenchRow]) -> str:
    """Render :func:`run_simulate_benchmark`'s rows with their targets and verdicts."""
    load = _load_text(_load_average())
    lines = [f"torch {torch.__version__}; load average {load}", "",
             f"{'case':<58}{'threads':>8}{'seconds':>10}   target"]
    for r in rows:
        verdict = "met" if r.seconds < r.target_s else "NOT met"
        lines.append(f"{r.case:<58}{r.threads:>8}{r.seconds:>10.2f}   < {r.target_s:g} s: {verdict}")
    return "\n".join(lines)


# ------------------------------------------------------------------ the evidence battery

#: Targets of ``bench --battery``: the full battery in a few minutes, the notebook-sized one in under a minute.
BATTERY_TARGETS_S = {"full": 300.0, "quick": 60.0}


def run_battery_benchmark(*, full: bool = True, threads: int = 1, progress: bool = True) -> list[SimulateBenchRow]:
    """Time :func:`robustgrpo.metrics.battery.run_battery` at its quick and (``full``) its full settings.

    One row per setting, at ``threads`` torch threads, with cells (family x G) per second in the
    case's name; printed by :func:`format_simulate_table` with the load average.
    """
    from .metrics.battery import FULL, QUICK, run_battery
    from .simulate.runner import torch_threads

    rows = []
    with torch_threads(threads):
        for name, settings in (("quick", QUICK), ("full", FULL)) if full else (("quick", QUICK),):
            t0 = time.perf_counter()
            table = run_battery(**settings, progress=progress)
            seconds = time.perf_counter() - t0
            cells = table.groupby(["family", "G"]).ngroups
            rows.append(SimulateBenchRow(f"battery {name}: {cells} cells x {settings['n_seeds']} seeds "
                                         f"({cells / seconds:.2f} cells/s)", threads, seconds, BATTERY_TARGETS_S[name]))
    return rows


# ------------------------------------------------------------------ sweeps


def _noop_resolve(config: dict) -> dict:
    if config:
        raise ValueError(f"the empty cell takes no parameters, got {sorted(config)}")
    return {}


def _noop_run(config: dict, seed: int) -> pd.DataFrame:
    return pd.DataFrame({"value": [float(seed)]})


def _noop_runnable():
    from .sweep import Runnable
    from .sweep.runnables import flat_columns

    return Runnable("empty", "a cell that computes nothing: what remains is the engine's own cost",
                    resolve=_noop_resolve, run=_noop_run, columns=flat_columns)


#: The simulation cell of ``bench --sweep``: one tabular training run (32 prompts, G = 8, 50 steps, grpo).
SWEEP_BENCH_SIM = {"n_prompts": 32, "G": 8, "steps": 50, "estimators": ["grpo"],
                   "contamination": {"model": "random_outliers", "rate": 0.05, "size": 10.0}}


@dataclass(frozen=True)
class SweepBenchRow:
    """One timed run: the cell kind, how it ran, cells, seconds, the direct run it does the work of, and
    on how many CPUs it ran in parallel."""

    case: str
    how: str
    cells: int
    seconds: float
    baseline: str | None = None
    parallel: int = 1

    @property
    def ms_per_cell(self) -> float:
        return 1e3 * self.seconds / self.cells

    @property
    def cells_per_s(self) -> float:
        return self.cells / self.seconds


@dataclass(frozen=True)
class SweepBench:
    """:func:`run_sweep_benchmark`'s rows, the machine, and Ray's start-up costs (None without Ray)."""

    rows: tuple[SweepBenchRow, ...]
    threads: int
    cpus: int
    ray_version: str | None
    ray_start_s: float | None
    ray_warmup_s: float | None
    notes: tuple[str, ...]


def run_sweep_benchmark(
    n_empty: int = 200,
    n_sim: int = 32,
    *,
    engines: Sequence[str] = ("local", "ray"),
    ray_cpus: int | None = None,
    progress: bool = True,
) -> SweepBench:
    """Time the sweep engines on this machine: per-cell overhead and cells per second.

    Two kinds of cell, each timed on every engine in one run, side by side:

    * ``empty``: a runnable that returns a one-row table and computes nothing, ``n_empty``
      cells. Its time per cell is the engine's own overhead: bookkeeping, the atomic Parquet
      write of the cell (flushed to disk) and, on Ray, the task round trip.
    * ``simulation``: :data:`SWEEP_BENCH_SIM` (one tabular training run per cell) over
      ``n_sim`` seeds, run directly (one :func:`~robustgrpo.simulate.simulate` call per seed,
      and one call for all seeds), then as a sweep on the local engine (seeds batched by 16,
      and one cell per call) and on Ray (one task per cell, one CPU each).

    Ray's start (a local instance with ``ray_cpus`` CPUs, default all) and its first tasks
    (worker processes importing torch) are timed apart and left out of the rows. When Ray is
    already initialized in this process, that connection is used. Each record goes to a
    temporary folder.
    """
    import os
    import tempfile

    from tqdm.auto import tqdm

    from .simulate import SimConfig, simulate
    from .sweep import LocalEngine, RayEngine, load_sweep, run_sweep

    for name in engines:
        if name not in ("local", "ray"):
            raise ValueError(f"engines must be among ('local', 'ray'), got {name!r}")
    n_empty = int(n_empty)
    n_sim = int(n_sim)
    if n_empty < 1 or n_sim < 1:
        raise ValueError(f"n_empty and n_sim must be >= 1, got {n_empty} and {n_sim}")
    runnables = {"empty": _noop_runnable()}
    empty = load_sweep({"runnable": "empty", "seeds": n_empty}, runnables=runnables)
    sim = load_sweep({"runnable": "simulate", "fixed": SWEEP_BENCH_SIM, "seeds": n_sim})
    config = SimConfig.from_dict(SWEEP_BENCH_SIM)
    rows: list[SweepBenchRow] = []
    notes: list[str] = []
    bar = tqdm(total=7 + 2 * ("ray" in engines), desc="sweep bench", disable=not progress, leave=False)

    def timed(case: str, how: str, cells: int, fn: Callable[[], object], baseline: str | None = None,
              parallel: int = 1) -> None:
        t0 = time.perf_counter()
        fn()
        rows.append(SweepBenchRow(case, how, cells, time.perf_counter() - t0, baseline, parallel))
        bar.update()

    call, one, every = "direct: call the runnable", "direct: simulate, one call per seed", "direct: simulate, all seeds in one call"

    with tempfile.TemporaryDirectory() as tmp:
        folder = iter(os.path.join(tmp, str(i)) for i in range(100))
        simulate(config.replace(steps=2), [0], progress=False)  # warm-up: imports and caches
        run_sweep(load_sweep({"runnable": "empty", "seeds": 2}, runnables=runnables), next(folder), progress=False)
        timed("empty", call, n_empty, lambda: [_noop_run({}, s) for s in range(n_empty)])
        timed("simulation", one, n_sim, lambda: [simulate(config, [s], progress=False) for s in range(n_sim)])
        timed("simulation", every, n_sim, lambda: simulate(config, list(range(n_sim)), progress=False))
        if "local" in engines:
            timed("empty", "local engine", n_empty, lambda: run_sweep(empty, next(folder), LocalEngine(), progress=False), call)
            timed("simulation", "local engine, seeds batched by 16", n_sim,
                  lambda: run_sweep(sim, next(folder), LocalEngine(batch_size=16), progress=False), every)
            timed("simulation", "local engine, one cell per call", n_sim,
                  lambda: run_sweep(sim, next(folder), LocalEngine(batch_size=1), progress=False), one)
        else:
            bar.update(3)
        ray_version = ray_start = ray_warmup = None
        if "ray" in engines:
            try:
                import ray
            except ImportError:
                notes.append("ray: not installed (pip install -c constraints.txt -e '.[sweep]')")
                bar.update(2)
            else:
                ray_version = ray.__version__
                engine = RayEngine(num_cpus=ray_cpus)
                t0 = time.perf_counter()
                with engine.connected():
                    ray_start = time.perf_counter() - t0
                    cpus = int(ray.cluster_resources().get("CPU", 1))
                    t0 = time.perf_counter()  # first tasks: every worker starts and imports torch
                    warm = load_sweep({"runnable": "simulate", "fixed": {**SWEEP_BENCH_SIM, "steps": 2}, "seeds": 2 * cpus})
                    run_sweep(warm, next(folder), engine, progress=False)
                    ray_warmup = time.perf_counter() - t0
                    timed("empty", f"ray engine ({cpus} CPUs)", n_empty,
                          lambda: run_sweep(empty, next(folder), engine, progress=False), call)
                    timed("simulation", f"ray engine ({cpus} CPUs, 1 per cell)", n_sim,
                          lambda: run_sweep(sim, next(folder), engine, progress=False), one, min(cpus, n_sim))
    bar.close()
    return SweepBench(tuple(rows), torch.get_num_threads(), os.cpu_count() or 1, ray_version, ray_start, ray_warmup,
                      tuple(notes))


def format_sweep_table(result: SweepBench) -> str:
    """Render :func:`run_sweep_benchmark`'s result: ms and cells per second per row, the overhead
    of each engine over the direct calls, and what bounds the Ray engine on this machine."""
    load = _load_text(_load_average())
    direct = {r.how: r for r in result.rows if r.baseline is None}
    lines = [f"torch {torch.__version__}, {result.threads} thread(s) in this process, {result.cpus} CPU(s); "
             f"load average {load}; Ray {result.ray_version or 'not run'}",
             "cells: empty = a runnable that computes nothing (what remains is the engine's cost); "
             f"simulation = {SWEEP_BENCH_SIM['n_prompts']} prompts x G={SWEEP_BENCH_SIM['G']} x "
             f"{SWEEP_BENCH_SIM['steps']} steps, tabular, one seed per cell",
             "overhead = ms per cell - ms per cell of the direct run it does the work of (batched: all seeds in one "
             "call; else one call per seed, divided by the CPUs the cells run on in parallel); it includes the atomic "
             "Parquet write of every cell", "",
             f"{'cells':<11}{'how':<44}{'n':>5}{'ms/cell':>10}{'cells/s':>10}{'overhead ms':>13}"]
    for r in result.rows:
        base = direct.get(r.baseline) if r.baseline else None
        overhead = "" if base is None else f"{r.ms_per_cell - base.ms_per_cell / r.parallel:>13.1f}"
        lines.append(f"{r.case:<11}{r.how[:43]:<44}{r.cells:>5}{r.ms_per_cell:>10.2f}{r.cells_per_s:>10.1f}{overhead}")
    if result.ray_start_s is not None:
        lines.append(f"\nRay: local instance started in {result.ray_start_s:.1f} s, first tasks (workers start, import torch) "
                     f"{result.ray_warmup_s:.1f} s; both left out of the rows")
    local_empty = next((r for r in result.rows if r.case == "empty" and r.how == "local engine"), None)
    if local_empty is not None:
        lines.append(f"the driver writes every cell: at {local_empty.ms_per_cell:.2f} ms per cell it takes at most "
                     f"{local_empty.cells_per_s:.0f} cells/s, whatever the cluster's size")
    lines += list(result.notes)
    return "\n".join(lines)


# ------------------------------------------------------------------ trainer

#: Most of a real trainer step the adapter's advantage block may take.
TRAINER_TARGET_SHARE = 0.05
#: Estimators of the trainer case: the whole catalogue.
TRAINER_BENCH_ESTIMATORS = tuple(ESTIMATORS)


@dataclass(frozen=True)
class TrainerBenchRow:
    """One estimator inside TRL's trainer: steps per second, the median step and advantage block, their ratio."""

    estimator: str
    steps: int
    steps_per_second: float
    step_ms: float
    advantage_ms: float
    share: float


@dataclass(frozen=True)
class TrainerBench:
    """The trainer benchmark: a row per estimator, the torch threads and the run's setting."""

    rows: tuple[TrainerBenchRow, ...]
    threads: int
    setting: str


def run_trainer_benchmark(
    estimators: Sequence[str] = TRAINER_BENCH_ESTIMATORS,
    *,
    steps: int = 40,
    warmup: int = 5,
    rounds: int = 2,
    threads: int = 1,
    progress: bool = True,
) -> TrainerBench:
    """Time real trainer steps per estimator: the ``trl`` runnable (TRL's GRPOTrainer, the experiment's tiny model).

    Each round runs every estimator once, interleaved, for ``warmup + steps`` steps on the
    experiment's default setting (16 prompts x G = 8, no contamination, no exact probe), with
    ``threads`` torch threads as a sweep cell has (:func:`robustgrpo.sweep.run_cell`). Per
    estimator, over the measured steps of every round: ``steps_per_second`` = 1 / the median
    wall-clock step (generation, judge, advantages, loss, backward, optimizer), and ``share``
    = the median over steps of the adapter's advantage block
    (``robustgrpo/advantage_seconds``: the estimator, TRL's grpo for the sign comparison, the
    diagnostics) divided by that step's time. Target: ``share`` under
    :data:`TRAINER_TARGET_SHARE`. Needs the ``integrations`` extra.
    """
    from tqdm.auto import tqdm

    from .sweep import RUNNABLES, run_cell

    check_int("steps", steps, minimum=1)
    check_int("warmup", warmup, minimum=0)
    check_int("rounds", rounds, minimum=1)
    check_int("threads", threads, minimum=1)
    runnable = RUNNABLES["trl"]
    frames: dict[str, list] = {est: [] for est in estimators}
    configs = {est: runnable.resolve({"estimator": est, "steps": warmup + steps, "eval_prompts": 0}) for est in estimators}
    bar = tqdm(total=rounds * len(estimators), desc="trainer bench", disable=not progress, leave=False)
    for _ in range(rounds):
        for est in estimators:
            frame = run_cell(runnable.run, configs[est], 0, threads)
            frames[est].append(frame[frame["step"] >= warmup])
            bar.update()
    bar.close()
    rows = []
    for est, parts in frames.items():
        steps_s = np.concatenate([p["step_seconds"].to_numpy() for p in parts])
        adv_s = np.concatenate([p["advantage_seconds"].to_numpy() for p in parts])
        step = float(np.median(steps_s))
        rows.append(TrainerBenchRow(est, len(steps_s), 1.0 / step, 1e3 * step, 1e3 * float(np.median(adv_s)),
                                    float(np.median(adv_s / steps_s))))
    first = configs[estimators[0]]
    setting = (f"{first['prompts_per_step']} prompts x G={first['G']} one-token completions per step, "
               f"{first['hidden_size']}-wide {first['layers']}-layer model; {steps} steps x {rounds} rounds after {warmup} warm-up")
    return TrainerBench(tuple(rows), threads, setting)


def format_trainer_table(result: TrainerBench) -> str:
    """Render :func:`run_trainer_benchmark`: steps per second and the advantage block's share of a step per estimator."""
    lines = [f"torch {torch.__version__}, {result.threads} torch thread(s); {result.setting}", "",
             f"{'estimator':<12}{'steps/s':>9}{'step ms':>9}{'advantage ms':>14}{'share':>8}   target"]
    for r in result.rows:
        verdict = "met" if r.share < TRAINER_TARGET_SHARE else "NOT met"
        lines.append(f"{r.estimator:<12}{r.steps_per_second:>9.1f}{r.step_ms:>9.1f}{r.advantage_ms:>14.2f}"
                     f"{100 * r.share:>7.1f}%   < {100 * TRAINER_TARGET_SHARE:g} %: {verdict}")
    return "\n".join(lines)
