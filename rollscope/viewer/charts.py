"""Per-step line charts as inline SVG: no JavaScript, no CDN, nothing fetched by the page."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rollscope.trajectory.records import StepStats

WIDTH, HEIGHT, PAD = 420, 150, 34
METRICS = [
    ("mean reward", lambda s: s.mean_reward),
    ("tool calls per trajectory", lambda s: s.tool_calls_per_trajectory),
    ("error rate", lambda s: s.error_rate),
    ("turns per trajectory", lambda s: s.turns_per_trajectory),
    ("tokens per trajectory", lambda s: s.tokens_per_trajectory),
]


@dataclass
class Chart:
    title: str
    points: str  # SVG polyline points
    dots: list[tuple[float, float, str]]  # x, y, tooltip
    y_min: float
    y_max: float
    x_labels: list[tuple[float, str]]
    width: int = WIDTH
    height: int = HEIGHT
    boxes: list[Box] = field(default_factory=list)  # a distribution chart's, one per step
    links: list[str] = field(default_factory=list)  # where each dot leads (its step's trajectories), if anywhere
    lines: list[Line] = field(default_factory=list)  # an overlaid chart's further series, each with its name
    marks: list[Mark] = field(default_factory=list)  # steps marked on the x axis (a signal's onset)


@dataclass
class Line:
    name: str
    points: str
    dots: list[tuple[float, float, str]]
    css: str  # its class: its colour on the page


@dataclass
class Mark:
    x: float
    label: str
    link: str


@dataclass
class Box:
    """One step of a distribution: whiskers at min and max, the box between the quartiles."""

    x: float
    low: float  # y of the minimum (SVG: larger is lower)
    q1: float
    median: float
    q3: float
    high: float
    tip: str


def _quantile(ordered: list[float], q: float) -> float:
    at = q * (len(ordered) - 1)
    i = int(at)
    return ordered[i] + (ordered[min(i + 1, len(ordered) - 1)] - ordered[i]) * (at - i)


def distribution(title: str, values: dict[int, list[float]]) -> Chart:
    """Per step, a box of ``values`` (min, quartiles, max): the spread the mean hides, e.g. of the
    advantages a step trained on."""
    rows = {x: sorted(y for y in v if _finite(y)) for x, v in values.items() if x is not None}
    rows = {x: v for x, v in rows.items() if v}
    if not rows:
        return Chart(title, "", [], 0.0, 0.0, [])
    xs = sorted(rows)
    y0, y1 = min(min(v) for v in rows.values()), max(max(v) for v in rows.values())
    y1 = y1 if y1 > y0 else y0 + 1.0
    x0, x_end = xs[0], xs[-1]

    def px(x: float) -> float:
        return PAD + (WIDTH - 2 * PAD) * ((x - x0) / (x_end - x0) if x_end > x0 else 0.5)

    def py(y: float) -> float:
        return HEIGHT - PAD + (2 * PAD - HEIGHT) * (y - y0) / (y1 - y0)

    boxes = []
    for x in xs:
        v = rows[x]
        q1, median, q3 = (_quantile(v, q) for q in (0.25, 0.5, 0.75))
        tip = f"step {x}: {len(v)} values, min {v[0]:.3g}, median {median:.3g}, max {v[-1]:.3g}"
        boxes.append(Box(px(x), py(v[0]), py(q1), py(median), py(q3), py(v[-1]), tip))
    labels = [(px(x), str(x)) for x in sorted({x0, x_end, xs[len(xs) // 2]})]
    return Chart(title, "", [], y0, y1, labels, boxes=boxes)


def charts(steps: list[StepStats], extra: dict[str, dict] | None = None) -> list[Chart]:
    """One chart per metric of ``steps``, then one per ``extra`` series (title -> {step: value})."""
    rows = [s for s in steps if s.step is not None]
    series_of = [(title, [(s.step, value(s)) for s in rows if _finite(value(s))]) for title, value in METRICS]
    return _lines(series_of) + series_charts(extra or {})


def series_charts(extra: dict[str, dict], link: Callable[[Any], str] | None = None) -> list[Chart]:
    """One line chart per series (title -> {step: value}); ``link``: where a step's dot leads."""
    return _lines(
        [
            (title, [(x, y) for x, y in values.items() if x is not None and _finite(y)])
            for title, values in extra.items()
        ],
        link,
    )


