"""What a paper figure must pass, read off its matplotlib artists (issue 30 item 7): every
text at `FONT_FLOOR_PT` or more, inside the figure, and clear of every other text (tick
labels of one axis, titles, axis labels, legend entries); one legend. `saved_figures` keeps
the figures a call saves, so a test can check those."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import matplotlib.figure
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.text import Text

from experiments.report.figures import FONT_FLOOR_PT


@contextmanager
def saved_figures() -> Iterator[list[Any]]:
    """The figures `Figure.savefig` is called on while the block runs (each once)."""
    seen: list[Any] = []
    save = matplotlib.figure.Figure.savefig

    def keep(fig: Any, *args: Any, **kwargs: Any) -> Any:
        if not any(f is fig for f in seen):
            seen.append(fig)
        return save(fig, *args, **kwargs)

    matplotlib.figure.Figure.savefig = keep  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        matplotlib.figure.Figure.savefig = save  # type: ignore[method-assign]


def drawn_texts(fig: Any) -> list[Text]:
    """The texts the figure shows: visible, not empty, in a visible axes, and tick labels
    only of ticks inside their axis' view."""
    if not hasattr(fig.canvas, "get_renderer"):  # closed by pyplot: draw it with Agg again
        FigureCanvasAgg(fig)
    fig.canvas.draw()
    ticks: set[int] = set()
    shown: list[Text] = []
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            slack = 1e-9 * max(abs(lo), abs(hi), 1.0)
            for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()]:
                inside = lo - slack <= tick.get_loc() <= hi + slack
                for label in (tick.label1, tick.label2):
                    ticks.add(id(label))
                    if inside and ax.get_visible() and _shows(label):
                        shown.append(label)
    for text in fig.findobj(Text):
        if id(text) in ticks or not _shows(text):
            continue
        if text.axes is not None and not text.axes.get_visible():
            continue
        shown.append(text)
    return shown


def _shows(text: Text) -> bool:
    return bool(text.get_visible() and text.get_text().strip())


def layout_problems(fig: Any) -> list[str]:
    """Each text under the font floor, outside the figure, or overlapping another text."""
    texts = drawn_texts(fig)
    renderer = fig.canvas.get_renderer()
    page = fig.bbox
    problems = []
    boxes = []
    for t in texts:
        box = t.get_window_extent(renderer)
        boxes.append(box)
        if t.get_fontsize() < FONT_FLOOR_PT - 1e-9:
            problems.append(f"{t.get_text()!r}: {t.get_fontsize()} pt")
        if (box.x0 < page.x0 - 1 or box.x1 > page.x1 + 1 or box.y0 < page.y0 - 1
                or box.y1 > page.y1 + 1):
            problems.append(f"{t.get_text()!r}: outside the figure")
    for i, a in enumerate(boxes):
        for j in range(i + 1, len(boxes)):
            b = boxes[j]
            if min(a.x1, b.x1) - max(a.x0, b.x0) > 1 and min(a.y1, b.y1) - max(a.y0, b.y0) > 1:
                problems.append(f"{texts[i].get_text()!r} overlaps {texts[j].get_text()!r}")
    return problems


def legends(fig: Any) -> int:
    """How many legends the figure has (its own and its axes')."""
    return len(fig.legends) + sum(ax.get_legend() is not None for ax in fig.axes)
