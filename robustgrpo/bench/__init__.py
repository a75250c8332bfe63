"""The speed benchmarks, one module per subject, each a command that prints a table.

:mod:`~robustgrpo.bench.estimators` (the catalogue), :mod:`~robustgrpo.bench.dashboards` (notebook 03's
dashboard and heat-map sweep), :mod:`~robustgrpo.bench.lessons` (the live lessons),
:mod:`~robustgrpo.bench.simulate` (the drift simulator and the evidence battery),
:mod:`~robustgrpo.bench.sweep` (the sweep engines), :mod:`~robustgrpo.bench.trainer` (real TRL steps),
:mod:`~robustgrpo.bench.adapters` (the verl adapter on verl's layout), :mod:`~robustgrpo.bench.scaling`
(time and memory as B and G grow), :mod:`~robustgrpo.bench.kernels` (each fast kernel against its plain twin).
This package re-exports each one's functions.


``python -m robustgrpo bench`` times every estimator through
:func:`robustgrpo.compute_advantages` on float32 CPU tensors of shape
``[65536, 16]`` and ``[4096, 256]``, on three kinds of rewards
(:data:`BENCH_REWARDS`: uniform with an outlier, 0/1, 0/1 with jitter), at one
torch thread and at the default thread count, side by side in one run with:

* ``grpo (idiomatic)``: the two lines every trainer writes,
  ``std, mean = torch.std_mean(r, dim=-1, keepdim=True); (r - mean) / (std + eps)``;
* ``robust (numpy+scipy)``: the same computation as the ``robust`` estimator
  written with numpy array operations (:func:`robust_numpy_scipy`; the tests
  check it equals the estimator);
* ``median, MAD, clip (np)``: the median/MAD idea alone, every order
  statistic from one numpy sort per row (:func:`median_mad_clip_numpy`; the
  tests check it against numpy's median and scipy's MAD): the floor that
  ``robust``'s tie tolerance, typical gap, fallback scale and checks add to.

Ratios are measured in the same process, interleaved (each repeat runs every
case once, in turn, at each thread count), so machine noise hits all rows
alike; a row's ratio is the median of its per-repeat ratios. The targets
(:data:`ESTIMATOR_TARGETS`), at one thread on every shape and kind of rewards:
every estimator within 3x the idiomatic grpo, ``rank`` and ``huber_m`` within
6x (issue 41: targets that price the plain definitions in), ``robust`` at
least 3x faster than numpy + scipy, the one-sort floor under 1x grpo (the
line also gives ``robust``'s time over it), and a declared ``reward_range``
(:data:`BENCH_RANGES`) adding at most 20 % to ``grpo``, ``robust`` and
``rank``: on the rewards as they are, which it holds (rows
``"<estimator> +range"``), and with a glitch of 50 in one group of 100, which
it masks (rows ``"<estimator> +range, glitched"`` against
``"<estimator>, glitched"``); the overhead is the median of per-repeat ratios
to the same estimator on the same rewards without the range. The table says
which targets are not met.

``--malloc fresh`` or ``--malloc reuse`` (any of these benches) pins glibc's allocator thresholds for the
run (:func:`~robustgrpo.bench._common.pin_allocator`): by default glibc moves them as memory is freed,
so whether a large temporary pays its page faults, and with it a ratio, depends on what ran before.

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
share of a step the estimator's advantage block takes (target: under 1 %), measured side by
side in one run with one torch thread, printed by :func:`format_trainer_table`.

``python -m robustgrpo bench --scaling`` runs :func:`run_scaling_benchmark`: every estimator and the
idiomatic GRPO as B grows from 10^3 to 10^6 at G = 16 and as G grows from 4 to 1024 at B x G = 2^20
(nanoseconds per reward; a step more than 1.5x the size before is marked), and each one's peak
memory beyond its input (:func:`peak_memory`, target within 4x the input), printed by
:func:`format_scaling_table`.

``python -m robustgrpo bench --adapters`` runs :func:`run_adapter_benchmark`: the verl adapter on
verl's own layout (65536 prompts x G = 16, token-level 0/1 rewards, 36-character string uids), side
by side with the idiomatic GRPO on the same batch grouped by position (target: the adapter within
2x), the same GRPO grouping by uid with ``numpy.unique``, and verl's ``grpo_vectorized``, at one
torch thread, printed by :func:`format_adapter_table` with the load average.

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

from robustgrpo.bench import adapters, dashboards, estimators, kernels, lessons, scaling, simulate, sweep, trainer
from robustgrpo.bench.adapters import *  # noqa: F403
from robustgrpo.bench.scaling import *  # noqa: F403
from robustgrpo.bench.dashboards import *  # noqa: F403 (each module's __all__, re-exported)
from robustgrpo.bench.estimators import *  # noqa: F403
from robustgrpo.bench.kernels import *  # noqa: F403
from robustgrpo.bench.lessons import *  # noqa: F403
from robustgrpo.bench.simulate import *  # noqa: F403
from robustgrpo.bench.sweep import *  # noqa: F403
from robustgrpo.bench.trainer import *  # noqa: F403

__all__ = [*estimators.__all__, *kernels.__all__, *scaling.__all__, *adapters.__all__, *dashboards.__all__, *lessons.__all__, *simulate.__all__, *sweep.__all__,
           *trainer.__all__]
