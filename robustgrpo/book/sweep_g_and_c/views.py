"""Chapter 03's dashboard as plotly linked views, updated in place.

:func:`plot_linked_views` builds one plotly ``FigureWidget`` with four panels:

1. *rewards of one group*, sorted, uncontaminated samples in grey (above
   :data:`MAX_REWARD_MARKERS` of them, every k-th marker on a line through
   them all), contaminated samples highlighted, with the clean reward each of
   them had (hollow);
2. *that group's advantages per estimator*, in the same sample order, each
   estimator in its house colour (:data:`~robustgrpo.book.style.ESTIMATOR_COLORS`),
   hollow markers for the advantages the clean rewards would have given,
   dashed lines at ±c (above :data:`MAX_MARKERS` samples, every k-th marker);
3. *the advantages of the uncontaminated samples of every group* (of the
   groups computed so far, in a preview: the title says so), one step line
   per estimator (a histogram on a log count axis);
4. *the advantages of the contaminated samples*, the same way: where the
   outliers end up (a note in the panel when no sample is contaminated).
   Panels 3 and 4 share their advantage axis.

:func:`update_linked_views` moves the figure to new data by assigning trace
data inside ``fig.batch_update()``: the figure, its traces and its layout
stay the same objects, so a slider move sends only the changed values to
the browser. Every estimator of the catalogue gets its traces up front;
choosing estimators only toggles their visibility.

The figure has no fixed width: plotly sizes it to its container (``autosize``), so the
dashboard fills a Lab column or a Voilà page. Panel titles stay short enough not to meet at
the narrowest width the dashboard allows (:data:`MIN_WIDTH`); the numbers of the setting are
in the readout. Trace data is assigned as plain lists: a ``FigureWidget`` compares the
values it holds with the ones the browser sends back after every update (``if not value``),
which fails on a numpy array of more than one element and printed a traceback per move.

The data is any object with the attributes of
:class:`robustgrpo.book.sweep_g_and_c.engine.DashboardData` (see :class:`LinkedViewData`);
nothing here computes a statistic.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Protocol, Sequence

import numpy as np

from robustgrpo.advantages import ESTIMATORS
from robustgrpo.book.interactive import CLEAN_SAMPLE_COLOR, CONTAMINATED_COLOR, autosized, figure_widget, plotly_values, trace_by_meta
from robustgrpo.book.style import estimator_color

__all__ = ["EMPTY_BIN", "FIGURE_HEIGHT", "MARGIN", "MAX_MARKERS", "MAX_REWARD_MARKERS", "LinkedViewData", "plot_linked_views", "update_linked_views"]

#: Height drawn for an empty histogram bin: below the count axis, so a line drops out of view there.
EMPTY_BIN = 0.5
#: Height of the linked views (px): with the controls beside them, on one 1280 x 800 screen.
FIGURE_HEIGHT = 560
#: The most markers each estimator's advantages (and their hollow clean twins) draw: above it, plotly draws every
#: k-th (its ``marker.maxdisplayed``, staggered between traces), the line still through every sample. Each marker is
#: an SVG element that plotly styles on every redraw, and every move redraws the whole figure (a data or a layout
#: edit alike), about 0.1 ms per marker in the page. At G = 256 the panel's 2,000 markers were most of a redraw (key
#: press to the first change 304 -> 143 ms for a c move with 64, measured by the browser test); 32 of them and 64
#: reward markers took a redraw in the page from 116-120 to 76-83 ms. 256 markers on a panel a few hundred pixels
#: wide overlap anyway.
MAX_MARKERS = 32
#: The figure's margins (px): wide enough that no setting's labels push them (see :func:`plot_linked_views`).
MARGIN = dict(l=70, r=20, t=95, b=55)
#: The most uncontaminated reward markers the rewards panel draws: above it every k-th, on a grey line through
#: every reward (every contaminated sample and its clean reward keep their markers).
MAX_REWARD_MARKERS = 64

_PARTS = {"uncontaminated": (2, 3), "contaminated": (3, 4)}  # histogram part -> (subplot row, axis suffix)
_NO_HITS = "no_hits"  # name of the note shown in the contaminated panel when nothing is hit


class LinkedViewData(Protocol):
    """What :func:`plot_linked_views` draws (:class:`robustgrpo.book.sweep_g_and_c.engine.DashboardData` has it all)."""

    G: int
    c: float
    rate: float
    size: float
    group: int
    n_groups: int
    methods: tuple[str, ...]
    clip_methods: tuple[str, ...]
    group_rewards: np.ndarray
    group_clean_rewards: np.ndarray
    group_contaminated: np.ndarray
    group_advantages: Mapping[str, np.ndarray]
    group_clean_advantages: Mapping[str, np.ndarray]
    bin_edges: np.ndarray
    counts_uncontaminated: Mapping[str, np.ndarray]
    counts_contaminated: Mapping[str, np.ndarray]
    contaminated_fraction: float
    computed_groups: int


def _indices(values: Any) -> list[int]:
    """Integers (sample indices, counts) as a plain list of ``int``."""
    return [int(v) for v in np.asarray(values).tolist()]


def _heights(counts: np.ndarray) -> list[float | None]:
    """Counts as line heights: empty bins at :data:`EMPTY_BIN`, under the visible part of the log axis."""
    return plotly_values(np.maximum(np.asarray(counts, dtype=np.float64), EMPTY_BIN))


def plot_linked_views(
    data: LinkedViewData, *, methods: Sequence[str] | None = None, height: int = FIGURE_HEIGHT
) -> Any:
    """Build the four linked views as one plotly ``FigureWidget`` and draw ``data`` in it.

    Parameters
    ----------
    data : LinkedViewData
        A :class:`robustgrpo.book.sweep_g_and_c.engine.DashboardData`.
    methods : sequence of str, optional
        Estimators that get traces (default: the whole catalogue, so any
        later choice is a visibility toggle).
    height : int
        Figure height in pixels; the width follows the container.

    Returns
    -------
    plotly.graph_objects.FigureWidget
        Built complete before it becomes a widget, so it also renders inside
        ipywidgets containers. Traces carry a ``meta`` key
        (:func:`trace_by_meta`): ``group:clean``, ``group:contaminated``,
        ``group:before``, ``adv:<method>``, ``adv_clean:<method>``,
        ``adv:clip``, ``hist:<method>:uncontaminated``,
        ``hist:<method>:contaminated``; histogram traces hold the bin counts
        in ``customdata``. The first four annotations are the panel titles;
        the one named ``no_hits`` says so when no sample is contaminated.

    Raises
    ------
    ValueError
        If ``data`` shows an estimator outside ``methods``.
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    names = list(ESTIMATORS) if methods is None else list(methods)
    missing = [m for m in data.methods if m not in names]
    if missing:
        raise ValueError(f"data shows estimator(s) {missing} that the figure has no traces for; add them to methods")
    base = make_subplots(
        rows=3,
        cols=2,
        specs=[[{}, {}], [{"colspan": 2}, None], [{"colspan": 2}, None]],
        subplot_titles=("rewards of group 0", "its advantages", "uncontaminated samples, all groups",
                        "contaminated samples, all groups"),
        vertical_spacing=0.16,
        horizontal_spacing=0.12,
        row_heights=[0.4, 0.3, 0.3],
    )
    fig = go.Figure(base)  # filled as a plain figure, then wrapped: see the end of this function
    marker_line = dict(width=1, color="white")
    fig.add_trace(go.Scatter(meta="group:clean", name="uncontaminated sample", mode="markers", legendgroup="samples",
                             marker=dict(color=CLEAN_SAMPLE_COLOR, size=7, line=marker_line, maxdisplayed=MAX_REWARD_MARKERS),
                             line=dict(color=CLEAN_SAMPLE_COLOR, width=1),
                             hovertemplate="sample %{customdata}: reward %{y:.4g}<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Scatter(meta="group:before", name="its clean reward", mode="markers", legendgroup="samples",
                             marker=dict(color=CONTAMINATED_COLOR, size=8, symbol="circle-open"),
                             hovertemplate="sample %{customdata}: clean reward %{y:.4g}<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Scatter(meta="group:contaminated", name="contaminated sample", mode="markers", legendgroup="samples",
                             marker=dict(color=CONTAMINATED_COLOR, size=10, symbol="diamond", line=marker_line),
                             hovertemplate="sample %{customdata}: reward %{y:.4g} (contaminated)<extra></extra>"),
                  row=1, col=1)
    for m in names:
        color = estimator_color(m)
        fig.add_trace(go.Scatter(meta=f"adv:{m}", name=m, legendgroup=m, mode="lines+markers",
                                 line=dict(color=color, width=1.5), marker=dict(color=color, size=6, maxdisplayed=MAX_MARKERS),
                                 hovertemplate=f"{m}: sample %{{customdata}}, A = %{{y:.4g}}<extra></extra>"),
                      row=1, col=2)
        fig.add_trace(go.Scatter(meta=f"adv_clean:{m}", name=f"{m} (clean rewards)", legendgroup=m, showlegend=False,
                                 mode="markers", marker=dict(color=color, size=7, symbol="circle-open", maxdisplayed=MAX_MARKERS),
                                 hovertemplate=f"{m} on clean rewards: sample %{{customdata}}, A = %{{y:.4g}}<extra></extra>"),
                      row=1, col=2)
    fig.add_trace(go.Scatter(meta="adv:clip", name="±c", mode="lines", hoverinfo="skip",
                             line=dict(color="#555555", dash="dash", width=1)), row=1, col=2)
    for part, (row, _axis) in _PARTS.items():
        for m in names:
            fig.add_trace(go.Scatter(meta=f"hist:{m}:{part}", name=f"{m}, {part}", legendgroup=m, showlegend=False,
                                     mode="lines", line=dict(color=estimator_color(m), width=1.6, shape="hvh"),
                                     hovertemplate=f"{m}, {part}: %{{customdata}} samples at A ≈ %{{x:.2f}}<extra></extra>"),
                          row=row, col=1)
    clip_lines = [
        dict(type="line", xref=f"x{axis}", yref=f"y{axis} domain", y0=0, y1=1, x0=sign, x1=sign,
             line=dict(color="#555555", dash="dash", width=1))
        for _row, axis in _PARTS.values() for sign in (-1, 1)
    ]
    _row, hit_axis = _PARTS["contaminated"]
    fig.add_annotation(name=_NO_HITS, text="", visible=False, showarrow=False, xref=f"x{hit_axis} domain",
                       yref=f"y{hit_axis} domain", x=0.5, y=0.5, font=dict(size=13, color="#555555"))
    fig.update_layout(
        template="plotly_white",
        legend=dict(orientation="h", yanchor="bottom", y=1.07, x=0, font=dict(size=11), traceorder="normal"),
        shapes=clip_lines,
        hovermode="closest",
    )
    # room for a legend of two rows (narrow windows) above; l: a preview's count labels "1000" are wider than the
    # full data's "10k", which moved the margin on every new G (see autosized)
    autosized(fig, height=height, margin=MARGIN)
    fig.update_annotations(font_size=13, selector=dict(name=None))  # the panel titles
    fig.update_xaxes(title_text="sample, sorted by reward", row=1, col=1)
    fig.update_yaxes(title_text="reward", row=1, col=1)
    fig.update_xaxes(title_text="sample (hollow: on clean rewards)", row=1, col=2)
    fig.update_yaxes(title_text="advantage A", row=1, col=2)
    r = float(data.bin_edges[-1])
    fig.update_xaxes(range=[-r, r], matches="x4", row=2, col=1)
    fig.update_xaxes(title_text=f"advantage A (edge bins hold all beyond ±{r:g}; click a line to show a group)",
                     range=[-r, r], row=3, col=1)
    for row, _axis in _PARTS.values():
        fig.update_yaxes(title_text="samples", type="log", row=row, col=1)
    update_linked_views(fig, data)
    # A FigureWidget sends its state to the browser when it is constructed (or displayed on its own);
    # inside an ipywidgets container (the dashboard's VBox) traces added after construction never reach
    # a view created later (plotly.py issue #4998). Built complete, the widget's first state is the figure.
    return figure_widget(fig)


