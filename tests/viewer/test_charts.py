"""The per-step charts (``viewer.charts``) draw the points they can: a nan or an infinite value
(a reward of inf, a mean of nothing) is left out of its line, never written into the SVG."""

import math

from rollscope.analysis.signal import Signal
from rollscope.viewer.charts import distribution, overlaid, series_charts, sparkline


def drawn(chart):
    return [p for p in chart.points.split() if p] + [f"{x},{y}" for line in chart.lines for x, y, _ in line.dots]


def test_non_finite_points_are_left_out_of_every_kind_of_chart():
    values = {1: 0.5, 2: math.nan, 3: math.inf, 4: -math.inf, 5: 0.75}
    [line] = series_charts({"reward": values})
    assert len(line.dots) == 2 and "nan" not in line.points and "inf" not in line.points
    both = overlaid("reward and a rescoring", {"run": values, "check": {1: 0.0, 2: math.nan}})
    assert [len(line.dots) for line in both.lines] == [2, 1]
    assert all(math.isfinite(v) for p in drawn(both) for v in map(float, p.split(",")))
    spark = sparkline([Signal("truncated", s, 1, 2, v, []) for s, v in values.items()])
    assert len(spark.dots) == 2
    boxes = distribution("advantages", {1: [0.1, math.nan, 0.3], 2: [math.inf], 3: [0.2]})
    assert len(boxes.boxes) == 2 and all(math.isfinite(b.median) for b in boxes.boxes)
