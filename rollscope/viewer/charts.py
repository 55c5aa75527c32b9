"""Per-step line charts as inline SVG: no JavaScript, no CDN, nothing fetched by the page."""

from __future__ import annotations

from dataclasses import dataclass

from rollscope.store.records import StepStats

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


def charts(steps: list[StepStats], extra: dict[str, dict] | None = None) -> list[Chart]:
    """One chart per metric of ``steps``, then one per ``extra`` series (title -> {step: value})."""
    rows = [s for s in steps if s.step is not None]
    out = []
    series_of = [(title, [(s.step, value(s)) for s in rows if value(s) is not None]) for title, value in METRICS]
    series_of += [(title, [(x, y) for x, y in values.items() if x is not None and y is not None])
                  for title, values in (extra or {}).items()]  # fmt: skip
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
        out.append(Chart(title, " ".join(f"{a:.1f},{b:.1f}" for a, b, _ in dots), dots, y0, y1, labels))
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
        if value is not None and isinstance(s.step, int | float):
            points.append((s.step, value))
    if not points:
        return Chart("", "", [], 0.0, 0.0, [], width, height)
    xs, ys = [x for x, _ in points], [y for _, y in points]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    y1 = y1 if y1 > y0 else y0 + 1.0
    pad = 3
    dots = [(pad + (width - 2 * pad) * ((x - x0) / (x1 - x0) if x1 > x0 else 0.5),
             height - pad - (height - 2 * pad) * (y - y0) / (y1 - y0), f"step {x}: {y:.3g}")
            for x, y in points]  # fmt: skip
    return Chart("", " ".join(f"{a:.1f},{b:.1f}" for a, b, _ in dots), dots, y0, y1, [], width, height)
