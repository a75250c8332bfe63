"""The dashboard: its data function, its caches, the linked plotly views, the widgets, the benchmark.

The widgets themselves are exercised headless here (setting a control's value runs the same
``observe`` callback a browser move does) and in a real browser in ``test_browser.py``. No
wall-clock limits: the speed targets live in ``python -m robustgrpo bench --dashboard``.
"""

from __future__ import annotations

import html
import io
import math
import re
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from robustgrpo.advantages import ESTIMATORS, GroupState, compute_advantages
from robustgrpo.bench import (
    DashboardBench,
    format_dashboard_table,
    run_dashboard_benchmark,
)
from robustgrpo.cli import build_parser
from robustgrpo.lab.contamination import Bernoulli, Gaussian
from robustgrpo.book.sweep_g_and_c.engine import (
    CLEAN_MODEL_CHOICES,
    PREVIEW_REWARDS,
    CLIP_RANGE,
    CONTROLS,
    DEFAULT_METHODS,
    GROUP_SIZES,
    RATE_RANGE,
    SIZE_LOG10_RANGE,
    DashboardData,
    DashboardEngine,
    dashboard_data,
)
from robustgrpo.lab.metrics import agreement_from_advantages, agreement_grid, update_cosine
from robustgrpo.book.interactive import trace_by_meta
from robustgrpo.book.sweep_g_and_c.views import EMPTY_BIN, MAX_REWARD_MARKERS, plot_linked_views, update_linked_views
from robustgrpo.book.sweep_g_and_c.plots import plot_clip_schedule, plot_heatmaps
from robustgrpo.book.dashboards import dashboard, readout_html
from robustgrpo.book.widget import COMPLETE_AFTER_S

N_GROUPS = 300
CLIPPED = [m for m in ESTIMATORS if ESTIMATORS[m].clip]


@pytest.fixture(scope="module")
def engine() -> DashboardEngine:
    return DashboardEngine(N_GROUPS, seed=3)


def _reference(rewards: torch.Tensor, method: str, c: float):
    params = {ESTIMATORS[method].clip: c} if ESTIMATORS[method].clip else {}
    return compute_advantages(rewards, method, **params)


# ------------------------------------------------------------------ data function


@pytest.mark.parametrize("method", list(ESTIMATORS))
@pytest.mark.parametrize("clean_model", ["bernoulli", "gaussian"])
def test_advantages_are_those_of_compute_advantages_at_every_c(engine, method, clean_model):
    """The engine clips cached unclipped advantages; the result is bit for bit compute_advantages'."""
    for G, c in ((5, 1.0), (8, 2.5), (8, 4.7), (16, 3.3)):
        clean, rewards, _ = engine.rewards(G, 0.1, 10.0, clean_model)
        for on_clean, r in ((False, rewards), (True, clean)):
            ref = _reference(r, method, c)
            got = engine.advantages(G, c, 0.1, 10.0, clean_model, method, clean=on_clean)
            assert torch.equal(got, ref.advantages), (method, G, c, on_clean)
        data = engine.data(G, c, 0.1, 10.0, clean_model, [method], group=7)
        ref = _reference(rewards, method, c)
        np.testing.assert_array_equal(data.group_advantages[method], ref.advantages[7].numpy())
        np.testing.assert_array_equal(data.group_clean_advantages[method], _reference(clean, method, c).advantages[7].numpy())
        d = ref.diagnostics
        assert data.fallback_rate[method] == int(d.in_state(GroupState.FALLBACK).sum()) / N_GROUPS
        assert data.clipped_fraction[method] == int(d.n_clipped.sum()) / (N_GROUPS * G)


def test_rewards_are_random_outliers_on_the_clean_rewards(engine):
    clean, rewards, hit = engine.rewards(8, 0.2, 50.0, "gaussian")
    assert rewards.dtype == torch.float32 and rewards.shape == (N_GROUPS, 8)
    assert torch.equal(rewards[~hit], clean[~hit])
    assert bool((rewards[hit] == 50.0).all())
    assert 0.15 < float(hit.double().mean()) < 0.25
    # nested hits: a higher rate hits a superset of the samples
    _, _, more = engine.rewards(8, 0.4, 50.0, "gaussian")
    assert bool((more | ~hit).all())


def test_readout_numbers_follow_the_metrics_definitions(engine):
    G, c, rate, size = 8, 2.0, 0.1, 10.0
    methods = ("grpo", "seed_mad", "robust", "rank", "huber_m")
    data = engine.data(G, c, rate, size, "bernoulli", methods)
    clean, rewards, hit = engine.rewards(G, rate, size, "bernoulli")
    for m in methods:
        a_clean = _reference(clean, m, c).advantages
        a = _reference(rewards, m, c).advantages
        ref = agreement_from_advantages(a_clean, a, ~hit, clean)
        assert data.sign_agreement[m] == ref["sign_agreement"], m
        assert data.silenced[m] == ref["silenced"], m
        assert data.update_cosine[m] == pytest.approx(ref["update_cosine"], rel=1e-6), m
        assert data.relative_error[m] == pytest.approx(ref["relative_error"], rel=1e-6, abs=1e-9), m
        unbiased = compute_advantages(clean, "rloo").advantages
        assert data.reference_cosine[m] == pytest.approx(update_cosine(unbiased, a), rel=1e-6), m
        assert data.contaminated_mean_advantage[m] == pytest.approx(float(a[hit].double().mean()), rel=1e-6), m
    assert data.contaminated_fraction == float(hit.double().mean())
    assert data.hit_group_fraction == float(hit.any(-1).double().mean())
    summary = data.summary()
    assert list(summary["method"]) == list(methods)
    assert summary.set_index("method").loc["robust", "sign_agreement"] == data.sign_agreement["robust"]


def test_float64_engine_equals_metrics_agreement_grid_exactly():
    methods = ["grpo", "seed_mad", "robust", "huber_m", "rank", "winsor"]
    clips = [1.0, 2.5, 4.0]
    theirs = agreement_grid(methods, group_sizes=[3, 8], clip=clips, rates=[0.1], sizes=[10.0], clean=Bernoulli(0.3),
                   n_groups=400, seed=5, progress=False)
    engine = DashboardEngine(400, 5, dtype=torch.float64)
    rows = [{"G": g, "method": m, "c": c if ESTIMATORS[m].clip else math.nan,
             **engine.metrics(g, c, 0.1, 10.0, Bernoulli(0.3), m)}
            for g in (3, 8) for m in methods for c in (clips if ESTIMATORS[m].clip else clips[:1])]
    ours = pd.DataFrame(rows)
    key = ["G", "method", "c"]
    ours = ours.sort_values(key).reset_index(drop=True)
    theirs = theirs.sort_values(key).reset_index(drop=True)
    pd.testing.assert_frame_equal(ours[key], theirs[key])
    for col in ("update_cosine", "relative_error", "reference_cosine", "sign_agreement", "flipped", "silenced", "silent_clean", "woken",
                "fallback_rate", "fallback_rate_clean", "clipped_fraction", "clipped_fraction_clean",
                "contaminated_fraction", "hit_group_fraction"):
        np.testing.assert_array_equal(ours[col].to_numpy(), theirs[col].to_numpy(), err_msg=col)


def test_the_dashboard_default_clean_model_is_the_heat_maps_data():
    """dashboard_data at a heat-map cell gives that cell's numbers (float32 vs float64: to rounding)."""
    from robustgrpo.book.sweep_g_and_c import report as R

    assert CLEAN_MODEL_CHOICES["bernoulli"].model == Bernoulli(R.HEATMAP_P)
    G = 4
    d = dashboard_data(G=G, c=2.5, rate=R.HEATMAP_RATE, size=R.HEATMAP_SIZE, methods=["grpo", "robust"],
                       n_groups=R.N_GROUPS, seed=R.SEED)
    ref = R.heatmap_data()
    ref = ref[ref["G"] == G]
    ref = ref[ref["c"].isna() | (ref["c"] == 2.5)]
    for m in ("grpo", "robust"):
        row = ref[ref["method"] == m].iloc[0]
        assert d.fallback_rate[m] == row["fallback_rate"]
        assert d.sign_agreement[m] == pytest.approx(row["sign_agreement"], abs=1e-4)
        assert d.update_cosine[m] == pytest.approx(row["update_cosine"], rel=1e-5)
        assert d.relative_error[m] == pytest.approx(row["relative_error"], rel=1e-4)


def _assert_same_data(a: DashboardData, b: DashboardData) -> None:
    for name in DashboardData.__dataclass_fields__:
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, y, err_msg=name)
        elif isinstance(x, dict):
            assert list(x) == list(y), name
            for k in x:
                if isinstance(x[k], np.ndarray):
                    np.testing.assert_array_equal(x[k], y[k], err_msg=f"{name}[{k}]")
                else:
                    assert x[k] == y[k] or (math.isnan(x[k]) and math.isnan(y[k])), (name, k)
        else:
            assert x == y, name


# ------------------------------------------------------------------ preview


