"""Decision analytics' charts: the figures as coordinates for server-drawn SVG (bars, stacked
bars and lines with gaps, on a "nice" y scale), and the words beside them. Pure functions, no
Django.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

CHART_WIDTH = 400
CHART_HEIGHT = 170


@dataclass(frozen=True)
class Box:
    x: float
    y: float
    width: float
    height: float


@dataclass(frozen=True)
class Tick:
    y: float
    label: str


@dataclass(frozen=True)
class Plot:
    """Where the plot area sits in the chart's viewBox."""

    left: float = 44  # room for the y labels
    top: float = 10
    right: float = CHART_WIDTH - 8
    bottom: float = CHART_HEIGHT - 22  # room for the first and last day

    @property
    def width(self) -> float:
        return self.right - self.left

    @property
    def height(self) -> float:
        return self.bottom - self.top


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 times 10^k at or above `value` (1 for nothing to show)."""
    if value <= 0 or math.isnan(value):
        return 1.0
    exponent = math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        candidate = step * 10**exponent
        if candidate >= value * (1 - 1e-12):
            return float(candidate)
    return float(10 ** (exponent + 1))  # pragma: no cover - the loop always returns


def count_ceiling(value: float, ticks: int = 4) -> float:
    """A top for whole counts: `ticks` equal steps of 1, 2 or 5 times 10^k, so every tick
    is a whole number (never "0.25 escalations")."""
    wanted = max(value, 1.0) / ticks
    exponent = max(math.floor(math.log10(wanted)), 0)
    for step in (1, 2, 5, 10):
        if step * 10**exponent >= wanted:
            return float(step * 10**exponent * ticks)
    return float(10 ** (exponent + 1) * ticks)  # pragma: no cover - the loop always returns


def y_of(value: float, top_value: float, plot: Plot) -> float:
    return round(plot.bottom - plot.height * (value / top_value), 2)


def ticks(top_value: float, plot: Plot, label: Any = None, count: int = 4) -> list[Tick]:
    """Evenly spaced y ticks from 0 to `top_value`, labelled with `label(value)`."""
    fmt = label or _number
    return [
        Tick(y_of(top_value * i / count, top_value, plot), fmt(top_value * i / count))
        for i in range(count + 1)
    ]


def slot(index: int, count: int, plot: Plot) -> tuple[float, float]:
    """The x and width of the index-th of `count` equal slots, with a gap between bars."""
    width = plot.width / max(count, 1)
    gap = min(2.0, width * 0.2)
    return round(plot.left + index * width + gap / 2, 2), round(max(width - gap, 0.5), 2)


def bars(values: Sequence[float], top_value: float, plot: Plot = Plot()) -> list[Box | None]:
    """One bar per value (None for zero, so nothing is drawn)."""
    return stacked_bars([values], top_value, plot)[0]


def stacked_bars(
    layers: Sequence[Sequence[float]], top_value: float, plot: Plot = Plot()
) -> list[list[Box | None]]:
    """Bars stacked bottom-up, layer by layer: out[layer][index]."""
    count = len(layers[0]) if layers else 0
    base = [0.0] * count
    out: list[list[Box | None]] = []
    for layer in layers:
        boxes: list[Box | None] = []
        for index, value in enumerate(layer):
            if not value:
                boxes.append(None)
                continue
            x, width = slot(index, count, plot)
            y_top = y_of(base[index] + value, top_value, plot)
            y_base = y_of(base[index], top_value, plot)
            boxes.append(Box(x, y_top, width, round(y_base - y_top, 2)))
            base[index] += value
        out.append(boxes)
    return out


def _centres(
    values: Sequence[float | None], top_value: float, plot: Plot
) -> list[tuple[float, float] | None]:
    """Each value's point at its slot's centre; None where a day has no value."""
    centres: list[tuple[float, float] | None] = []
    for index, value in enumerate(values):
        x, width = slot(index, len(values), plot)
        centres.append(None if value is None else (round(x + width / 2, 2), y_of(value, top_value, plot)))
    return centres


def line_path(values: Sequence[float | None], top_value: float, plot: Plot = Plot()) -> str:
    """An SVG path through each slot's centre; a None breaks the line (no data that day)."""
    parts: list[str] = []
    pen_down = False
    for point in _centres(values, top_value, plot):
        if point is not None:
            parts.append(f"{'L' if pen_down else 'M'}{point[0]} {point[1]}")
        pen_down = point is not None
    return " ".join(parts)


def line_points(
    values: Sequence[float | None], top_value: float, plot: Plot = Plot()
) -> list[tuple[float, float]]:
    """The dots of a line, so a lone day between gaps still shows."""
    return [point for point in _centres(values, top_value, plot) if point is not None]


def _number(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:g}"


def duration_label(seconds: float | None) -> str:
    """Seconds as people read them: 45 s, 2.5 min, 1.5 h."""
    if seconds is None:
        return "—"
    if seconds < 90:
        return f"{seconds:.3g} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.3g} min"
    return f"{seconds / 3600:.3g} h"


def count_label(count: float, singular: str, plural: str = "") -> str:
    """A count and its noun, singular for exactly one: "1 request", "0 requests", "2.5 hours"."""
    noun = singular if count == 1 else (plural or f"{singular}s")
    return f"{_number(count)} {noun}"


def percent_label(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.0f}%"


def max_of(values: Iterable[float | None]) -> float:
    return max((value for value in values if value is not None), default=0.0)
