"""The reward-log diagnosis as figures and as one self-contained HTML page.

:func:`diagnosis_figures` draws the three figures of a
:class:`~robustgrpo.lab.diagnose.Diagnosis` with :mod:`robustgrpo.book.your_rewards.plots`;
:func:`diagnosis_html` writes the same tables and figures as one HTML page
whose figures are embedded (PNG, base64), so it opens anywhere without the
files next to it: ``python -m robustgrpo diagnose FILE --html OUT``.

Text from the log (the file name, group ids, reward-function names) is shown
as text: HTML-escaped, its control characters escaped
(:func:`~robustgrpo.lab.files.plain_text`), and in figure titles its ``$`` too
(:func:`~robustgrpo.book.style.literal_text`). :func:`write_diagnosis_html`
writes only a new file in an existing folder: never the log itself, never
through a symbolic link, never over an existing file unless ``force``.
"""

from __future__ import annotations

import base64
import html
import io
import os
from pathlib import Path
from typing import Callable, Sequence

import pandas as pd
from matplotlib.figure import Figure

from robustgrpo.lab.files import check_output_file, plain_text, write_new_file
from robustgrpo.lab.diagnose import Diagnosis, RunDiagnosis, short_label
from robustgrpo.book.your_rewards.plots import reward_distribution, step_health, update_agreement
from robustgrpo.book.style import house_style, literal_text

__all__ = ["FIGURE_NAMES", "diagnosis_figures", "diagnosis_html", "write_diagnosis_html", "loaded_values",
           "overall_values", "range_values", "agreement_values", "recommendation_values"]

#: File stems of the diagnosis figures (notebook 07 saves them under these names).
FIGURE_NAMES: tuple[str, ...] = ("07_step_health", "07_reward_distribution", "07_update_agreement")

_CSS = """
body { font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; color: #222; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0 1.5em; }
th, td { border-bottom: 1px solid #ddd; padding: 0.2em 0.6em; text-align: right; }
th { background: #f4f4f4; }
img { max-width: 100%; display: block; margin: 0.5em 0 1.5em; }
.rec { background: #eef6fb; border-left: 4px solid #0072B2; padding: 0.6em 1em; }
"""


def diagnosis_figures(diagnosis: Diagnosis) -> dict[str, Figure]:
    """The three figures of a diagnosis, by file stem (:data:`FIGURE_NAMES`)."""
    source = literal_text(diagnosis.source)
    return dict(zip(FIGURE_NAMES, (
        step_health(diagnosis.steps, title=f"Group health per step: {source}"),
        reward_distribution(diagnosis.samples, reward_range=diagnosis.reward_range, title=f"Rewards of {source}"),
        update_agreement(diagnosis.agreement, title="Cosine of each estimator's policy update with grpo's, per step"),
    )))


def _png_base64(fig: Figure) -> str:
    buf = io.BytesIO()
    with house_style():
        fig.savefig(buf, format="png", metadata={"Software": None})
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _table(frame: pd.DataFrame, digits: int = 3) -> str:
    """An HTML table (pandas escapes the cells); text columns with their control characters escaped too."""
    text = [c for c in frame.columns if frame[c].dtype == object or pd.api.types.is_string_dtype(frame[c].dtype)]
    shown = frame.assign(**{c: frame[c].map(plain_text) for c in text})
    return shown.to_html(index=False, border=0, escape=True, float_format=lambda v: f"{v:.{digits}f}", na_rep="-")


