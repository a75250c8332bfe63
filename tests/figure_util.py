"""What the figure tests share: the drawn texts of a matplotlib figure and the pairs of them that overlap."""

from __future__ import annotations

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.transforms import Bbox


def text_boxes(fig: Figure) -> list[tuple[str, Bbox]]:
    """The drawn, non-empty texts of ``fig`` (titles, labels, tick labels, legend entries, notes) with their boxes in
    pixels (a text's own box, widened to the patch drawn behind it where it has one)."""
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)

    def box(t: Text) -> Bbox:
        patch = t.get_bbox_patch()
        own = t.get_window_extent(renderer)
        return own if patch is None else Bbox.union([own, patch.get_window_extent(renderer)])

    return [(t.get_text(), box(t)) for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip() and t.figure is fig]


def clashes(fig: Figure) -> list[tuple[str, str]]:
    """Pairs of drawn texts of ``fig`` whose boxes overlap by more than half a pixel each way."""
    texts = text_boxes(fig)
    return [(a, b) for i, (a, box_a) in enumerate(texts) for b, box_b in texts[i + 1:]
            if box_a.overlaps(box_b) and Bbox.intersection(box_a, box_b).width > 0.5
            and Bbox.intersection(box_a, box_b).height > 0.5]
