"""Where rollscope keeps what it can rebuild (a scripted model's directory, tokenizers, verl's
composed config, spooled trace events): ``$XDG_CACHE_HOME/rollscope``, else ``~/.cache/rollscope``."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rollscope"
