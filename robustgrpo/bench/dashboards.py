"""Notebook 03's sweep dashboard: each control's first view and full data, and the heat-map sweep.

Part of :mod:`robustgrpo.bench` (its docstring says what each benchmark measures and its target).
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np
import torch

from robustgrpo.advantages import ESTIMATORS
from robustgrpo.checks import check_int
from robustgrpo.bench._common import load_average, load_text

__all__ = [
    "DASHBOARD_TARGET_MS",
    "SWEEP_TARGET_S",
    "DashboardBenchRow",
    "DashboardBench",
    "MessageCount",
    "counting_messages",
    "run_dashboard_benchmark",
    "format_dashboard_table",
]


DASHBOARD_TARGET_MS = 150.0
#: Target of notebook 03's full heat-map sweep.
SWEEP_TARGET_S = 10.0


@dataclass
class MessageCount:
    """What the widgets handed to the kernel under :func:`counting_messages`: messages, bytes, seconds of JSON."""

    messages: int = 0
    bytes: int = 0
    seconds: float = 0.0


@contextmanager
def counting_messages() -> Iterator[MessageCount]:
    """Count the widget messages sent inside the block, and serialise each as the kernel would.

    Outside a kernel a widget's comm drops its messages (``comm.DummyComm``); here each one is packed
    with ``jupyter_client``'s JSON packer, the kernel session's, and its bytes (binary buffers
    included) and the packing time are added up: the serialisation share of a move.
    """
    import comm
    from jupyter_client.session import json_packer

    count = MessageCount()
    original = comm.DummyComm.publish_msg

    def publish(self, msg_type, data=None, metadata=None, buffers=None, **keys):  # noqa: ANN001 - comm's signature
        start = time.perf_counter()
        packed = json_packer({"msg_type": msg_type, "content": {"comm_id": self.comm_id, "data": data}, "metadata": metadata or {}})
        count.seconds += time.perf_counter() - start
        count.bytes += len(packed) + sum(memoryview(b).nbytes for b in buffers or ())
        count.messages += 1

    comm.DummyComm.publish_msg = publish
    try:
        yield count
    finally:
        comm.DummyComm.publish_msg = original


@dataclass(frozen=True)
class DashboardBenchRow:
    """One timed control: what moved, how, and over ``n`` moves the median and worst milliseconds to the first
    view drawn (``first_ms``, ``first_max_ms``: a preview, or the full data when no preview is made) and to the
    full data drawn (``ms``, ``max_ms``); and the median split of a move (preview and full data together): the
    data function (``compute_ms``), the drawing in Python (``draw_ms``: the views' and the readout's update,
    serialisation excluded), the JSON serialisation of the messages (``serialise_ms``) and their size (``kb``)."""

    control: str
    case: str
    ms: float
    max_ms: float
    n: int
    first_ms: float
    first_max_ms: float
    compute_ms: float = math.nan
    draw_ms: float = math.nan
    serialise_ms: float = math.nan
    kb: float = math.nan


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


_Move = tuple[float, float, float, float, float, float]  # ms to the first view, to the full data; compute, draw, JSON ms; kB


def _timed_moves(
    dash, control, values: Sequence[object], before: Callable[[object], None] | None = None
) -> list[_Move]:
    """For each value, milliseconds of ``control.value = v`` to the first view drawn and to the full data drawn,
    and its split (:class:`DashboardBenchRow`).

    The callback runs synchronously (no event loop here), so the full data follows a preview within the
    call; the first view's time and the split come from the dashboard's own ``timing`` of that update.
    """
    times = []
    for v in values:
        if before is not None:
            before(v)
        with counting_messages() as sent:
            t0 = time.perf_counter()
            control.value = v
            complete = 1e3 * (time.perf_counter() - t0)
        timing = dash.timing
        times.append((1e3 * timing.get("first_view_s", complete / 1e3), complete, 1e3 * timing.get("compute_s", math.nan),
                      1e3 * (timing.get("draw_s", math.nan) - sent.seconds), 1e3 * sent.seconds, sent.bytes / 1e3))
    return times


_Timed = list[tuple[str, str, list[_Move]]]  # (control, case, each move's times)


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
                 + ", ".join(f"{m} {move[0]:.0f} / {move[1]:.0f} ms" for m, move in zip(added, add_times)))
    return [("estimators", f"add one not shown before ({len(added)} estimators)", add_times),
            ("estimators", "remove one", remove_times)]


def _group_size_moves(dash, G: int, repeats: int) -> _Timed:
    """From the next smaller G to ``G``: with the caches cleared before each move, and back to a pair seen before."""
    from robustgrpo.book.sweep_g_and_c.engine import GROUP_SIZES

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

    def moves(before: Callable[[], None]) -> list[_Move]:
        times = []
        for i in range(repeats):
            ctl.value = start
            before()
            times += _timed_moves(dash, ctl, [models[i % len(models)]])
        return times

    def idle_time() -> None:  # what the kernel's idle time does after the previous move, every step of it
        engine.clear()
        for step in dash._idle_steps():
            step()

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

    Builds :func:`robustgrpo.book.dashboards.dashboard` at group size ``G`` with
    ``n_groups`` groups and moves each control ``repeats`` times to values it
    has not had (so nothing comes from a cache unless the row says so),
    timing ``control.value = v``: the same ``observe`` callback a browser
    move triggers, i.e. the data function, the in-place update of the plotly
    ``FigureWidget``'s traces and the readout. Each row has two times: to the
    first view drawn (a preview on
    :data:`~robustgrpo.book.sweep_g_and_c.engine.PREVIEW_REWARDS` rewards where the
    dashboard makes one) and to the full data drawn. Moves into a new (G, clean
    model) pair draw 2.56 million new rewards and run every estimator twice;
    they are timed separately ("first visit", caches cleared) from returns to
    a pair seen before ("revisit"). A clean model's first visit is also timed
    after the kernel's idle time has drawn the other models' rewards and run the
    estimators shown on them (every step of the widget's idle work,
    :meth:`~robustgrpo.book.sweep_g_and_c.engine.DashboardEngine.prefetch`), as it does
    in a notebook after every move.

    With ``sweep=True`` it also times :func:`robustgrpo.book.sweep_g_and_c.report.heatmap_sweep`
    (uncached). ``preview_rewards`` sets the dashboard's preview size (default its own).
    """
    from tqdm.auto import tqdm

    from robustgrpo.book.sweep_g_and_c.engine import DEFAULT_METHODS, GROUP_SIZES, PREVIEW_REWARDS
    from robustgrpo.book.dashboards import dashboard

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
            first, full, compute, draw, serialise, kb = np.array(times).T
            rows.append(DashboardBenchRow(control, case, float(np.median(full)), float(np.max(full)), len(times),
                                          float(np.median(first)), float(np.max(first)), float(np.median(compute)),
                                          float(np.median(draw)), float(np.median(serialise)), float(np.median(kb))))
        bar.update()
    sweep_s, cells = None, 0
    if sweep:
        from robustgrpo.book.sweep_g_and_c.report import heatmap_sweep

        t0 = time.perf_counter()
        table = heatmap_sweep()
        sweep_s = time.perf_counter() - t0
        cells = len(table)
        bar.update()
    bar.close()
    load = load_average()
    return DashboardBench(tuple(rows), G, n_groups, chosen, build_s, sweep_s, cells, torch.get_num_threads(), load,
                          tuple(notes))


