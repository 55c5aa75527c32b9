"""One insight signal at one step: what ``analysis.insights`` and ``analysis.hacking`` report."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

EXAMPLES = 5  # example trajectory ids a signal keeps per step


@dataclass
class Signal:
    name: str
    step: Any
    count: int  # trajectories (groups for zero_variance, failed calls for tool_errors)
    total: int  # what the share is of
    share: float | None
    examples: list[str]
    flagged: bool = False
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "step": self.step,
            "count": self.count,
            "total": self.total,
            "share": self.share,
            "flagged": self.flagged,
            "examples": self.examples,
            **self.detail,
        }