def _restyle_changed(fig: Any, traces: Mapping[str, Any], values: Mapping[str, Mapping[str, Any]]) -> None:
    """Send the trace values that differ from what the traces hold, as one ``plotly_restyle``.

    ``values``: trace meta -> property -> new value (plain lists, booleans). Unchanged values are
    sent as plotly's ``Undefined`` (left as they are, in Python and in the browser). Restyle data
    is not validated element by element as an assignment like ``trace.y = ...`` is, which took
    most of an update's time: the values must already be what plotly stores (lists of floats,
    ints or None; see :func:`plotly_values`).

    Inside ``fig.batch_update()`` the values join the batch's trace edits instead (where plotly
    keeps the assignments it batches, applied the same way, unvalidated, when the batch ends), so
    the batch's one ``plotly_update`` message carries them with the layout: the page redraws the
    figure once per move, not once for the traces and again for the layout.
    """
    from plotly.basedatatypes import Undefined

    index = {t.meta: i for i, t in enumerate(fig.data)}
    changed: dict[int, dict[str, Any]] = {}
    for meta, props in values.items():
        trace = traces[meta]
        for name, value in props.items():
            held = trace[name]
            same = held == value if not isinstance(held, (list, tuple)) else (isinstance(value, list) and list(held) == value)
            if not same:
                changed.setdefault(index[meta], {})[name] = value
    if not changed:
        return
    batch = getattr(fig, "_batch_trace_edits", None) if getattr(fig, "_in_batch_mode", False) else None
    if isinstance(batch, dict):  # (plotly's own batch: an OrderedDict of trace index -> {property: value})
        for i, props in changed.items():
            batch.setdefault(i, {}).update(props)
        return
    ids = sorted(changed)
    names = sorted({name for props in changed.values() for name in props})
    fig.plotly_restyle({name: [changed[i].get(name, Undefined) for i in ids] for name in names}, ids)