def _lines(
    series_of: list[tuple[str, list[tuple[float, float]]]], link: Callable[[Any], str] | None = None
) -> list[Chart]:
    out = []
    for title, series in series_of:
        if not series:
            out.append(Chart(title, "", [], 0.0, 0.0, []))
            continue
        xs = [x for x, _ in series]
        ys = [y for _, y in series]
        x0, x1 = min(xs), max(xs)
        y0, y1 = min(0.0, min(ys)), max(ys)
        y1 = y1 if y1 > y0 else y0 + 1.0

        def px(x: float, x0: float = x0, x1: float = x1) -> float:
            return PAD + (WIDTH - 2 * PAD) * ((x - x0) / (x1 - x0) if x1 > x0 else 0.5)

        def py(y: float, y0: float = y0, y1: float = y1) -> float:
            return HEIGHT - PAD + (2 * PAD - HEIGHT) * (y - y0) / (y1 - y0)

        dots = [(px(x), py(y), f"step {x}: {y:.3g}") for x, y in series]
        labels = [(px(x), str(x)) for x in sorted({x0, x1, xs[len(xs) // 2]})]
        out.append(
            Chart(
                title,
                " ".join(f"{a:.1f},{b:.1f}" for a, b, _ in dots),
                dots,
                y0,
                y1,
                labels,
                links=[link(x) for x, _ in series] if link is not None else [],
            )
        )
    return out


def sparkline(series: list, width: int = 160, height: int = 28) -> Chart:
    """A signal's trend over steps as a small line: its share per step, or for a drift its mean."""
    points = []
    for s in series:
        value = s.share
        if s.name == "length_drift":
            value = s.detail.get("mean_tokens")
        elif s.name == "logprob_drift":
            value = s.detail.get("mean_logprob")
        if _finite(value) and isinstance(s.step, int | float):
            points.append((s.step, value))
    if not points:
        return Chart("", "", [], 0.0, 0.0, [], width, height)
    xs, ys = [x for x, _ in points], [y for _, y in points]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    y1 = y1 if y1 > y0 else y0 + 1.0
    pad = 3
    dots = [
        (
            pad + (width - 2 * pad) * ((x - x0) / (x1 - x0) if x1 > x0 else 0.5),
            height - pad - (height - 2 * pad) * (y - y0) / (y1 - y0),
            f"step {x}: {y:.3g}",
        )
        for x, y in points
    ]
    return Chart("", " ".join(f"{a:.1f},{b:.1f}" for a, b, _ in dots), dots, y0, y1, [], width, height)


def overlaid(
    title: str,
    series: dict[str, dict[Any, float]],
    marks: list[tuple[Any, str, str]] | None = None,
    width: int = 2 * WIDTH,
    height: int = 3 * HEIGHT // 2,
) -> Chart:
    """Several series over the same steps in one chart, on one y axis (the run's reward beside each
    rescoring's), with ``marks`` (step, label, link) drawn as vertical rules: where a signal fired."""
    points = {
        name: sorted((x, y) for x, y in values.items() if isinstance(x, int | float) and _finite(y))
        for name, values in series.items()
    }
    xs = [x for p in points.values() for x, _ in p] + [x for x, _, _ in marks or [] if isinstance(x, int | float)]
    ys = [y for p in points.values() for _, y in p]
    if not xs or not ys:
        return Chart(title, "", [], 0.0, 0.0, [])
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(0.0, min(ys)), max(ys)
    y1 = y1 if y1 > y0 else y0 + 1.0

    def px(x: float) -> float:
        return PAD + (width - 2 * PAD) * ((x - x0) / (x1 - x0) if x1 > x0 else 0.5)

    def py(y: float) -> float:
        return height - PAD + (2 * PAD - height) * (y - y0) / (y1 - y0)

    lines = []
    for i, (name, p) in enumerate(points.items()):
        dots = [(px(x), py(y), f"{name}, step {x}: {y:.3g}") for x, y in p]
        lines.append(Line(name, " ".join(f"{a:.1f},{b:.1f}" for a, b, _ in dots), dots, f"series-{i % 4}"))
    steps = sorted({x for x in xs})
    labels = [(px(x), str(x)) for x in steps] if len(steps) <= 30 else [(px(x), str(x)) for x in (x0, x1)]
    chart = Chart(title, "", [], y0, y1, labels, width, height, lines=lines)
    chart.marks = [Mark(px(x), label, link) for x, label, link in marks or [] if isinstance(x, int | float)]
    return chart


def _finite(y: Any) -> bool:
    """A point a chart can draw: a number, not nan or ±inf (a chart with one would draw no line)."""
    return isinstance(y, int | float) and math.isfinite(y)
