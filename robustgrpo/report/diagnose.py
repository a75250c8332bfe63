"""The reward-log diagnosis as figures and as one self-contained HTML page.

:func:`diagnosis_figures` draws the three figures of a
:class:`~robustgrpo.diagnose.Diagnosis` with :mod:`robustgrpo.plots.diagnose`;
:func:`diagnosis_html` writes the same tables and figures as one HTML page
whose figures are embedded (PNG, base64), so it opens anywhere without the
files next to it: ``python -m robustgrpo diagnose FILE --html OUT``.
"""

from __future__ import annotations

import base64
import html
import io
import os
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from ..checks import make_folder
from ..diagnose import Diagnosis
from ..plots.diagnose import reward_distribution, step_health, update_agreement
from ..plots.style import house_style

__all__ = ["FIGURE_NAMES", "diagnosis_figures", "diagnosis_html", "write_diagnosis_html"]

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
    source = diagnosis.source
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
    return frame.to_html(index=False, border=0, float_format=lambda v: f"{v:.{digits}f}", na_rep="-")


def diagnosis_html(diagnosis: Diagnosis, max_outliers: int = 50) -> str:
    """One self-contained HTML page: summary, recommendation, tables and embedded figures."""
    d = diagnosis
    esc = html.escape
    rec = d.recommendation
    settings = ", ".join(f"{k}={v!r}" for k, v in rec.settings.items())
    top = d.outliers.reindex(d.outliers["z"].abs().sort_values(ascending=False).index).head(max_outliers)
    figures = diagnosis_figures(d)
    parts = [
        "<!DOCTYPE html>",
        f"<html lang='en'><head><meta charset='utf-8'><title>robustgrpo diagnosis: {esc(d.source)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>Reward-log diagnosis: {esc(d.source)}</h1>",
        f"<p>{esc(d.load_summary)}</p>",
    ]
    if d.reward_fn is not None:
        parts.append(f"<p>Reward function: {esc(d.reward_fn)}</p>")
    if d.reward_range is not None:
        parts.append(f"<p>Declared reward range: [{d.reward_range[0]:g}, {d.reward_range[1]:g}]</p>")
    parts += [
        f"<div class='rec'><strong>Recommendation: {esc(rec.method)}{esc(f'({settings})' if settings else '')}</strong>"
        f"<br>{esc(rec.reason)}.</div>",
        "<h2>Per step</h2>",
        _table(pd.concat([d.steps, d.overall], ignore_index=True)),
        f"<img alt='group health per step' src='data:image/png;base64,{_png_base64(figures['07_step_health'])}'>",
        f"<h2>Outlier candidates ({len(d.outliers):,})</h2>",
        _table(top) if len(top) else "<p>None.</p>",
        f"<img alt='reward distribution' src='data:image/png;base64,{_png_base64(figures['07_reward_distribution'])}'>",
        "<h2>Estimator disagreement on the gradient, against grpo</h2>",
        _table(d.agreement_summary),
        f"<img alt='update agreement' src='data:image/png;base64,{_png_base64(figures['07_update_agreement'])}'>",
        "<p>Made by robustgrpo (<code>python -m robustgrpo diagnose</code>).</p>",
        "</body></html>",
    ]
    return "\n".join(parts)


def write_diagnosis_html(diagnosis: Diagnosis, path: str | os.PathLike[str]) -> Path:
    """Write :func:`diagnosis_html` to ``path`` (folders created); return the path.

    ``ValueError`` if ``path`` is a folder or its folder cannot be made.
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{str(path)!r} is a folder; pass the HTML file to write, e.g. {str(path / 'diagnosis.html')!r}")
    make_folder(path.parent)
    path.write_text(diagnosis_html(diagnosis), encoding="utf-8")
    return path