@pytest.mark.parametrize("clean_model", ["bernoulli", "gaussian"])
def test_a_preview_is_the_data_of_the_first_groups_with_the_full_setting(clean_model):
    full = DashboardEngine(120, seed=4)
    # the same seeds: a model drawn in one stream of 16-value blocks gives it the first 20 groups of the full draw
    # (a model with two draws, such as SkewNormal, does not: the next test checks the preview's rows directly)
    alone = DashboardEngine(20, seed=4)
    setting = dict(G=16, c=2.2, rate=0.1, size=30.0, clean_model=clean_model, methods=("grpo", "robust", "rank", "huber_m"))
    preview = full.preview_data(20, **setting, group=5)
    expected = replace(alone.data(**setting, group=5), n_groups=120, computed_groups=20)
    _assert_same_data(preview, expected)
    assert preview.is_preview and not full.data(**setting).is_preview and preview.counts_contaminated["grpo"].sum() \
        + preview.counts_uncontaminated["grpo"].sum() == 20 * 16
    assert preview.state() == full.data(**setting, group=5).state()  # its call recomputes the full setting
    assert "computed_groups" in preview.readout_frame() and preview.readout_frame()["computed_groups"][0] == 20
    _assert_same_data(full.preview_data(120, **setting, group=5), full.data(**setting, group=5))


def test_a_preview_shows_a_group_beyond_its_groups_exactly_as_the_full_data_does():
    full = DashboardEngine(120, seed=4)
    setting = dict(G=8, c=2.5, rate=0.2, size=10.0, clean_model="skew_normal", methods=("grpo", "seed_mad", "rank"))
    preview, data = full.preview_data(10, **setting, group=97), full.data(**setting, group=97)
    assert preview.group == 97 and preview.computed_groups == 10
    for name in ("group_rewards", "group_clean_rewards", "group_contaminated"):
        np.testing.assert_array_equal(getattr(preview, name), getattr(data, name))
    for m in setting["methods"]:
        np.testing.assert_array_equal(preview.group_advantages[m], data.group_advantages[m])
        np.testing.assert_array_equal(preview.group_clean_advantages[m], data.group_clean_advantages[m])
    # its groups: the first nine and group 97, counted once each
    rows = torch.tensor([*range(9), 97])
    clean, rewards, hit = full.rewards(8, 0.2, 10.0, "skew_normal")
    a = compute_advantages(rewards[rows], "grpo").advantages
    assert preview.contaminated_fraction == int(hit[rows].sum()) / 80
    assert preview.update_cosine["grpo"] == pytest.approx(
        float(update_cosine(compute_advantages(clean[rows], "grpo").advantages, a)), rel=1e-6)
    with pytest.raises(ValueError, match="groups must be"):
        full.preview_data(0, **setting)


def test_cached_says_when_the_full_data_needs_no_computation():
    e = DashboardEngine(50, seed=1)
    setting = dict(G=8, rate=0.1, size=10.0, clean_model="bernoulli")
    assert not e.cached(c=2.5, methods=("grpo", "robust"), **setting)
    e.data(c=2.5, methods=("grpo", "robust"), **setting)
    assert e.cached(c=2.5, methods=("grpo", "robust"), **setting)
    assert e.cached(c=3.0, methods=("grpo",), **setting)  # grpo has no clip: every c is the same data
    assert not e.cached(c=3.0, methods=("robust",), **setting)  # robust at a new c: new histogram and clip stats
    assert not e.cached(c=2.5, methods=("rank",), **setting) and not e.cached(c=2.5, methods=("grpo",), **{**setting, "rate": 0.2})
    e.clear()
    assert not e.cached(c=2.5, methods=("grpo",), **setting)


def _previewing_dashboard(monkeypatch):
    """A dashboard of 400 groups whose new settings are first drawn from 32 groups (G = 16), and its draws."""
    dash = dashboard(n_groups=400, G=16, seed=3, preview_rewards=512)
    drawn: list[DashboardData] = []
    monkeypatch.setattr(dash, "_draw", lambda data, _f=dash._draw: drawn.append(data) or _f(data))
    return dash, drawn


def test_outside_an_event_loop_a_move_draws_the_preview_then_the_full_data(monkeypatch):
    dash, drawn = _previewing_dashboard(monkeypatch)
    dash.controls["rate"].value = 0.2
    assert [d.computed_groups for d in drawn] == [32, 400]
    assert drawn[0].is_preview and drawn[0].state() == drawn[1].state()
    _assert_same_data(dash.data, dashboard_data(**dash.data.state()))
    _assert_figure_shows(dash.figure, dash.data)
    assert "rg-preview" not in dash.readout.value and "data-state='ready'" in dash.status.value
    assert 0 < dash.timing["first_view_s"] <= dash.timing["complete_s"]
    drawn.clear()
    dash.controls["rate"].value = 0.05  # back to a setting computed before: no preview
    assert [d.computed_groups for d in drawn] == [400]
    assert dash.timing["first_view_s"] == dash.timing["complete_s"]
    drawn.clear()
    small = dashboard(n_groups=60, G=16, preview_rewards=512)  # 60 groups <= twice the preview's 32: never one
    monkeypatch.setattr(small, "_draw", lambda data, _f=small._draw: drawn.append(data) or _f(data))
    small.controls["rate"].value = 0.3
    assert [d.computed_groups for d in drawn] == [60]
    with pytest.raises(ValueError, match="preview_rewards must be"):
        dashboard(n_groups=60, preview_rewards=0)


async def _until_ready(dash, timeout: float = 60.0) -> None:
    import asyncio

    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while "data-state='ready'" not in dash.status.value and "data-state='invalid'" not in dash.status.value:
        assert loop.time() < end, "the full data never came"
        await asyncio.sleep(0.02)
    await asyncio.sleep(COMPLETE_AFTER_S + 0.1)  # anything still pending has run by now


def test_in_the_kernel_loop_the_preview_shows_at_once_and_the_full_data_follows(monkeypatch):
    import asyncio

    dash, drawn = _previewing_dashboard(monkeypatch)

    async def session():
        dash.controls["rate"].value = 0.2  # the callback returns with the preview on display
        assert [d.computed_groups for d in drawn] == [32] and dash.data.is_preview
        assert "data-state='busy'" in dash.status.value and "a preview on 32 of 400 groups" in dash.status.value
        assert "class='rg-preview' data-groups='32'" in dash.readout.value
        assert "complete_s" not in dash.timing
        _assert_figure_shows(dash.figure, dash.data)
        await _until_ready(dash)
        assert [d.computed_groups for d in drawn] == [32, 400]
        _assert_same_data(dash.data, dashboard_data(**dash.data.state()))
        assert dash.readout.value == readout_html(dash.data)

    asyncio.run(session())


def test_in_the_kernel_loop_a_burst_of_moves_computes_the_full_data_once(monkeypatch):
    import asyncio

    dash, drawn = _previewing_dashboard(monkeypatch)
    full_calls = []
    monkeypatch.setattr(dash.engine, "data", lambda *a, _f=dash.engine.data, **k: full_calls.append(k) or _f(*a, **k))

    async def session():
        dash.controls["rate"].value = 0.2
        dash.controls["size"].value = 100.0
        dash.controls["G"].value = 24
        await _until_ready(dash)

    asyncio.run(session())
    assert [d.computed_groups for d in drawn] == [32, 32, 21, 400]  # three previews (512 // 24 = 21 groups), one full
    assert len(full_calls) == 1 and (dash.data.G, dash.data.rate, dash.data.size) == (24, 0.2, 100.0)
    _assert_same_data(dash.data, dashboard_data(**dash.data.state()))


def test_in_the_kernel_loop_a_refused_move_keeps_its_message_while_the_full_data_arrives(monkeypatch):
    import asyncio

    dash, drawn = _previewing_dashboard(monkeypatch)

    async def session():
        dash.controls["rate"].value = 0.2
        dash.controls["methods"].value = ()  # refused: the pending full data of rate 0.2 still comes
        await _until_ready(dash)

    asyncio.run(session())
    assert [d.computed_groups for d in drawn] == [32, 400] and dash.data.rate == 0.2
    assert "choose at least one" in dash.message.value and "data-state='invalid'" in dash.status.value
    dash.controls["methods"].value = ("grpo",)
    assert dash.message.value == "" and "data-state='ready'" in dash.status.value


def test_in_the_kernel_loop_idle_time_draws_the_other_clean_models_until_a_move_comes(monkeypatch):
    import asyncio

    dash, _drawn = _previewing_dashboard(monkeypatch)
    others = [key for key in CLEAN_MODEL_CHOICES if key != "bernoulli"]
    methods = dash.data.methods

    def prefetched(G: int) -> bool:  # every other model's clean rewards drawn and every estimator shown run on them
        states = [dash.engine._clean.peek((G, key)) for key in others]
        return all(st is not None and set(methods) <= set(st.methods) and st.reference is not None for st in states)

    async def until_prefetched(G: int) -> None:
        loop = asyncio.get_running_loop()
        end = loop.time() + 60
        while not prefetched(G):
            assert loop.time() < end, "the idle work never finished"
            await asyncio.sleep(0.02)

    async def session():
        dash.controls["rate"].value = 0.2
        await _until_ready(dash)
        await until_prefetched(16)
        dash.engine.clear()
        dash.controls["G"].value = 8  # replaced at once: neither its full data nor its idle work runs
        dash.controls["G"].value = 24
        await _until_ready(dash)
        await until_prefetched(24)

    asyncio.run(session())
    assert prefetched(24)
    assert all(dash.engine._clean.peek((8, key)) is None for key in others)
    steps = dash._idle_steps()  # the rewards of each model first, then one estimator of one model a step
    assert len(steps) == len(others) * (1 + len(methods))
    # the draws are the ones a visit makes: the data after a prefetch equals the data without one
    e = DashboardEngine(40, seed=3)
    e.prefetch(8, "gaussian")
    _assert_same_data(e.data(G=8, clean_model="gaussian"), dashboard_data(G=8, clean_model="gaussian", n_groups=40, seed=3))
    with pytest.raises(ValueError, match="clean_model must be one of"):
        e.prefetch(8, "nope")
    e.prefetch(8, "gaussian", "robust")  # an estimator's clean advantages too: still the data a visit computes
    assert "robust" in e._clean.peek((8, "gaussian")).methods
    _assert_same_data(e.data(G=8, clean_model="gaussian"), dashboard_data(G=8, clean_model="gaussian", n_groups=40, seed=3))
    with pytest.raises(ValueError, match="nope"):
        e.prefetch(8, "gaussian", "nope")


