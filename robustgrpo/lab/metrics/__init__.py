r"""Metrics of robustness and efficiency for the advantage estimators.

Every experiment here answers one question about the estimators of
:mod:`robustgrpo.advantages` (or the location/scale primitives of
:mod:`robustgrpo.stats`) and returns a tidy :class:`pandas.DataFrame`, one
row per cell and estimator:

* :func:`sensitivity_curve`: the advantages of one group as one reward moves
  ("what does the 10 do to the 1.0"); :func:`statistic_sensitivity` is
  Tukey's empirical sensitivity curve of a location or scale statistic.
* :func:`breakdown_point`: the empirical replacement breakdown point of each
  estimator's centre and scale (explosion), plus implosion of the scale and
  the onset of the estimator's fallback path when values tie.
* :func:`breakdown_point` also has a 0/1 counterpart, :func:`binary_breakdown`
  (how many glitches take a correct answer's lead), and
  :func:`breakdown_table` states the registry's closed forms.
* :func:`agreement`: how well advantages computed on contaminated rewards
  agree with those computed on the clean rewards, at the level of the policy
  update (:func:`update_cosine`, :func:`relative_update_error`, the cosine
  with an unbiased reference update) and per sample (:func:`sign_changes`,
  rank correlation, the best clean answer turned negative, fallback and clip
  rates); :func:`agreement_grid` runs it over a grid of group size, clip, contamination
  rate and outlier size.
* :func:`efficiency`: Monte Carlo Gaussian efficiency of location and scale
  statistics, to compare with the published asymptotic values
  (:func:`reference_efficiencies`, ``data/reference/efficiency.json``).
* :func:`samuelson_bound`: the largest |z| mean/std scoring can give.
* :func:`mad_zero_fraction` (exact, binomial) and
  :func:`mad_zero_fraction_mc` (Monte Carlo through an estimator's fallback
  flag): how often the MAD of G Bernoulli rewards is 0.
* :func:`update_weight` (exact) and :func:`update_weight_mc`: the per-prompt
  weight w(p) and the update signal-to-noise ratio on 0/1 rewards;
  :func:`jitter_sweep`: what sub-resolution noise does to them.
* :mod:`robustgrpo.lab.metrics.battery`: the evidence battery (every estimator's
  update against the exact gradient on reward-shape families of real runs)
  and the rule that turns it into :data:`robustgrpo.RECOMMENDATIONS`.

One module per question, in this order: ``sensitivity``, ``breakdown``,
``agreement``, ``grid``, ``efficiency``, ``binary``, ``battery``
(``_common`` holds what they share). Everything public is importable from
``robustgrpo.lab.metrics``.

Conventions
-----------
* Computation is vectorized over groups, samples and Monte Carlo replicates;
  Python loops run only over sweep cells, estimators and (in
  :func:`efficiency`, for the O(n^2) statistics Qn and Sn) memory-bounded
  blocks of replicates.
* Everything random takes ``seed`` (an int >= 0) and gives the same frame
  for the same arguments. Derived seeds come from
  :class:`numpy.random.SeedSequence` with a per-cell spawn key, so adding a
  cell does not change the draws of the others.
* Computation is in float64.
* Estimator parameters (``**params``) are *broadcast* by the registry
  (:func:`robustgrpo.lab.catalogue.split_settings`): each is passed to every
  chosen method that accepts it (``ESTIMATORS[m].parameters``); a parameter
  that none of the chosen methods accepts raises ``ValueError``. Keywords of
  :func:`compute_advantages` itself
  (:data:`robustgrpo.advantages.ENTRY_OPTIONS`, e.g. ``reward_range``) go to
  every method.
"""

from robustgrpo.lab.metrics._common import DTYPE, derived_seed, scenario_record
from robustgrpo.lab.metrics.agreement import (
    advantage_samples,
    agreement,
    agreement_from_advantages,
    relative_update_error,
    sign_changes,
    update_agreement,
    update_cosine,
)
from robustgrpo.lab.metrics.binary import (
    jitter_sweep,
    mad_zero_fraction,
    mad_zero_fraction_mc,
    update_weight,
    update_weight_mc,
)
from robustgrpo.lab.metrics.breakdown import binary_breakdown, breakdown_point, breakdown_table
from robustgrpo.lab.metrics.efficiency import efficiency, reference_efficiencies, samuelson_bound
from robustgrpo.lab.metrics.sensitivity import (
    HUBER_EFFICIENT_C,
    STATISTICS,
    sensitivity_curve,
    statistic_sensitivity,
)
from robustgrpo.lab.metrics.grid import agreement_grid

__all__ = [
    "DTYPE",
    "derived_seed",
    "scenario_record",
    "HUBER_EFFICIENT_C",
    "STATISTICS",
    "sensitivity_curve",
    "statistic_sensitivity",
    "breakdown_point",
    "binary_breakdown",
    "breakdown_table",
    "update_cosine",
    "relative_update_error",
    "update_agreement",
    "sign_changes",
    "agreement_from_advantages",
    "agreement",
    "advantage_samples",
    "agreement_grid",
    "efficiency",
    "reference_efficiencies",
    "samuelson_bound",
    "mad_zero_fraction",
    "mad_zero_fraction_mc",
    "update_weight",
    "update_weight_mc",
    "jitter_sweep",
]