def format_dashboard_table(result: DashboardBench) -> str:
    """Render :func:`run_dashboard_benchmark`'s result as a table with the targets and verdicts."""
    from robustgrpo.book.sweep_g_and_c.engine import PREVIEW_REWARDS

    load = load_text(result.load)
    lines = [
        f"dashboard: G = {result.G}, {result.n_groups:,} groups ({result.G * result.n_groups:,} rewards), "
        f"estimators {', '.join(result.methods)}",
        f"torch {torch.__version__}, {result.threads} thread(s); load average {load}; dashboard built in {result.build_s:.2f} s",
        "time from control.value = v (data function + in-place FigureWidget update + readout) to the first view drawn",
        f"(a preview on {PREVIEW_REWARDS:,} rewards when the setting is new and larger; the target applies to it) "
        "and to the full data drawn.",
        "Then where a move's time goes (medians; preview and full data together): the data",
        "function, the drawing in Python (views and readout), the JSON serialisation of the widget messages, and their",
        "size. The front end's share (plotly.js drawing in the page) is measured where the user sits, by the grid",
        "page's browser test (it writes grid_latency.md)",
        "",
        f"{'control':<13}{'case':<46}{'moves':>6}{'first view ms':>14}{'max':>8}{'full data ms':>14}{'max':>8}"
        f"{'compute':>9}{'draw':>7}{'JSON':>7}{'kB':>8}   target (first view)",
    ]
    for r in result.rows:
        verdict = "met" if r.first_ms < DASHBOARD_TARGET_MS else "NOT met"
        lines.append(f"{r.control:<13}{r.case[:45]:<46}{r.n:>6}{r.first_ms:>14.1f}{r.first_max_ms:>8.1f}{r.ms:>14.1f}"
                     f"{r.max_ms:>8.1f}{r.compute_ms:>9.1f}{r.draw_ms:>7.1f}{r.serialise_ms:>7.1f}{r.kb:>8.1f}"
                     f"   < {DASHBOARD_TARGET_MS:g} ms: {verdict}")
    lines += result.notes
    if result.sweep_s is not None:
        verdict = "met" if result.sweep_s < SWEEP_TARGET_S else "NOT met"
        lines += ["", f"notebook 03 heat-map sweep ({result.sweep_cells} cells): {result.sweep_s:.2f} s   "
                      f"< {SWEEP_TARGET_S:g} s: {verdict}"]
    return "\n".join(lines)


# ------------------------------------------------------------------ lessons

#: Target of every move of a lesson's controls (data function + widget update), in milliseconds.