def update_linked_views(fig: Any, data: LinkedViewData) -> None:
    """Move a :func:`plot_linked_views` figure to ``data``, in place.

    Sends the traces' ``x``, ``y``, ``customdata`` and ``visible`` (and the
    rewards panel's ``mode``: a line through the uncontaminated rewards above
    :data:`MAX_REWARD_MARKERS` of them) that changed (as lists,
    :func:`plotly_values`) in one restyle, then the ±c lines, the count
    axes' ranges, the first panel's title and the no-contamination note inside
    one ``fig.batch_update()``; no trace is added or removed, so the figure
    and its trace objects stay the same.

    Raises
    ------
    ValueError
        If the figure has no traces for an estimator ``data`` shows.
    """
    traces = trace_by_meta(fig)
    missing = [m for m in data.methods if f"adv:{m}" not in traces]
    if missing:
        raise ValueError(f"the figure has no traces for estimator(s) {missing}; rebuild it with plot_linked_views(methods=...)")
    order = np.argsort(np.asarray(data.group_rewards), kind="stable")
    x = np.arange(1, data.G + 1)
    rewards = np.asarray(data.group_rewards)[order]
    clean_rewards = np.asarray(data.group_clean_rewards)[order]
    hit = np.asarray(data.group_contaminated, dtype=bool)[order]
    centres = plotly_values(0.5 * (np.asarray(data.bin_edges[:-1]) + np.asarray(data.bin_edges[1:])))
    chosen = set(data.methods)
    has_clip = bool(data.clip_methods)
    c = float(data.c)
    sources = {"uncontaminated": data.counts_uncontaminated, "contaminated": data.counts_contaminated}
    peak = {part: max([0] + [int(np.max(counts[m])) for m in data.methods]) for part, counts in sources.items()}
    order_ids = _indices(order)
    x_all = plotly_values(x)
    values: dict[str, dict[str, Any]] = {
        "group:clean": dict(x=plotly_values(x[~hit]), y=plotly_values(rewards[~hit]), customdata=_indices(order[~hit]),
                            mode="markers" if int((~hit).sum()) <= MAX_REWARD_MARKERS else "lines+markers"),
        "group:contaminated": dict(x=plotly_values(x[hit]), y=plotly_values(rewards[hit]), customdata=_indices(order[hit])),
        "group:before": dict(x=plotly_values(x[hit]), y=plotly_values(clean_rewards[hit]), customdata=_indices(order[hit])),
    }
    for key in traces:
        kind, _, rest = key.partition(":")
        method, _, part = rest.partition(":")
        if kind in ("adv", "adv_clean") and method != "clip":
            values[key] = dict(visible=method in chosen)
            if method in chosen:
                source = data.group_advantages if kind == "adv" else data.group_clean_advantages
                values[key].update(x=x_all, y=plotly_values(np.asarray(source[method])[order]), customdata=order_ids)
        elif kind == "hist":
            values[key] = dict(visible=method in chosen)
            if method in chosen:
                counts = np.asarray(sources[part][method])
                values[key].update(x=centres, y=_heights(counts), customdata=_indices(counts))
    _restyle_changed(fig, traces, values)
    with fig.batch_update():
        t = traces["adv:clip"]
        t.visible = has_clip
        t.x = [0.5, data.G + 0.5, None, 0.5, data.G + 0.5]
        t.y = [c, c, None, -c, -c]
        t.name = f"±c = ±{c:g}"
        for shape, sign in zip(fig.layout.shapes, (-1, 1) * len(_PARTS)):
            shape.update(x0=sign * c, x1=sign * c, visible=has_clip)
        for part, (_row, axis) in _PARTS.items():
            # an empty panel (no contaminated sample at rate 0) shows no count ticks, only its note
            fig.layout[f"yaxis{axis}"].update(range=[math.log10(0.8), math.log10(2.0 * max(peak[part], 1))],
                                              showticklabels=peak[part] > 0)
        fig.layout.annotations[0].text = f"rewards of group {data.group}"
        groups = ("all groups" if data.computed_groups == data.n_groups
                  else f"{data.computed_groups:,} of {data.n_groups:,} groups (preview)")
        for title, part in zip(fig.layout.annotations[2:4], _PARTS):
            title.text = f"{part} samples, {groups}"
        note = next(a for a in fig.layout.annotations if a.name == _NO_HITS)
        note.visible = data.contaminated_fraction == 0
        note.text = ("no contaminated samples at rate 0" if data.rate == 0
                     else f"no sample of the {data.computed_groups:,} groups is hit at rate {data.rate:g}")
