"""Arguments several commands share, defined once so they read the same everywhere."""

from __future__ import annotations

import argparse

DIR_HELP = "trace directory (default: $ROLLSCOPE_TRACE_DIR or ./rollscope_traces)"


def add_dir(p: argparse.ArgumentParser, help: str = DIR_HELP) -> None:
    """``--dir D``: the trace store a command reads."""
    p.add_argument("--dir", help=help)
