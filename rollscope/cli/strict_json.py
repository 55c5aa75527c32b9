"""What ``--json`` prints: strict JSON (RFC 8259), which every parser reads. A number that is not
finite (a reward of inf, a mean of nothing) has no JSON form: it is written as null, and how many
were is said on stderr, so nothing changes without a word."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable
from typing import Any


def print_json(value: Any) -> None:
    """``value`` as indented strict JSON on stdout (objects it does not know as their text)."""
    found = [0]
    text = json.dumps(_finite(value, found), indent=1, default=str, allow_nan=False)
    print(text)
    if found[0]:
        print(f"{found[0]} non-finite number(s) (inf, -inf, nan) written as null", file=sys.stderr)


def print_json_streamed(fields: dict[str, Any], key: str, items: Iterable[Any]) -> None:
    """``print_json({**fields, key: list(items)})``, the list written item by item as ``items``
    yields them: what is held at once is one item, however long the list."""
    found = [0]
    out = sys.stdout
    head = json.dumps(_finite(fields, found), indent=1, default=str, allow_nan=False)
    out.write(f"{head[:-2]},\n " if fields else "{\n ")
    out.write(f"{json.dumps(key)}: [")
    for n, item in enumerate(items):
        out.write(",\n" if n else "\n")
        out.write(json.dumps(_finite(item, found), indent=1, default=str, allow_nan=False))
    out.write("\n ]\n}\n")
    out.flush()
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
