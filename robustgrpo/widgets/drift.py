"""The notebook 05 dashboard as ipywidgets: sliders, the plotly training curves, a readout.

The numbers come from :class:`robustgrpo.dashboards.drift.DriftEngine`; this module only builds
widgets on it and wires them together. Every slider waits for its release
(``continuous_update=False``): each move reruns a short simulation (under 2 s on two cores,
``python -m robustgrpo bench --simulate`` times it).
"""

from __future__ import annotations

from typing import Any, Mapping

from ..dashboards.drift import (
    CLIP_RANGE,
    DEFAULT_STATE,
    ESTIMATOR_CHOICES,
    GROUP_SIZES,
    RATE_RANGE,
    SCENARIOS,
    SIZE_LOG10_RANGE,
    DriftData,
    DriftEngine,
    drift_config,
)

__all__ = ["drift_readout_html", "DriftDashboard", "drift_dashboard"]


def drift_readout_html(data: DriftData) -> str:
    """The readout of a setting as HTML; every number sits in ``<span data-key="...">`` for a browser test."""
    s = data.summary()
    cells = "".join(
        f"<tr><td style='padding:0 8px'>{label}</td><td style='padding:0 8px;text-align:right' data-key='{key}'>"
        f"{s[key]:.4f}</td></tr>"
        for key, label in (("final", "true reward at the last step"), ("final_clean", "... without contamination"),
                           ("auc", "mean true reward over training"), ("auc_clean", "... without contamination"),
                           ("mean_cos_clean", "mean cosine with the clean update"))
    )
    clip = f'c = <span data-key="c">{data.c:.2f}</span>' if data.clip_applies else "no clip c for this estimator"
    setting = (f'<b>{data.estimator}</b>, G = <span data-key="G">{data.G}</span>, {clip}; {SCENARIOS[data.scenario]}: '
               f'rate <span data-key="rate">{data.rate:.2f}</span>, outlier <span data-key="size">{data.size:.4g}</span>')
    return f"<div class='rg-drift-readout'><div>{setting}</div><table>{cells}</table></div>"


class DriftDashboard:
    """Controls (``scenario``, ``rate``, ``size``, ``G``, ``c``, ``estimator``), the plotly ``figure``,
    the ``readout`` and the ``message`` line; ``widget`` is the whole layout. Build it with
    :func:`drift_dashboard`; displaying the object displays ``widget``."""

    def __init__(self, engine: DriftEngine, state: Mapping[str, Any]) -> None:
        import ipywidgets as W

        from ..plots.drift import drift_views

        unknown = sorted(set(state) - set(DEFAULT_STATE))
        if unknown:
            raise ValueError(f"unknown dashboard control(s) {unknown}; known: {list(DEFAULT_STATE)}")
        s = {**DEFAULT_STATE, **state}
        if s["G"] not in GROUP_SIZES:
            raise ValueError(f"G must be one of the slider's values {GROUP_SIZES}, got {s['G']!r}")
        for name, (lo, hi) in (("rate", RATE_RANGE), ("c", CLIP_RANGE), ("size", tuple(10**v for v in SIZE_LOG10_RANGE))):
            if not lo <= s[name] <= hi:  # a slider would clamp it silently: refuse instead
                raise ValueError(f"{name} must be in [{lo:g}, {hi:g}] (the slider's range), got {s[name]!r}; "
                                 "use drift_dashboard_data for other values")
        drift_config(s["scenario"], s["rate"], s["size"], s["G"], s["c"], s["estimator"])  # the other checks
        self.engine = engine
        wide = {"description_width": "110px"}
        layout = W.Layout(width="420px")
        self.controls: dict[str, Any] = {
            "scenario": W.Dropdown(options=[(label, key) for key, label in SCENARIOS.items()], value=s["scenario"],
                                   description="scenario", style=wide, layout=W.Layout(width="560px")),
            "rate": W.FloatSlider(value=s["rate"], min=RATE_RANGE[0], max=RATE_RANGE[1], step=0.01,
                                  description="contam. rate", readout_format=".2f", continuous_update=False,
                                  style=wide, layout=layout),
            "size": W.FloatLogSlider(value=s["size"], base=10, min=SIZE_LOG10_RANGE[0], max=SIZE_LOG10_RANGE[1],
                                     step=0.1, description="outlier M", readout_format=".3g", continuous_update=False,
                                     style=wide, layout=layout),
            "G": W.SelectionSlider(options=GROUP_SIZES, value=s["G"], description="group size G",
                                   continuous_update=False, style=wide, layout=layout),
            "c": W.FloatSlider(value=s["c"], min=CLIP_RANGE[0], max=CLIP_RANGE[1], step=0.1, description="clip c",
                               readout_format=".1f", continuous_update=False, style=wide, layout=layout),
            "estimator": W.Dropdown(options=list(ESTIMATOR_CHOICES), value=s["estimator"], description="estimator",
                                    style=wide, layout=layout),
        }
        self.data = engine.data(**self._values())
        self.readout = W.HTML(drift_readout_html(self.data))
        self.message = W.HTML("")
        self.figure = drift_views(self.data)
        c = self.controls
        controls = W.VBox([c["scenario"], W.HBox([W.VBox([c["rate"], c["size"]]), W.VBox([c["G"], c["c"], c["estimator"]])])])
        self.widget = W.VBox([controls, self.readout, self.message, self.figure])
        for w in self.controls.values():
            w.observe(self._on_change, names="value")

    def _values(self) -> dict[str, Any]:
        return {k: w.value for k, w in self.controls.items()}

    def update(self) -> DriftData | None:
        """Rerun for the current controls and move the views in place; None (and a message) on a bad setting."""
        from ..plots.drift import update_drift_views

        try:
            data = self.engine.data(**self._values())
        except ValueError as err:
            self.message.value = f"<span class='rg-error' style='color:#B00020'>{err}</span>"
            return None
        self.message.value = ""
        self.data = data
        update_drift_views(self.figure, data)
        self.readout.value = drift_readout_html(data)
        return data

    def _on_change(self, change: Mapping[str, Any]) -> None:
        self.update()

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        self.figure._repr_mimebundle_()  # refresh the FigureWidget's state for a new view (plotly.py #4998)
        return self.widget._repr_mimebundle_(**kwargs)


def drift_dashboard(*, engine: DriftEngine | None = None, **state: Any) -> DriftDashboard:
    """Build the notebook 05 dashboard, ready to display.

    Parameters
    ----------
    engine : DriftEngine, optional
        Share a cache of runs.
    **state
        Initial control values (defaults :data:`~robustgrpo.dashboards.drift.DEFAULT_STATE`).
    """
    return DriftDashboard(engine if engine is not None else DriftEngine(), state)
