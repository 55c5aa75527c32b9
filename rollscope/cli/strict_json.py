"""What ``--json`` prints: strict JSON (RFC 8259), which every parser reads. A number that is not
finite (a reward of inf, a mean of nothing) has no JSON form: it is written as null, and how many
were is said on stderr, so nothing changes without a word."""

from __future__ import annotations

import json
import math
import sys
from typing import Any


def print_json(value: Any) -> None:
    """``value`` as indented strict JSON on stdout (objects it does not know as their text)."""
    found = [0]
    text = json.dumps(_finite(value, found), indent=1, default=str, allow_nan=False)
    print(text)
    if found[0]:
        print(f"{found[0]} non-finite number(s) (inf, -inf, nan) written as null", file=sys.stderr)


def _finite(value: Any, found: list[int]) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        found[0] += 1
        return None
    if isinstance(value, dict):
        return {k: _finite(v, found) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v, found) for v in value]
    return value