def _interrupting(dash, monkeypatch, after: int, move) -> list[tuple[dict, int]]:
    """Count the steps each computation of ``dash`` runs ((setting, steps) per computation); after ``after`` steps of
    the first one, ``move()`` is called from the event loop, as the kernel handles a move that arrives meanwhile."""
    import asyncio

    runs: list[tuple[dict, int]] = []

    def counted(state, _f=dash._compute_steps):
        steps = _f(state)
        index = len(runs)
        runs.append((dict(state), 0))

        def wrapped():
            for _ in steps:
                runs[index] = (runs[index][0], runs[index][1] + 1)
                if index == 0 and runs[index][1] == after:
                    asyncio.get_running_loop().call_soon(move)
                yield

        return wrapped()

    monkeypatch.setattr(dash, "_compute_steps", counted)
    return runs


def test_data_steps_compute_every_piece_data_reads_and_the_same_numbers():
    e = DashboardEngine(40, seed=3)
    setting = dict(G=16, c=1.5, rate=0.2, size=100.0, clean_model="gaussian", methods=("grpo", "robust", "rank"))
    steps = e.data_steps(**setting)
    assert not e.cached(**setting)
    assert len(list(steps)) == 4 + 5 * 3  # draws, uniforms, contaminated rewards, reference; five pieces an estimator
    assert e.cached(**setting)
    _assert_same_data(e.data(**setting, group=7), dashboard_data(**setting, group=7, n_groups=40, seed=3))
    with pytest.raises(ValueError, match="G must be"):  # checked on the call, before any step
        e.data_steps(G=1)


def test_in_the_kernel_loop_a_new_setting_stops_the_computation_of_the_one_it_replaces(monkeypatch):
    """Issue 45: six quick key presses finished a left setting's 10 s before the last one started. Now the first
    setting's work stops at the first turn after the next move, its remaining pieces never computed."""
    import asyncio

    dash, drawn = _previewing_dashboard(monkeypatch)
    runs = _interrupting(dash, monkeypatch, after=5, move=lambda: setattr(dash.controls["G"], "value", 24))

    async def session():
        dash.controls["G"].value = 128  # a preview now, then its full data in steps
        await _until_ready(dash)

    asyncio.run(session())
    (first, stopped), (last, finished) = runs
    assert (first["G"], last["G"]) == (128, 24) and dash.abandoned == 1
    assert stopped == 5 and finished == 4 + 5 * len(DEFAULT_METHODS)  # the first stopped after the 5th of its 24 pieces
    left = dash.engine._contaminated.peek((128, "bernoulli", first["rate"], first["size"]))
    assert left is None or not set(DEFAULT_METHODS) <= set(left.methods)  # its estimators never all ran
    assert not dash.engine.cached(**{k: v for k, v in first.items() if k != "group"})
    assert [(d.G, d.is_preview) for d in drawn] == [(128, True), (24, True), (24, False)]  # nothing of 128's in full
    _assert_same_data(dash.data, dashboard_data(**dash.data.state()))
    assert dash.readout.value == readout_html(dash.data) and "data-state='ready'" in dash.status.value


def test_simulate_steps_is_simulate_one_step_at_a_time():
    from robustgrpo.lab.simulate import SimConfig, simulate
    from robustgrpo.lab.simulate.runner import simulate_steps

    config = SimConfig(n_prompts=4, G=4, steps=5, record_every=2, estimators=("grpo", "robust"))
    run = simulate_steps(config, (0, 3))
    for _ in range(5):
        next(run)
    with pytest.raises(StopIteration) as done:
        next(run)
    pd.testing.assert_frame_equal(done.value.value, simulate(config, (0, 3), progress=False))
    with pytest.raises(ValueError, match="seeds"):
        simulate_steps(config, (1, 1))


def test_in_the_kernel_loop_a_new_drift_setting_stops_the_trainings_of_the_one_it_replaces(monkeypatch):
    import asyncio

    import robustgrpo.book.policy_gradient_drift.engine as drift
    from robustgrpo.book.dashboards import drift_dashboard

    monkeypatch.setattr(drift, "BASE", drift.BASE.replace(n_prompts=4, steps=6))
    dash = drift_dashboard(G=4)
    drawn = []
    monkeypatch.setattr(dash, "_draw", lambda data, _f=dash._draw: drawn.append(data) or _f(data))
    runs = _interrupting(dash, monkeypatch, after=2, move=lambda: setattr(dash.controls["rate"], "value", 0.3))

    async def session():
        dash.controls["rate"].value = 0.2  # its trainings start, one step a turn
        await _until_ready(dash)

    asyncio.run(session())
    (first, stopped), (last, finished) = runs
    assert (first["rate"], last["rate"]) == (0.2, 0.3) and dash.abandoned == 1
    assert stopped == 2 and finished == 6  # the clean reference is cached: the new setting trains its 6 steps only
    assert drift.drift_config(**first) not in dash.engine._runs  # the left setting's run never finished
    assert [d.rate for d in drawn] == [0.3]
    expected = drift.DriftEngine().data(**last)
    assert dash.data.summary() == expected.summary()
    pd.testing.assert_frame_equal(dash.data.true_reward, expected.true_reward)


def test_in_the_kernel_loop_a_new_lesson_setting_stops_the_estimators_of_the_one_it_replaces(monkeypatch):
    """Notebook 04's lesson runs one estimator a step: a move after the first estimator of a setting stops it."""
    import asyncio

    import robustgrpo.book.advantage_distributions.engine as distributions
    from robustgrpo.book.dashboards import distributions_dashboard

    monkeypatch.setattr(distributions, "_VIEWS", {})  # nothing cached from elsewhere
    dash = distributions_dashboard(methods=("grpo", "robust", "rank"))
    runs = _interrupting(dash, monkeypatch, after=2, move=lambda: setattr(dash.controls["G"], "value", 32))

    async def session():
        dash.controls["G"].value = 16
        await _until_ready(dash)

    asyncio.run(session())
    (first, stopped), (last, finished) = runs
    assert (first["G"], last["G"]) == (16, 32) and dash.abandoned == 1
    assert stopped == 2 and finished == 1 + 3  # the record, then one estimator a step (the views come at the end)
    assert distributions._VIEWS[(first["scenario"], 16)] == {}  # nothing of the left setting was kept
    expected = distributions.distributions_data(**last)
    assert dash.data.state() == expected.state()
    pd.testing.assert_frame_equal(dash.data.agreement, expected.agreement)
    assert list(distributions.distributions_steps(**last)) == []  # all cached now: no step left
    with pytest.raises(ValueError, match="G must be one of"):
        distributions.distributions_steps(G=12)


@pytest.mark.slow
def test_in_a_real_kernel_a_move_returns_on_the_preview_and_the_full_data_and_idle_work_follow():
    """ipykernel runs widget callbacks and cells inside its event loop: the deferred path is the one taken there."""
    import time

    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3")

    def run(code: str) -> str:
        reply = kc.execute_interactive(code, timeout=120, output_hook=lambda m: out.append(m["content"].get("text", "")))
        assert reply["content"]["status"] == "ok", reply["content"]
        return "".join(out)

    try:
        out: list[str] = []
        first = run("from robustgrpo.book.dashboards import dashboard\n"
                    "d = dashboard(n_groups=10_000, G=16)\n"
                    "d.controls['rate'].value = 0.2\n"
                    "print(d.data.is_preview, d.data.computed_groups, 'complete_s' in d.timing)")
        assert first.split() == ["True", "2048", "False"], first
        for _ in range(600):
            out = []
            later = run("print(d.data.is_preview, d.data.rate, \"data-state='ready'\" in d.status.value, "
                        "sum(d.engine._clean.peek((16, k)) is not None for k in "
                        "('bernoulli', 'gaussian', 'skew_normal', 'format_correctness')))")
            if later.split() == ["False", "0.2", "True", "4"]:
                break
            time.sleep(0.1)
        assert later.split() == ["False", "0.2", "True", "4"], later
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_the_default_preview_fits_every_group_size_of_the_slider():
    """At the largest G the preview still holds whole groups, and at the smallest no dashboard of 10^4 groups makes one."""
    assert PREVIEW_REWARDS // GROUP_SIZES[-1] >= 64
    assert 10_000 * GROUP_SIZES[0] <= 2 * PREVIEW_REWARDS


