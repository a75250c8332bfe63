"""What the figure tests share: the drawn texts of a matplotlib figure and the pairs of them that overlap."""

from __future__ import annotations

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.transforms import Bbox


def _undrawn_tick_labels(fig: Figure) -> set[int]:
    """Ids of the tick labels matplotlib keeps but does not draw: those of ticks outside their axis's view (a locator
    places ticks past the limits; their labels stay "visible" but are never painted). The ticks drawn are those
    matplotlib's own draw selects (``Axis._update_ticks``, a private method: no public one says which are drawn)."""
    hidden = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            drawn = {id(t) for t in axis._update_ticks()}
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if id(tick) not in drawn:
                    hidden |= {id(tick.label1), id(tick.label2)}
    return hidden


def text_boxes(fig: Figure) -> list[tuple[str, Bbox]]:
    """The drawn, non-empty texts of ``fig`` (titles, labels, tick labels inside the view, legend entries, notes) with
    their boxes in pixels (a text's own box, widened to the patch drawn behind it where it has one)."""
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    undrawn = _undrawn_tick_labels(fig)

    def box(t: Text) -> Bbox:
        patch = t.get_bbox_patch()
        own = t.get_window_extent(renderer)
        return own if patch is None else Bbox.union([own, patch.get_window_extent(renderer)])

    return [(t.get_text(), box(t)) for t in fig.findobj(Text)
            if t.get_visible() and t.get_text().strip() and t.figure is fig and id(t) not in undrawn]


def clashes(fig: Figure) -> list[tuple[str, str]]:
    """Pairs of drawn texts of ``fig`` whose boxes overlap by more than half a pixel each way."""
    texts = text_boxes(fig)
    return [(a, b) for i, (a, box_a) in enumerate(texts) for b, box_b in texts[i + 1:]
            if box_a.overlaps(box_b) and Bbox.intersection(box_a, box_b).width > 0.5
            and Bbox.intersection(box_a, box_b).height > 0.5]