def diagnosis_html(diagnosis: Diagnosis | RunDiagnosis, max_outliers: int = 50) -> str:
    """One self-contained HTML page holding every section the terminal prints (:meth:`Diagnosis.text`,
    :meth:`RunDiagnosis.text`) and the figures: summary, per-step table, outlier candidates, estimator
    disagreement, the recommendation with the setting to paste for TRL and verl, and for a run its summary,
    each reward function's row and the logged advantages against each estimator's."""
    run = diagnosis if isinstance(diagnosis, RunDiagnosis) else None
    d = diagnosis.total if run is not None else diagnosis

    def esc(text: str) -> str:
        return html.escape(plain_text(text))

    rec = d.recommendation
    settings = ", ".join(f"{k}={v!r}" for k, v in rec.settings.items())
    top = d.outliers.reindex(d.outliers["z"].abs().sort_values(ascending=False).index).head(max_outliers)
    shortened = top.assign(group=top["group"].map(short_label))
    steps, steps_title = d.step_table()
    figures = diagnosis_figures(d)
    title = f"Run diagnosis: {esc(run.run.path.name)}" if run is not None else f"Reward-log diagnosis: {esc(d.source)}"
    parts = [
        "<!DOCTYPE html>",
        f"<html lang='en'><head><meta charset='utf-8'><title>robustgrpo diagnosis: {esc(d.source)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{title}</h1>",
        f"<p>{esc(run.run.summary() if run is not None else d.load_summary)}</p>",
    ]
    if run is not None:
        parts.append(f"<h2>The total reward ({esc(run.run.total)}): what the trainer normalised</h2>")
    if d.reward_fn is not None and run is None:
        parts.append(f"<p>Reward function: {esc(d.reward_fn)}</p>")
    if d.reward_range is not None:
        parts.append(f"<p>Declared reward range: [{d.reward_range[0]:g}, {d.reward_range[1]:g}]</p>")
    parts += [
        f"<div class='rec'><strong>Recommendation: {esc(rec.method)}{esc(f' with {settings}' if settings else '')}</strong>"
        f"<br>TRL: <code>{esc(rec.trl)}</code><br>verl: <code>{esc(rec.verl)}</code><br>{esc(rec.reason)}.</div>",
        "<h2>Per step</h2>",
        f"<p>{esc(steps_title)}</p>",
        _table(steps),
        f"<img alt='group health per step' src='data:image/png;base64,{_png_base64(figures['07_step_health'])}'>",
        f"<h2>Outlier candidates ({len(d.outliers):,})</h2>",
        _table(shortened) if len(top) else "<p>None.</p>",
    ]
    if (shortened["group"] != top["group"]).any():
        parts.append("<p>Long group labels are shown as the first 7 hex digits of the sha256 of their text and their "
                     "first words; <code>diagnose --json</code> holds the full text.</p>")
    parts += [
        f"<img alt='reward distribution' src='data:image/png;base64,{_png_base64(figures['07_reward_distribution'])}'>",
        "<h2>Estimator disagreement on the gradient, against grpo</h2>",
        _table(d.agreement_summary),
        f"<img alt='update agreement' src='data:image/png;base64,{_png_base64(figures['07_update_agreement'])}'>",
    ]
    if run is not None:
        parts += _run_sections(run, esc)
    parts += ["<p>Made by robustgrpo (<code>python -m robustgrpo diagnose</code>).</p>", "</body></html>"]
    return "\n".join(parts)


def _run_sections(run: RunDiagnosis, esc: Callable[[str], str]) -> list[str]:
    """The run's own sections of the page: each reward function's row, the logged advantages against each estimator's."""
    parts = []
    if run.functions:
        parts += ["<h2>Each reward function on its own, and the total</h2>", _table(run.function_table)]
    if run.run.trainer == "trl":
        source = f"robustgrpo's {run.logged_method!r} estimator" if run.logged_method else "TRL's own normalisation"
        matching = run.reproduced_by
        parts += [f"<h2>The advantages the trainer logged (by {esc(source)}) against each estimator's</h2>",
                  _table(run.advantages, digits=3),
                  f"<p>{esc('reproduced by: ' + ', '.join(matching)) if matching else esc(run.no_match_text)}</p>"]
    else:
        parts.append("<p>verl's rollout dumps hold no advantages: nothing logged to compare.</p>")
    return parts


def write_diagnosis_html(diagnosis: Diagnosis | RunDiagnosis, path: str | os.PathLike[str], *, force: bool = False,
                         inputs: Sequence[str | os.PathLike[str]] = ()) -> Path:
    """Write :func:`diagnosis_html` to ``path``; return the path.

    Parameters
    ----------
    diagnosis : Diagnosis or RunDiagnosis
    path : path
        The HTML file, in a folder that exists (a missing folder is refused, not made).
    force : bool
        Replace an existing file (``--force``); never one of ``inputs``, never through a link.
    inputs : paths
        Files the page must not replace (the command passes the reward log).

    Raises
    ------
    ValueError
        ``path`` is a folder, a symbolic link, one of ``inputs``, in a folder that does not
        exist, or exists (without ``force``); see :func:`~robustgrpo.lab.files.check_output_file`.
    """
    path = check_output_file(path, inputs=inputs, force=force)
    page = diagnosis_html(diagnosis).encode("utf-8")
    return write_new_file(path, lambda handle: handle.write(page), force=force)


# ------------------------------------------------------------------ notebook 07's numbers


