"""A tool whose answer is 256 KB of ``password=`` pairs on one line: the shape that made redaction
superlinear (76 s for this answer, and its trajectory lost before the run ended)."""

import random
import string

from rollscope.tools import tool

_rnd = random.Random(0)
VALUES = ["".join(_rnd.choice(string.ascii_letters + string.digits) for _ in range(8)) for _ in range(14_000)]
PAIRS = " ".join(f"password={v}" for v in VALUES)


@tool
def read_config(name: str) -> str:
    """Read a configuration file.

    Args:
        name: the file's name
    """
    return PAIRS
