"""The notebook 05 dashboard as ipywidgets: sliders, the plotly training curves, a readout.

The numbers come from :class:`robustgrpo.book.policy_gradient_drift.engine.DriftEngine`; this module only builds
widgets on it and wires them together (the frame, reset and export come from
:mod:`robustgrpo.book.widget`). Every slider waits for its release
(``continuous_update=False``): each move reruns a short simulation (under 2 s on two cores,
``python -m robustgrpo bench --simulate`` times it), and the status line says so meanwhile. The
trainings run one step a turn of the kernel's loop (:meth:`~robustgrpo.book.policy_gradient_drift.engine.DriftEngine.data_steps`):
a move made meanwhile stops them and starts its own.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping

from robustgrpo.book.policy_gradient_drift.engine import (
    CONTROLS,
    DEFAULT_STATE,
    ESTIMATOR_CHOICES,
    GROUP_SIZES,
    SCENARIO_CHOICES,
    SCENARIOS,
    DriftData,
    DriftEngine,
    drift_config,
)
from robustgrpo.book.widget import DESCRIPTION_WIDTH, DashboardWidget, slider, with_help

__all__ = ["drift_readout_html", "DriftDashboard", "drift_dashboard"]


def drift_readout_html(data: DriftData) -> str:
    """The readout of a setting as HTML; every number sits in ``<span data-key="...">`` for a browser test.

    The setting is written as its sliders write it (:data:`~robustgrpo.book.policy_gradient_drift.engine.CONTROLS`).
    """
    s = data.summary()
    cells = "".join(
        f"<tr><td style='padding:0 8px'>{label}</td><td style='padding:0 8px;text-align:right' data-key='{key}'>"
        f"{s[key]:.4f}</td></tr>"
        for key, label in (("final", "true reward at the last step"), ("final_clean", "... without contamination"),
                           ("auc", "mean true reward over training"), ("auc_clean", "... without contamination"),
                           ("mean_cos_clean", "mean cosine with the clean update"))
    )
    rate, size, c = (CONTROLS[k].format(getattr(data, k)) for k in ("rate", "size", "c"))
    clip = f'c = <span data-key="c">{c}</span>' if data.clip_applies else "no clip c for this estimator"
    setting = (f'<b>{data.estimator}</b>, G = <span data-key="G">{data.G}</span>, {clip}; {SCENARIOS[data.scenario]}: '
               f'rate <span data-key="rate">{rate}</span>, outlier <span data-key="size">{size}</span>')
    return (f"<div class='rg-drift-readout' style='font-size:12px'><div>{setting}</div>"
            f"<table style='line-height:1.3'>{cells}</table></div>")


class DriftDashboard(DashboardWidget):
    """Controls (``scenario``, ``rate``, ``size``, ``G``, ``c``, ``estimator``), the plotly ``figure``,
    the ``readout``, and what every dashboard has (:class:`~robustgrpo.book.widget.DashboardWidget`:
    ``status``, ``message``, reset and export); ``widget`` is the whole layout. Build it with
    :func:`drift_dashboard`; displaying the object displays ``widget``."""

    ABOUT = (
        "Short policy-gradient trainings of a toy policy with one estimator, on rewards contaminated as set "
        "(scenario, rate, outlier size) and on clean rewards, over several seeds: the top panel shows the "
        "true reward of both (seed bands) and, in the hack scenario, the probability of the hacked answer; "
        "the bottom one the cosine of each update with the clean one. Each move reruns the trainings."
    )
    FIGURE_NAME = "robustgrpo_drift"

    def __init__(self, engine: DriftEngine, state: Mapping[str, Any]) -> None:
        import ipywidgets as W

        from robustgrpo.book.policy_gradient_drift.plots import drift_views

        unknown = sorted(set(state) - set(DEFAULT_STATE))
        if unknown:
            raise ValueError(f"unknown dashboard control(s) {unknown}; known: {list(DEFAULT_STATE)}")
        s = {**DEFAULT_STATE, **state}
        if s["G"] not in GROUP_SIZES:
            raise ValueError(f"G must be one of the slider's values {GROUP_SIZES}, got {s['G']!r}")
        for name in ("rate", "size", "c"):  # a slider would move a value off its grid silently: refuse instead
            s[name] = CONTROLS[name].snap(s[name])
        drift_config(s["scenario"], s["rate"], s["size"], s["G"], s["c"], s["estimator"])  # the other checks
        self.engine = engine
        self.specs = CONTROLS
        style = {"description_width": DESCRIPTION_WIDTH}
        full = W.Layout(width="100%")
        # every slider waits for its release: each move reruns a short simulation
        self.controls: dict[str, Any] = {
            "scenario": W.Dropdown(options=[(label, key) for key, label in SCENARIO_CHOICES.items()], value=s["scenario"],
                                   description=CONTROLS["scenario"].label, style=style, layout=full),
            "rate": slider(CONTROLS["rate"], s["rate"], continuous_update=False),
            "size": slider(CONTROLS["size"], s["size"], continuous_update=False),
            "G": W.SelectionSlider(options=GROUP_SIZES, value=s["G"], description=CONTROLS["G"].label,
                                   continuous_update=False, style=style, layout=full),
            "c": slider(CONTROLS["c"], s["c"], continuous_update=False),
            "estimator": W.Dropdown(options=list(ESTIMATOR_CHOICES), value=s["estimator"],
                                    description=CONTROLS["estimator"].label, style=style, layout=full),
        }
        self.data = self._compute(self.state())
        self.controls["c"].disabled = not self.data.clip_applies
        self.readout = W.HTML(drift_readout_html(self.data))
        self.figure = drift_views(self.data)
        self._assemble([with_help(w, CONTROLS[name]) for name, w in self.controls.items()],
                       [self.figure, self.readout], s)

    def _compute(self, state: Mapping[str, Any]) -> DriftData:
        return self.engine.data(**state)

    def _compute_steps(self, state: Mapping[str, Any]) -> Iterator[None]:
        return self.engine.data_steps(**state)

    def _draw(self, data: DriftData) -> None:
        from robustgrpo.book.policy_gradient_drift.plots import update_drift_views

        update_drift_views(self.figure, data)
        self.readout.value = drift_readout_html(data)
        self.controls["c"].disabled = not data.clip_applies  # c moves nothing for an estimator without a clip

    def _export(self, data: DriftData) -> tuple[str, str, str]:
        return data.call(), data.readout_csv(), "robustgrpo_drift_readout.csv"


def drift_dashboard(*, engine: DriftEngine | None = None, **state: Any) -> DriftDashboard:
    """Build the notebook 05 dashboard, ready to display.

    Parameters
    ----------
    engine : DriftEngine, optional
        Share a cache of runs.
    **state
        Initial control values (defaults :data:`~robustgrpo.book.policy_gradient_drift.engine.DEFAULT_STATE`; ``rate``,
        ``size`` and ``c`` on their sliders' grids). The reset button returns to them.
    """
    return DriftDashboard(engine if engine is not None else DriftEngine(), state)