def loaded_values(diagnosis: Diagnosis, prefix: str = "") -> dict[str, str]:
    """What was read, for the notebook's prose (:func:`robustgrpo.book.glue.glue`).

    ``{prefix}loaded``: the log's :meth:`~robustgrpo.lab.rewardlogs.RewardLog.summary` (file name, rows, steps,
    groups), its control characters escaped (:func:`~robustgrpo.lab.files.plain_text`). ``prefix`` names a second
    diagnosis in the same notebook (glue names are unique per notebook).
    """
    return {f"{prefix}loaded": plain_text(diagnosis.load_summary)}


def overall_values(diagnosis: Diagnosis, prefix: str = "") -> dict[str, float | int]:
    """The whole log's group health, for the notebook's prose: one row of ``diagnosis.overall``.

    Returns
    -------
    dict
        ``n_groups`` and ``group_size`` (the median group size); the shares of groups whose rewards all tie
        (``tie_share``), whose MAD is 0 (``mad_zero_share``) and that hold an outlier candidate
        (``outlier_group_share``); ``outlier_candidates`` (rewards); ``best_eligible``, the groups with a best
        plausible answer, and ``best_negative_share``, the share of them where its ``grpo`` advantage is negative.
        The declared range is :func:`range_values`'. Each name begins with ``prefix`` (a second diagnosis in the
        same notebook).
    """
    o = diagnosis.overall.iloc[0]
    values: dict[str, float | int] = {
        "n_groups": int(o.n_groups), "group_size": float(o.group_size_median),
        "tie_share": float(o.frac_reward_zero_std), "mad_zero_share": float(o.frac_mad_zero),
        "outlier_group_share": float(o.outlier_group_fraction), "outlier_candidates": int(o.outlier_candidates),
        "best_eligible": int(o.best_eligible), "best_negative_share": float(o.best_negative_rate),
    }
    return {prefix + name: value for name, value in values.items()}


def range_values(diagnosis: Diagnosis, prefix: str = "") -> dict[str, int | str]:
    """The declared range, for the notebook's prose, with or without one (the prose places both names either way).

    Returns
    -------
    dict
        ``declared_range``: the range as ``[low, high]`` (each end as the ``g`` format writes it) or ``"none
        declared"``; ``out_of_range``: the rewards outside it, or ``"none: no range declared"`` (nothing lies outside
        no range). Each name begins with ``prefix``.
    """
    if diagnosis.reward_range is None:
        values: dict[str, int | str] = {"declared_range": "none declared", "out_of_range": "none: no range declared"}
    else:
        low, high = diagnosis.reward_range
        values = {"declared_range": f"[{low:g}, {high:g}]", "out_of_range": int(diagnosis.overall.iloc[0].out_of_range)}
    return {prefix + name: value for name, value in values.items()}


def agreement_values(diagnosis: Diagnosis) -> dict[str, str | float]:
    """Which estimator's update is closest to ``grpo``'s on the log and which farthest, for the notebook's prose.

    From ``diagnosis.agreement_summary`` (``grpo`` itself left out): ``nearest`` and ``farthest``, the estimators of
    the largest and smallest mean cosine with ``grpo``'s update over the steps (the first in catalogue order on a
    tie), with ``nearest_cosine`` and ``farthest_cosine``; ``robust_cosine``, the mean cosine of ``robust``, only
    where the diagnosis compared ``robust`` (``diagnose(..., methods=...)`` may leave it out).
    """
    cosines = diagnosis.agreement_summary.set_index("method")["mean_cosine"]
    others = cosines.drop("grpo")
    near, far = others.idxmax(), others.idxmin()
    values: dict[str, str | float] = {"nearest": near, "nearest_cosine": float(others[near]), "farthest": far,
                                      "farthest_cosine": float(others[far])}
    if "robust" in cosines.index:
        values["robust_cosine"] = float(cosines["robust"])
    return values


def recommendation_values(diagnosis: Diagnosis, prefix: str = "") -> dict[str, str]:
    """The recommendation of the diagnosis, for the notebook's prose: ``{prefix}method``, ``{prefix}settings`` (the
    settings as Python writes the dict) and ``{prefix}reason``, the rule's reason
    (:func:`~robustgrpo.lab.diagnose.recommend`). ``prefix`` names a second diagnosis in the same notebook."""
    rec = diagnosis.recommendation
    return {f"{prefix}method": rec.method, f"{prefix}settings": repr(rec.settings), f"{prefix}reason": rec.reason}