SETTINGS = st.fixed_dictionaries(
    {
        "G": st.sampled_from([2, 5, 8]),
        "c": st.sampled_from([1.0, 2.5, 3.7]),
        "rate": st.sampled_from([0.0, 0.05, 0.5]),
        "size": st.sampled_from([1.0, 10.0, 1000.0]),
        "clean_model": st.sampled_from(["bernoulli", "gaussian", "format_correctness"]),
        "methods": st.sampled_from([("grpo", "robust"), ("robust", "seed_mad", "rank"), ("huber_m",), ("winsor", "grpo")]),
        "group": st.integers(0, 39),
    }
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(SETTINGS, min_size=2, max_size=6))
def test_cached_results_do_not_depend_on_the_order_of_slider_moves(moves):
    engine = DashboardEngine(40, seed=1, cache_size=2)
    for s in moves:
        warm = engine.data(**s)
        cold = DashboardEngine(40, seed=1).data(**s)
        _assert_same_data(warm, cold)


def test_histogram_counts_every_sample_once_with_the_documented_bins(engine):
    G, c = 16, 2.5
    data = engine.data(G, c, 0.2, 100.0, "gaussian", ["grpo", "robust", "mc_grpo"])
    _, _, hit = engine.rewards(G, 0.2, 100.0, "gaussian")
    edges = data.bin_edges
    n_bins = len(edges) - 1
    assert n_bins % 2 == 1 and edges[0] == -edges[-1]
    assert edges[n_bins // 2] < 0 < edges[n_bins // 2 + 1], "0 must be the centre of a bin"
    r = float(edges[-1])
    for m in data.methods:
        kept, hit_counts = data.counts_uncontaminated[m], data.counts_contaminated[m]
        assert kept.dtype == np.int64 and kept.shape == (n_bins,)
        assert kept.sum() + hit_counts.sum() == N_GROUPS * G
        assert hit_counts.sum() == int(hit.sum())
        a = engine.advantages(G, c, 0.2, 100.0, "gaussian", m).numpy()
        scale = np.float32(n_bins / (2 * r))
        k = np.minimum(((np.clip(a, np.float32(-r), np.float32(r)) + np.float32(r)) * scale).astype(np.int64), n_bins - 1)
        np.testing.assert_array_equal(hit_counts, np.bincount(k[hit.numpy()], minlength=n_bins))
        np.testing.assert_array_equal(kept, np.bincount(k[~hit.numpy()], minlength=n_bins))
    # mc_grpo's huge advantages land in the edge bins rather than vanish
    assert data.counts_contaminated["mc_grpo"][-1] > 0


def test_zero_rate_has_no_contaminated_samples(engine):
    data = engine.data(8, 2.5, 0.0, 10.0, "bernoulli", ["grpo", "robust"])
    assert data.contaminated_fraction == 0.0 and not data.group_contaminated.any()
    assert data.sign_agreement["grpo"] == 1.0 and data.relative_error["robust"] == 0.0
    assert math.isnan(data.contaminated_mean_advantage["grpo"])
    assert all(v.sum() == 0 for v in data.counts_contaminated.values())
    assert "n/a" in readout_html(data)


def test_rate_one_hits_every_sample_and_leaves_nothing_to_compare(engine):
    data = engine.data(4, 2.5, 1.0, 10.0, "gaussian", ["grpo"])
    assert data.contaminated_fraction == 1.0
    assert math.isnan(data.sign_agreement["grpo"])
    assert math.isnan(data.update_cosine["grpo"])  # every group is the constant M: no update to compare


def test_tiny_clip_takes_the_exact_sign_path(engine):
    data = engine.data(8, 1e-9, 0.1, 10.0, "gaussian", ["robust"])
    clean, rewards, hit = engine.rewards(8, 0.1, 10.0, "gaussian")
    ref = agreement_from_advantages(_reference(clean, "robust", 1e-9).advantages,
                                    _reference(rewards, "robust", 1e-9).advantages, ~hit, clean)
    # every advantage is clipped to |A| <= 1e-9 <= zero_tol: no sample has a sign to agree with
    assert math.isnan(data.sign_agreement["robust"]) and math.isnan(ref["sign_agreement"])
    assert data.silenced["robust"] is ref["silenced"] or math.isnan(ref["silenced"])


def test_seed_mad_falls_back_in_almost_every_binary_group():
    """The mission's point: with 0/1 rewards the MAD is 0, so the fallback runs (exact rate 1 - P(constant))."""
    d = dashboard_data(G=8, rate=0.0, methods=["seed_mad"], n_groups=2000)
    assert d.fallback_rate["seed_mad"] == pytest.approx(1 - 0.3**8 - 0.7**8, abs=0.02)


BAD = [
    ({"G": 1}, "G must be an integer"),
    ({"G": 2.5}, "G must be an integer"),
    ({"G": True}, "G must be an integer"),
    ({"c": 0.0}, "c must be"),
    ({"c": -1.0}, "c must be"),
    ({"c": float("nan")}, "c must be"),
    ({"c": "2"}, "c must be a finite number > 0, got '2'"),
    ({"rate": -0.1}, "rate must be"),
    ({"rate": 1.5}, "rate must be"),
    ({"size": 0.0}, "size must be"),
    ({"size": float("inf")}, "size must be"),
    ({"clean_model": "uniform"}, "clean_model must be one of"),
    ({"clean_model": 3}, "clean_model must be one of"),
    ({"methods": []}, "methods is empty"),
    ({"methods": ["grpo", "nope"]}, "unknown method"),
    ({"methods": ["grpo", "grpo"]}, "more than once"),
    ({"methods": 3}, "methods must be an estimator name, a sequence of names"),
    ({"group": -1}, "group must be an integer"),
    ({"group": 50}, "group must be an integer"),
    ({"n_groups": 0}, "n_groups must be an integer"),
    ({"seed": -1}, "seed must be an integer"),
]


@pytest.mark.parametrize("kwargs, message", BAD, ids=[f"{k}" for k, _ in BAD])
def test_bad_inputs_raise_value_error_naming_the_problem(kwargs, message):
    args = {"n_groups": 50, **kwargs}
    with pytest.raises(ValueError, match=message):
        dashboard_data(**args)


@pytest.mark.parametrize(
    "kwargs, message",
    [({"n_bins": 160}, "odd"), ({"dtype": torch.int64}, "dtype"), ({"hist_range": 0.0}, "hist_range"),
     ({"zero_tol": -1.0}, "zero_tol"), ({"cache_size": 0}, "cache_size")],
)
def test_engine_options_are_validated(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DashboardEngine(10, **kwargs)


# ------------------------------------------------------------------ plotly views


def test_linked_views_update_in_place(engine):
    from robustgrpo.book.sweep_g_and_c.views import _PARTS

    first = engine.data(8, 2.5, 0.1, 10.0, "bernoulli", ["grpo", "robust"], group=3)
    fig = plot_linked_views(first)
    traces = list(fig.data)
    ids = [id(t) for t in traces]
    layout_id = id(fig.layout)
    by = trace_by_meta(fig)
    assert by["adv:robust"].visible is True and by["adv:rank"].visible is False
    assert list(by["adv:clip"].y) == [2.5, 2.5, None, -2.5, -2.5]
    before = np.array(by["hist:robust:uncontaminated"].y, dtype=float)

    second = engine.data(16, 1.5, 0.2, 100.0, "gaussian", ["robust", "rank"], group=5)
    update_linked_views(fig, second)
    assert [id(t) for t in fig.data] == ids and id(fig.layout) == layout_id
    by = trace_by_meta(fig)
    assert by["adv:grpo"].visible is False and by["adv:rank"].visible is True
    assert list(by["adv:clip"].y) == [1.5, 1.5, None, -1.5, -1.5]
    assert len(by["adv:robust"].y) == 16
    order = np.argsort(second.group_rewards, kind="stable")
    np.testing.assert_allclose(by["adv:robust"].y, second.group_advantages["robust"][order])
    n_hit = int(second.group_contaminated.sum())
    assert len(by["group:contaminated"].y) == n_hit and len(by["group:clean"].y) == 16 - n_hit
    after = np.array(by["hist:robust:uncontaminated"].y, dtype=float)
    assert not np.array_equal(before, after)
    counts = second.counts_uncontaminated["robust"]
    np.testing.assert_array_equal(by["hist:robust:uncontaminated"].customdata, counts)
    np.testing.assert_array_equal(after, np.maximum(counts, EMPTY_BIN))
    np.testing.assert_array_equal(by["hist:rank:contaminated"].customdata, second.counts_contaminated["rank"])
    assert "group 5" in fig.layout.annotations[0].text
    assert fig.layout.shapes[1].x0 == 1.5
    # at rate 0 the contaminated panel is empty: its note shows, its count ticks do not
    hit_axis = f"yaxis{_PARTS['contaminated'][1]}"
    assert fig.layout[hit_axis].showticklabels is True
    update_linked_views(fig, engine.data(16, 1.5, 0.0, 100.0, "gaussian", ["robust", "rank"], group=5))
    assert fig.layout[hit_axis].showticklabels is False and fig.layout[f"yaxis{_PARTS['uncontaminated'][1]}"].showticklabels


def test_linked_views_need_traces_for_every_shown_estimator(engine):
    data = engine.data(8, 2.5, 0.1, 10.0, "bernoulli", ["grpo", "robust"])
    with pytest.raises(ValueError, match="no traces"):
        plot_linked_views(data, methods=["grpo"])
    fig = plot_linked_views(engine.data(8, 2.5, 0.1, 10.0, "bernoulli", ["grpo"]), methods=["grpo"])
    with pytest.raises(ValueError, match="no traces"):
        update_linked_views(fig, data)


# ------------------------------------------------------------------ widgets


@pytest.fixture()
def dash():
    return dashboard(n_groups=200, G=8)


def test_dashboard_builds_every_control_in_its_documented_range(dash):
    c = dash.controls
    assert set(c) == {"G", "c", "rate", "size", "clean_model", "methods", "group"} == set(CONTROLS)
    assert tuple(c["G"].options) == GROUP_SIZES and GROUP_SIZES[0] == 2 and GROUP_SIZES[-1] == 256
    assert (c["c"].min, c["c"].max) == CLIP_RANGE == (1.0, 5.0)
    assert (c["rate"].min, c["rate"].max) == RATE_RANGE == (0.0, 0.5)
    assert c["size"].base == 10 and (c["size"].min, c["size"].max) == SIZE_LOG10_RANGE
    for name in ("c", "rate", "size"):  # the slider writes its value as the readout does
        assert c[name].readout_format == CONTROLS[name].d3_format and c[name].step == CONTROLS[name].step
    assert [key for _label, key in c["clean_model"].options] == list(CLEAN_MODEL_CHOICES)
    assert list(c["methods"].options) == list(ESTIMATORS) and tuple(c["methods"].value) == DEFAULT_METHODS
    assert c["group"].value == 0 and not hasattr(c["group"], "max")  # no box that clamps silently
    for name in ("G", "rate", "size"):
        assert c[name].continuous_update is False, name
    for name, widget in c.items():  # every control has its help as a tooltip and as a line beneath it
        assert widget.tooltip == CONTROLS[name].help, name
        assert f"data-control='{name}'" in _html_of(dash.widget)
    side, main = dash.widget.children
    assert dash.figure in main.children and dash.readout in main.children
    buttons = side.children[-5].children
    assert dash.status in side.children and buttons == (dash.reset_button, dash.export_button, dash.save_button)
    assert side.children[-1] is dash.about and "about this dashboard" in dash.about.value
    assert dash.figure._config["toImageButtonOptions"] == {"filename": "robustgrpo_grid", "scale": 2}
    assert "rg-readout" in dash.readout.value and "data-state='ready'" in dash.status.value


def test_every_dashboard_says_what_it_shows_and_saves_its_figure_under_its_own_name():
    from robustgrpo.book import dashboards
    from robustgrpo.book.widget import HOW_TO, DashboardWidget, about_html

    classes = [dashboards.Dashboard, dashboards.DriftDashboard, dashboards.TrapDashboard, dashboards.PlaygroundDashboard,
               dashboards.DistributionsDashboard]
    assert {c for c in vars(dashboards).values() if isinstance(c, type) and issubclass(c, DashboardWidget)} == set(classes)
    names = [c.FIGURE_NAME for c in classes]
    assert len(set(names)) == len(names) and all(re.fullmatch(r"robustgrpo_[a-z]+", n) for n in names)
    for c in classes:
        assert 100 < len(c.ABOUT) < 500 and c.ABOUT.endswith("."), c.__name__
        box = about_html(c.ABOUT)
        assert box.startswith("<details class='rg-about'") and html.escape(c.ABOUT) in box
        assert box.count("<li>") == len(HOW_TO)


def test_every_control_of_every_dashboard_is_named_by_its_label_and_described_by_its_help():
    """What a screen reader reads for a control: its ``description`` (ipywidgets links it to a dropdown or a list; the
    page's watcher gives it to a slider's handle, see ``_WATCHER_ESM`` and the lesson's browser test) and its help."""
    import ipywidgets as W

    from robustgrpo.book import dashboards
    from robustgrpo.book.widget import _WATCHER_ESM

    built = [dashboards.dashboard(n_groups=20, G=8), dashboards.drift_dashboard(), dashboards.trap_dashboard(),
             dashboards.playground_dashboard(), dashboards.distributions_dashboard()]
    for dash in built:
        labels = [dash.specs[name].label for name in dash.controls]
        assert len(set(labels)) == len(labels), labels
        for name, control in dash.controls.items():
            assert control.description == dash.specs[name].label, name
            assert control.tooltip == dash.specs[name].help, name
            assert f"data-control='{name}'" in _html_of(dash.widget) and html.escape(dash.specs[name].help) in _html_of(dash.widget)
    sliders = sum(isinstance(c, (W.FloatSlider, W.FloatLogSlider, W.IntSlider, W.SelectionSlider))
                  for dash in built for c in dash.controls.values())
    assert sliders == 18
    assert 'handle.setAttribute("aria-label", label.textContent.trim())' in _WATCHER_ESM


def test_only_the_trap_lesson_keeps_its_figure_beside_narrowed_controls_below_the_usual_width():
    """The CSS each dashboard's page gets: the main column wraps above the controls below 832 px (300 + 12 + 520),
    the trap lesson's only below 682 px (250 + 12 + 420), its controls narrowed to 250 px under 832 px."""
    from robustgrpo.book import dashboards

    trap, grid = dashboards.trap_dashboard(), dashboards.dashboard(n_groups=20, G=8)
    trap_main, grid_main = trap.widget.children[1], grid.widget.children[1]
    assert (trap_main.layout.min_width, grid_main.layout.min_width) == ("420px", "520px")
    assert "@container (max-width: 681px) { .rg-dashboard .rg-main { order: -1; } }" in trap._theme.value
    assert "@container (max-width: 831px) { .rg-dashboard .rg-side { flex-basis: 250px !important;" in trap._theme.value
    assert "@container (max-width: 831px) { .rg-dashboard .rg-main { order: -1; } }" in grid._theme.value
    assert ".rg-side {" not in grid._theme.value and "rg-side" in trap.widget.children[0]._dom_classes


def _html_of(widget) -> str:
    """The text of every HTML widget inside ``widget``."""
    import ipywidgets as W

    if isinstance(widget, W.HTML):
        return widget.value
    return "".join(_html_of(child) for child in getattr(widget, "children", ()))


def test_moving_a_slider_updates_the_same_figure_and_the_readout(dash):
    fig, traces = dash.figure, list(dash.figure.data)
    dash.controls["c"].value = 3.1
    assert dash.figure is fig and list(dash.figure.data) == traces
    expected = dash.engine.data(8, 3.1, 0.05, 10.0, "bernoulli", DEFAULT_METHODS)
    assert dash.data.c == 3.1
    cell = f"data-method='robust' data-key='clipped_fraction'>{expected.clipped_fraction['robust']:.4f}<"
    assert cell in dash.readout.value
    assert '<span data-key="c">3.1</span>' in dash.readout.value
    assert list(trace_by_meta(fig)["adv:clip"].y)[0] == 3.1
    dash.controls["rate"].value = 0.2
    assert dash.data.rate == 0.2 and f"{dash.data.contaminated_fraction * 100:.1f}</span> %" in dash.readout.value
    dash.controls["clean_model"].value = "gaussian"
    dash.controls["G"].value = 16
    assert len(trace_by_meta(fig)["adv:robust"].y) == 16
    dash.controls["methods"].value = ("rank",)
    assert trace_by_meta(fig)["adv:rank"].visible is True and trace_by_meta(fig)["adv:robust"].visible is False
    assert "data-state='ready'" in dash.status.value


@pytest.mark.parametrize("control, value", [("c", 3.1), ("rate", 0.2), ("G", 16), ("methods", ("rank", "grpo"))])
def test_a_move_sends_the_figure_as_one_message_then_the_readout(dash, control, value):
    """One plotly_update carries the traces, the layout and the drawing's tag (the page redraws once); the readout's
    new value goes after it, so the numbers never change a redraw ahead of the figure they describe."""
    sent = []  # (widget, state key) of every message with a value, in order

    def spy_on(name, widget):
        original = widget.send_state

        def send_state(key=None):
            keys = [key] if isinstance(key, str) else list(key) if key is not None else list(widget.keys)
            sent.extend((name, k) for k in keys if getattr(widget, k) is not None)
            return original(key)

        widget.send_state = send_state

    spy_on("figure", dash.figure)
    spy_on("readout", dash.readout)
    before = dash.figure._last_layout_edit_id
    dash.controls[control].value = value
    plotly_messages = [k for who, k in sent if who == "figure" and k.startswith("_py2js_")]
    assert plotly_messages == ["_py2js_update"], sent
    assert dash.figure._last_layout_edit_id == before + 1  # (plotly numbers each message it sends)
    assert sent.index(("readout", "value")) > sent.index(("figure", "_py2js_update")), sent
    assert dash.figure.layout.meta == dash._watcher.setting and dash.figure.layout.meta.endswith("full data")
    by = trace_by_meta(dash.figure)
    assert len(by["group:clean"].y) + len(by["group:contaminated"].y) == dash.data.G
    order = np.argsort(dash.data.group_rewards, kind="stable")
    for method in dash.data.methods:  # (the restyled values arrived with the batch)
        np.testing.assert_allclose(by[f"adv:{method}"].y, np.asarray(dash.data.group_advantages[method])[order])


def test_slider_values_with_float_noise_are_read_as_the_grid_point_the_slider_shows(dash):
    dash.controls["rate"].value = 0.1 + 0.01  # 0.11000000000000001, as the browser's step arithmetic sends it
    dash.controls["size"].value = 10 ** 1.2999999999999998
    assert dash.data.rate == 0.11 and dash.data.size == 10**1.3
    assert '<span data-key="size">19.95</span>' in dash.readout.value  # the slider's d3 ".4r" writes 19.95 too
    assert "rate=0.11," in dash.data.call()


def test_an_empty_estimator_choice_shows_a_message_and_keeps_the_views(dash):
    shown, readout = dash.data, dash.readout.value
    dash.controls["methods"].value = ()
    assert "choose at least one in the estimators list" in dash.message.value and "methods" not in dash.message.value
    assert "data-state='invalid'" in dash.status.value
    assert dash.data is shown and dash.readout.value == readout
    dash.controls["methods"].value = ("grpo",)
    assert dash.message.value == "" and dash.data.methods == ("grpo",)


@pytest.mark.parametrize("bad", [200, 99999, -5])
def test_a_group_index_out_of_range_is_refused_not_clamped(dash, bad):
    dash.controls["group"].value = 7
    dash.controls["group"].value = bad
    assert f"got {bad}" in dash.message.value and "from 0 to 199" in dash.message.value
    assert dash.controls["group"].value == 7 == dash.data.group  # the box shows the group on display


def test_reset_returns_to_the_initial_setting_with_one_update(dash, monkeypatch):
    start = dash.data.state()
    dash.controls["G"].value = 16
    dash.controls["c"].value = 4.0
    dash.controls["methods"].value = ("rank",)
    dash.controls["group"].value = 5
    calls = []
    monkeypatch.setattr(dash.engine, "data", lambda *a, _f=dash.engine.data, **k: calls.append(k) or _f(*a, **k))
    dash.reset_button.click()
    assert len(calls) == 1 and dash.data.state() == start
    assert dash.state() == {k: v for k, v in start.items() if k not in ("n_groups", "seed")}


def test_export_shows_the_call_and_the_csv_of_the_setting_on_display(dash):
    import base64
    import html
    import re

    dash.controls["rate"].value = 0.12
    dash.export_button.click()
    text = dash.export.value
    call = html.unescape(re.search(r"<pre class='rg-export-call'[^>]*>(.*?)</pre>", text, re.S).group(1))
    namespace: dict = {}
    exec(call.replace("dashboard_data(", "data = dashboard_data(", 1), namespace)
    _assert_same_data(namespace["data"], dash.data)
    payload = re.search(r"base64,([A-Za-z0-9+/=]+)'", text).group(1)
    csv = pd.read_csv(io.StringIO(base64.b64decode(payload).decode()))
    pd.testing.assert_frame_equal(csv, dash.data.readout_frame(), check_dtype=False)
    dash.controls["c"].value = 3.0  # the export box follows later moves
    assert "c=3.0," in html.unescape(dash.export.value)
    # the call keeps its lines whole (it scrolls sideways) and the CSV link looks like a link
    assert re.search(r"<pre class='rg-export-call' style='[^']*white-space:pre;overflow-x:auto", text)
    assert re.search(r"<a class='rg-export-csv' style='text-decoration:underline'", text)
    assert "a.rg-export-csv { color: #1565c0; }" in dash._theme.value  # a link's colour, in either theme


def test_every_coloured_text_reads_in_the_light_and_the_dark_theme():
    """Each colour of the dashboards' text keeps WCAG AA contrast (4.5:1) on its theme's background, and the style
    every dashboard carries gives the dark one where the page says the theme is dark."""
    from robustgrpo.book.widget import TEXT_COLOURS, contrast_ratio, theme_style

    assert contrast_ratio("#777777", "#ffffff") == pytest.approx(4.48, abs=0.01)  # WCAG's own example of a fail
    for selector, (light, dark) in TEXT_COLOURS.items():
        assert contrast_ratio(light, "#ffffff") >= 4.5, (selector, light)
        assert contrast_ratio(dark, "#111111") >= 4.5, (selector, dark)
        first = selector.split(",")[0].strip()
        assert f"body[data-jp-theme-light='false'] .rg-dashboard {first}" in theme_style()
    assert {".rg-help", ".rg-error", "a.rg-export-csv"} <= {s.strip() for sel in TEXT_COLOURS for s in sel.split(",")}


def _css_filter(colour: str, css: str) -> tuple[float, float, float]:
    """``colour`` through a CSS filter of ``invert(a) hue-rotate(Ndeg)`` with the matrices of the Filter Effects spec."""
    (amount, degrees), = re.findall(r"^invert\(([\d.]+)\) hue-rotate\((\d+)deg\)$", css)
    a, angle = float(amount), math.radians(float(degrees))
    c, s = math.cos(angle), math.sin(angle)
    rotate = np.array([[0.213 + 0.787 * c - 0.213 * s, 0.715 - 0.715 * c - 0.715 * s, 0.072 - 0.072 * c + 0.928 * s],
                       [0.213 - 0.213 * c + 0.143 * s, 0.715 + 0.285 * c + 0.140 * s, 0.072 - 0.072 * c - 0.283 * s],
                       [0.213 - 0.213 * c - 0.787 * s, 0.715 - 0.715 * c + 0.715 * s, 0.072 + 0.928 * c + 0.072 * s]])
    rgb = np.array([int(colour.lstrip("#")[i:i + 2], 16) / 255 for i in (0, 2, 4)])
    return tuple(np.clip(rotate @ (a * (1 - rgb) + (1 - a) * rgb), 0, 1))


def test_the_dark_figure_filter_darkens_the_background_and_keeps_every_estimator_colour_s_hue():
    """What DARK_FIGURE_FILTER's comment says: plotly's white turns dark, and each chromatic estimator colour keeps its
    hue (within 5 degrees); greys and black have no hue to keep."""
    import colorsys

    from robustgrpo.book.style import estimator_color
    from robustgrpo.book.widget import DARK_FIGURE_FILTER, contrast_ratio

    background = "#%02x%02x%02x" % tuple(round(255 * v) for v in _css_filter("#ffffff", DARK_FIGURE_FILTER))
    assert contrast_ratio(background, "#000000") < 1.5  # near black
    chromatic = 0
    for m in ESTIMATORS:
        hue, _, saturation = colorsys.rgb_to_hls(*(int(estimator_color(m)[i:i + 2], 16) / 255 for i in (1, 3, 5)))
        if saturation < 0.2:
            continue
        chromatic += 1
        turned = colorsys.rgb_to_hls(*_css_filter(estimator_color(m), DARK_FIGURE_FILTER))[0]
        assert abs((360 * (turned - hue) + 180) % 360 - 180) < 5, m
    assert chromatic >= 8


def test_trace_data_are_plain_lists_so_the_browser_reply_raises_nothing(dash):
    """A numpy array held by a FigureWidget trace made plotly raise on every browser reply (one traceback per move)."""
    dash.controls["G"].value = 16
    dash.controls["rate"].value = 0.0
    for trace in dash.figure.data:
        for name in ("x", "y", "customdata"):
            value = trace[name]
            assert value is None or isinstance(value, (list, tuple)), (trace.meta, name, type(value))
    note = [a for a in dash.figure.layout.annotations if a.name == "no_hits"][0]
    assert note.visible and "rate 0" in note.text
    dash.controls["rate"].value = 0.05
    assert not [a for a in dash.figure.layout.annotations if a.name == "no_hits"][0].visible


MOVES = st.lists(
    st.one_of(
        st.tuples(st.just("G"), st.sampled_from([2, 5, 8, 16, 96])),  # (96: the rewards panel draws a line)
        st.tuples(st.just("c"), st.sampled_from([1.0, 2.5, 3.7, 5.0])),
        st.tuples(st.just("rate"), st.sampled_from([0.0, 0.05, 0.5, 0.1 + 0.01])),
        st.tuples(st.just("size"), st.sampled_from([1.0, 10.0, 10 ** 1.2999999999999998, 10_000.0])),
        st.tuples(st.just("clean_model"), st.sampled_from(list(CLEAN_MODEL_CHOICES))),
        st.tuples(st.just("methods"), st.sampled_from([(), ("grpo",), ("robust", "rank"), ("winsor", "seed_mad")])),
        st.tuples(st.just("group"), st.sampled_from([0, 3, 39, 40, -1])),
        st.tuples(st.just("button"), st.sampled_from(["reset", "next", "export"])),
    ),
    min_size=1,
    max_size=8,
)


def _assert_figure_shows(fig, data: DashboardData) -> None:
    """Every visible trace of a linked-view figure, its titles and its notes are those of ``data``."""
    traces = trace_by_meta(fig)
    order = np.argsort(data.group_rewards, kind="stable")
    hit = data.group_contaminated[order]
    for key, trace in traces.items():
        kind, _, rest = key.partition(":")
        method = rest.partition(":")[0]
        if kind in ("adv", "adv_clean", "hist") and method != "clip":
            assert trace.visible is (method in data.methods), key
    for m in data.methods:
        assert list(traces[f"adv:{m}"].y) == data.group_advantages[m][order].astype(float).tolist(), m
        assert list(traces[f"adv_clean:{m}"].y) == data.group_clean_advantages[m][order].astype(float).tolist(), m
        assert list(traces[f"hist:{m}:uncontaminated"].customdata) == data.counts_uncontaminated[m].tolist(), m
        assert list(traces[f"hist:{m}:contaminated"].customdata) == data.counts_contaminated[m].tolist(), m
    assert list(traces["group:contaminated"].y) == data.group_rewards[order][hit].astype(float).tolist()
    assert list(traces["group:clean"].y) == data.group_rewards[order][~hit].astype(float).tolist()
    # a line through the uncontaminated rewards once plotly draws only every k-th of their markers
    assert traces["group:clean"].mode == ("lines+markers" if int((~hit).sum()) > MAX_REWARD_MARKERS else "markers")
    assert list(traces["adv:clip"].y) == [data.c, data.c, None, -data.c, -data.c]
    assert traces["adv:clip"].visible is bool(data.clip_methods)
    assert fig.layout.annotations[0].text == f"rewards of group {data.group}"
    note = [a for a in fig.layout.annotations if a.name == "no_hits"][0]
    assert note.visible is (data.contaminated_fraction == 0)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(MOVES)
def test_no_sequence_of_moves_makes_the_readout_and_the_plots_disagree(moves):
    """After any moves (valid or refused, buttons included) the readout and every shown trace are those of
    ``dashboard_data`` at the setting on display; that setting is the controls' whenever those are valid,
    and a message says so whenever they are not."""
    dash = dashboard(n_groups=40, G=8, seed=2)
    buttons = {"reset": dash.reset_button, "next": dash.next_button, "export": dash.export_button}
    for name, value in moves:
        if name == "button":
            buttons[value].click()
        else:
            dash.controls[name].value = value
        fresh = dashboard_data(**dash.data.state())
        _assert_same_data(dash.data, fresh)
        assert dash.readout.value == readout_html(fresh)
        _assert_figure_shows(dash.figure, fresh)
        state = dash.state()
        if bool(state["methods"]) and 0 <= state["group"] < 40:
            assert {k: v for k, v in dash.data.state().items() if k not in ("n_groups", "seed")} == state
        else:
            assert "rg-error" in dash.message.value
        if dash.export.value:
            assert dash.data.call().splitlines()[1] in html_unescape(dash.export.value)


def html_unescape(text: str) -> str:
    import html

    return html.unescape(text)


def test_a_histogram_bin_selects_a_group_with_a_sample_there(dash):
    dash.controls["rate"].value = 0.2
    counts = dash.data.counts_contaminated["grpo"]
    k = int(np.flatnonzero(counts)[-1])
    g = dash.select_bin("grpo", k, contaminated=True)
    assert g is not None and dash.controls["group"].value == g == dash.data.group
    edges = dash.data.bin_edges
    a = dash.data.group_advantages["grpo"][dash.data.group_contaminated]
    low = -np.inf if k == 0 else edges[k]
    high = np.inf if k == len(edges) - 2 else edges[k + 1]
    assert np.any((a >= low) & (a < high))
    with pytest.raises(ValueError, match="bin_index"):
        dash.select_bin("grpo", len(edges))

    class Points:
        point_inds = [int(np.flatnonzero(dash.data.counts_uncontaminated["robust"])[0])]

    dash._on_histogram_click(trace_by_meta(dash.figure)["hist:robust:uncontaminated"], Points(), None)
    assert dash.controls["group"].value == dash.data.group


def test_next_contaminated_group_button(dash):
    dash.controls["rate"].value = 0.05
    start = dash.data.group
    dash.next_button.click()
    g = dash.data.group
    assert g != start and dash.data.group_contaminated.any()
    dash.controls["rate"].value = 0.0
    dash.next_button.click()
    assert "no group is contaminated" in dash.message.value


def test_dashboard_rejects_unknown_controls_and_off_grid_group_sizes():
    with pytest.raises(ValueError, match="unknown dashboard control"):
        dashboard(n_groups=20, colour="red")
    with pytest.raises(ValueError, match="G must be one of"):
        dashboard(n_groups=20, G=7)
    for bad, message in (({"c": 6.0}, "c must be on the clip c slider's grid"), ({"c": 2.55}, r"e\.g\. 2\.5"),
                         ({"rate": 0.7}, "rate must be on"), ({"size": 0.5}, "size must be on"),
                         ({"size": 15.0}, "size must be on"), ({"clean_model": Gaussian()}, "dropdown"),
                         ({"group": 20}, "group must be"), ({"methods": []}, "methods is empty")):
        with pytest.raises(ValueError, match=message):
            dashboard(n_groups=20, **bad)


# ------------------------------------------------------------------ static figures


def test_heatmaps_and_schedule_figures_are_titled_and_labelled():
    table = agreement_grid(["grpo", "robust"], group_sizes=[4, 8], clip=[1.0, 2.5], n_groups=100, clean=Gaussian(), progress=False)
    fig = plot_heatmaps(table, "relative_error", mark_c=(2.0,))
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert len(panels) == 2
    for ax in panels:
        assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()
    assert "(no c)" in panels[0].get_title()
    with pytest.raises(ValueError, match="lacks column"):
        plot_heatmaps(table.drop(columns="relative_error"), "relative_error")
    with pytest.raises(ValueError, match="not in the table"):
        plot_heatmaps(table, "relative_error", methods=["rank"])
    schedule = pd.DataFrame({"progress": [0.0, 1.0], "schedule": "linear", "c": [2.0, 3.5]})
    clipped = table[table["c"].notna()][["method", "c", "clipped_fraction", "clipped_fraction_clean"]]
    training = schedule.merge(clipped.assign(c=clipped["c"].replace({1.0: 2.0, 2.5: 3.5})), on="c")
    fig = plot_clip_schedule(schedule, clipped, training, contaminated_fraction=0.05)
    for ax in fig.axes:
        assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()


def test_heat_map_signs_do_not_change_along_c():
    from robustgrpo.book.sweep_g_and_c.report import HEATMAP_CLIPS, heatmap_data

    data = heatmap_data()
    clipped = data[data["c"].notna()]
    assert set(clipped["c"]) == set(HEATMAP_CLIPS)
    spread = clipped.groupby(["method", "G"])["sign_agreement"].agg(lambda s: s.max() - s.min())
    assert spread.max() == 0.0
    assert data[data["method"] == "grpo"]["fallback_rate"].max() == 0.0


# ------------------------------------------------------------------ benchmark


def test_dashboard_benchmark_runs_small_and_prints_a_table():
    result = run_dashboard_benchmark(G=8, n_groups=60, repeats=2, sweep=False, progress=False)
    assert isinstance(result, DashboardBench)
    controls = {r.control for r in result.rows}
    assert controls == {"c", "rate", "size", "group", "estimators", "G", "clean_model"}
    assert all(r.n >= 1 and r.ms >= 0 and r.max_ms >= r.ms for r in result.rows)
    table = format_dashboard_table(result)
    assert "first view ms" in table and "full data ms" in table and "< 150 ms" in table and "G = 8" in table
    assert all(r.first_ms <= r.ms and r.first_max_ms <= r.max_ms for r in result.rows)
    for r in result.rows:  # the split: every part measured, and together no more than the move (medians of each)
        assert r.compute_ms >= 0 and r.draw_ms > 0 and r.serialise_ms > 0 and r.kb > 0, r
    c_row = next(r for r in result.rows if r.control == "c")
    assert c_row.compute_ms + c_row.draw_ms + c_row.serialise_ms <= 1.05 * c_row.ms
    assert "compute" in table and "JSON" in table and "kB" in table
    # with a preview of 8 groups of the 60, a first visit draws the preview first: sooner than the full data
    previewed = run_dashboard_benchmark(G=8, n_groups=60, repeats=2, sweep=False, progress=False, preview_rewards=64)
    first_visit = [r for r in previewed.rows if r.control == "G" and "first visit" in r.case][0]
    assert first_visit.first_ms < first_visit.ms
    with pytest.raises(ValueError, match="G must be one of"):
        run_dashboard_benchmark(G=7, n_groups=10, sweep=False, progress=False)


def test_counting_messages_packs_each_widget_message_as_the_kernel_would():
    import ipywidgets as W
    from jupyter_client.session import json_packer

    from robustgrpo.bench.dashboards import counting_messages

    text = W.HTML()
    with counting_messages() as sent:
        text.value = "x" * 5000
    assert sent.messages == 1 and sent.seconds > 0
    packed = json_packer({"msg_type": "comm_msg", "content": {"comm_id": text.comm.comm_id,
                                                              "data": {"method": "update", "state": {"value": "x" * 5000},
                                                                       "buffer_paths": []}}, "metadata": {}})
    assert sent.bytes == len(packed)
    with counting_messages() as none:
        pass
    assert (none.messages, none.bytes) == (0, 0)


def test_bench_command_has_a_dashboard_flag():
    args = build_parser().parse_args(["bench", "--dashboard", "--repeats", "3"])
    assert args.dashboard is True and args.repeats == 3
    assert build_parser().parse_args(["bench"]).dashboard is False


# ------------------------------------------------------------------ controls: grids, formats, export


def test_the_comparison_figures_draw_the_estimators_the_registry_features_in_their_places():
    from robustgrpo.book.controls import featured_estimators
    from robustgrpo.book.sweep_g_and_c.report import HEATMAP_METHODS, SCHEDULE_METHODS
    from robustgrpo.book.outlier_poisoning.engine import DEFAULT_STATE
    from robustgrpo.book.outlier_poisoning.report import SCALE_METHODS, SENSITIVITY_METHODS

    assert featured_estimators() == ("grpo", "seed_mad", "robust", "huber_m", "rank")
    assert featured_estimators(clipped=True) == ("seed_mad", "robust", "huber_m")
    assert featured_estimators(clipped=False) == ("grpo", "rank")
    assert HEATMAP_METHODS == SENSITIVITY_METHODS == DEFAULT_STATE["methods"] == featured_estimators()
    assert SCHEDULE_METHODS == featured_estimators(clipped=True)
    assert SCALE_METHODS == ("grpo", "seed_mad", "robust", "huber_m")  # rank only orders: no scale to draw
    with pytest.raises(ValueError, match="clipped must be None, True or False, got 'yes'"):
        featured_estimators(clipped="yes")


def test_a_clip_control_says_which_of_its_estimators_c_clips_in_registry_order():
    from robustgrpo.book.controls import clip_help

    assert clip_help() == "the 4 estimators with a clip: |A| ≤ c"  # four names do not fit a help line
    assert clip_help(["grpo", "robust", "batch_huber"]) == "robust, batch_huber clip A to ±c"
    assert clip_help(["huber_m", "grpo", "robust"]) == "robust, huber_m clip A to ±c"  # the registry's order
    assert clip_help(["seed_mad", "robust", "huber_m", "batch_huber"], width=60) == "seed_mad, robust, huber_m, batch_huber clip A to ±c"


def test_numbers_are_written_as_d3_writes_them():
    """d3-format rounds the exact binary value, halves away from zero, and writes minus as U+2212."""
    from robustgrpo.book.controls import format_fixed, format_significant

    assert format_significant(10**1.3, 4) == "19.95" and format_significant(10_000.0, 4) == "10000"
    assert format_significant(1.0, 4) == "1.000" and format_significant(9.99996, 4) == "10.00"
    assert format_significant(0.0012345, 3) == "0.00123" and format_significant(0.0, 2) == "0.0"
    assert format_fixed(0.125, 2) == "0.13"  # an exact half: away from zero (Python's f-format gives 0.12)
    assert format_fixed(2.675, 2) == "2.67"  # 2.675 is 2.67499999... in binary
    assert format_fixed(-1.25, 1) == "\u22121.3" and format_fixed(-0.001, 2) == "0.00"
    with pytest.raises(ValueError, match="value must be a finite number"):
        format_fixed(float("nan"), 2)


def test_a_slider_spec_snaps_float_noise_and_refuses_values_off_its_grid():
    from robustgrpo.book.controls import Slider

    rate = Slider("rate", "contam. rate", "h", 0.0, 0.5, step=0.01, digits=2)
    size = Slider("size", "outlier M", "h", 0.0, 4.0, step=0.1, digits=4, log=True)
    assert rate.n_steps == 50 and rate.minimum == 0.0 and rate.maximum == 0.5 and len(rate.grid()) == 51
    assert size.n_steps == 40 and size.maximum == 10_000.0 and size.value_at(13) == 10**1.3
    assert rate.snap(0.1 + 0.01) == 0.11 and rate.snap(0.5) == 0.5 and size.snap(10**1.2999999999999998) == 10**1.3
    assert rate.d3_format == ".2f" and size.d3_format == ".4r"
    assert rate.format(0.11000000000000001) == "0.11" and size.format(10**0.1) == "1.259"
    for bad, hint in ((0.105, "e.g. 0.1"), (0.51, "e.g. 0.5"), (-0.01, "e.g. 0.0"), (True, "pass one of its values")):
        with pytest.raises(ValueError, match=rf"rate must be on the contam\. rate slider's grid .*{hint}"):
            rate.snap(bad)
    for bad in (0.0, 15.0, 1e5, float("inf")):
        with pytest.raises(ValueError, match="size must be on the outlier M slider's grid"):
            size.snap(bad)
    with pytest.raises(ValueError, match="whole number of steps"):
        Slider("c", "clip c", "h", 1.0, 5.05, step=0.1, digits=1)


@pytest.mark.parametrize("module", ["sweep_g_and_c", "policy_gradient_drift"])
def test_every_dashboard_control_has_a_short_help_line(module):
    import importlib

    controls = importlib.import_module(f"robustgrpo.book.{module}.engine").CONTROLS
    defaults = importlib.import_module(f"robustgrpo.book.{module}.engine").DEFAULT_STATE
    assert list(controls) == [k for k in controls if k in defaults] and set(controls) == set(defaults)
    for name, control in controls.items():
        assert control.name == name and control.label and 10 <= len(control.help) <= 40, name
        if hasattr(control, "snap"):
            assert control.snap(defaults[name]) == defaults[name], name  # the defaults lie on the grids


def test_dropdown_labels_fit_the_sidebar():
    """A sidebar dropdown shows about 24 characters: the clean-model and scenario choices fit whole (the readout
    names them in full)."""
    from robustgrpo.book.policy_gradient_drift.engine import SCENARIO_CHOICES, SCENARIOS
    from robustgrpo.book.sweep_g_and_c.engine import CLEAN_MODEL_CHOICES

    shorts = [c.short for c in CLEAN_MODEL_CHOICES.values()] + list(SCENARIO_CHOICES.values())
    assert all(len(label) <= 24 for label in shorts) and len(set(shorts)) == len(shorts)
    assert set(SCENARIO_CHOICES) == set(SCENARIOS)


def test_dashboard_data_writes_its_call_and_its_readout():
    data = dashboard_data(G=8, c=3.5, rate=0.1, size=100.0, clean_model=Gaussian(0.0, 2.0), methods=["rank", "grpo"],
                          group=4, n_groups=60, seed=9)
    namespace: dict = {}
    exec(data.call().replace("dashboard_data(", "again = dashboard_data(", 1), namespace)
    assert data.call().splitlines()[0] == "from robustgrpo.lab.contamination import Gaussian"
    _assert_same_data(namespace["again"], data)
    frame = pd.read_csv(io.StringIO(data.readout_csv()))
    assert list(frame["method"]) == ["rank", "grpo"] and set(frame["G"]) == {8} and set(frame["seed"]) == {9}
    np.testing.assert_array_equal(frame["update_cosine"], [data.update_cosine["rank"], data.update_cosine["grpo"]])
    assert frame["clean_model"].iloc[0] == repr(Gaussian(0.0, 2.0))


def test_the_drift_views_legend_tells_every_curve_apart():
    from robustgrpo.book.policy_gradient_drift.engine import drift_dashboard_data
    from robustgrpo.book.policy_gradient_drift.plots import drift_views

    fig = drift_views(drift_dashboard_data(G=4))
    entries = [(t.line.color, t.line.dash) for t in fig.data if t.showlegend is not False and t.name]
    assert len(entries) == 4 and len(set(entries)) == len(entries)


def test_drift_dashboard_status_reset_and_export():
    import html
    import re

    from robustgrpo.book.policy_gradient_drift.engine import drift_dashboard_data
    from robustgrpo.book.dashboards import drift_dashboard

    dash = drift_dashboard(G=4)
    start = dash.data.state()
    dash.controls["rate"].value = 0.1 + 0.02  # float noise of the slider's steps
    assert dash.data.rate == 0.12 and "data-state='ready'" in dash.status.value
    assert not dash.controls["c"].disabled
    dash.controls["estimator"].value = "grpo"
    assert dash.controls["c"].disabled  # grpo has no clip: the c slider is held still, the readout says why
    dash.export_button.click()
    call = html.unescape(re.search(r"<pre class='rg-export-call'[^>]*>(.*?)</pre>", dash.export.value, re.S).group(1))
    assert call.splitlines()[1] == ("drift_dashboard_data(scenario='glitches', rate=0.12, size=10.0, G=4, c=2.5, "
                                    "estimator='grpo')")
    expected = drift_dashboard_data(rate=0.12, G=4, estimator="grpo")
    payload = re.search(r"base64,([A-Za-z0-9+/=]+)'", dash.export.value).group(1)
    import base64

    row = pd.read_csv(io.StringIO(base64.b64decode(payload).decode())).iloc[0]
    assert row["rate"] == 0.12 and row["final"] == expected.final and row["auc"] == expected.auc
    dash.reset_button.click()
    assert dash.data.state() == start and dash.state() == start and not dash.controls["c"].disabled
    assert drift_dashboard(G=4, estimator="dr_grpo").controls["c"].disabled
    with pytest.raises(ValueError, match="c must be on the clip c slider's grid"):
        drift_dashboard(c=2.55)


def test_above_its_marker_limit_the_rewards_panel_draws_a_line_through_every_reward():
    """Plotly draws every k-th marker above MAX_REWARD_MARKERS uncontaminated rewards; the line keeps them all."""
    dash = dashboard(n_groups=10, G=16, seed=4)
    clean = trace_by_meta(dash.figure)["group:clean"]
    assert clean.mode == "markers" and clean.marker.maxdisplayed == MAX_REWARD_MARKERS
    dash.controls["G"].value = 96
    hit = dash.data.group_contaminated
    assert clean.mode == "lines+markers" and len(clean.y) == 96 - int(hit.sum()) > MAX_REWARD_MARKERS
    _assert_figure_shows(dash.figure, dash.data)
    dash.controls["G"].value = 16
    assert clean.mode == "markers"
