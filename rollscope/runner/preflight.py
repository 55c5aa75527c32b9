"""What ``rollscope run`` checks before it imports verl, torch or a model: the dataset rows, the tool
file's shape, the ``--llm`` spec and ``--model`` directory, the agent and reward names. A mistake in
any of them is one line, within a second, instead of after the heavy imports.

Only what can be checked without importing the user's code: a tool class or reward function that
does not import is still reported, in one line, once it is loaded.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from rollscope.runner.config import RunConfig, RunConfigError
from rollscope.runner.dataset import load_rows

LLM_KINDS = ("embedded", "scripted", "sglang")
_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*([.:][A-Za-z_]\w*)$")


def check(config: RunConfig) -> list[dict[str, Any]]:
    """Raise ``RunConfigError`` (or the dataset's error) naming what is wrong; return the rows."""
    if config.dataset is None:
        raise RunConfigError(f"{config.name}: no dataset (set dataset=PATH)")
    rows = load_rows(config.resolve(config.dataset), config.limit)
    if config.tools:
        check_tool_file(config.resolve(config.tools))
    check_llm(config.llm, config.resolve(config.model) if config.model else None)
    if config.reward is not None and not _DOTTED.match(config.reward):
        raise RunConfigError(f"reward {config.reward!r}: expected 'module:function'")
    if "." in config.agent and not _DOTTED.match(config.agent):
        raise RunConfigError(f"agent {config.agent!r}: expected a registered loop name or 'module.Class'")
    return rows


def check_tool_file(path: str) -> None:
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise RunConfigError(f"{path}: cannot read tool config: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise RunConfigError(f"{path}: not valid YAML: {exc}") from None
    entries = doc.get("tools") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise RunConfigError(f"{path}: expected a top-level 'tools:' list")
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise RunConfigError(f"{path}: tools[{i}]: each entry must be a mapping, got {type(entry).__name__}")
        target = entry.get("class_name") or entry.get("function")
        if not isinstance(target, str) or not _DOTTED.match(target):
            raise RunConfigError(f"{path}: tools[{i}]: needs 'class_name: package.module.Class' or "
                                 f"'function: package.module:function', got {target!r}")  # fmt: skip
        if not isinstance(entry.get("config") or {}, dict):
            raise RunConfigError(f"{path}: tools[{i}] ({target}): config must be a mapping")


def check_llm(spec: str, model: str | None) -> None:
    """The ``--llm`` spec names a known kind, with what that kind needs (``--model`` for a server)."""
    server = spec.startswith(("http://", "https://"))
    kind, _, rest = spec.partition(":")
    if not server and kind not in LLM_KINDS:
        raise RunConfigError(f"--llm {spec}: unknown kind (embedded, http(s)://HOST:PORT, sglang:URL, scripted:FILE)")
    if kind == "scripted" and not Path(rest).is_file():
        raise RunConfigError(f"--llm {spec}: no replies file at {rest}")
    if (server or kind == "sglang") and model is None:
        raise RunConfigError(f"--llm {spec}: needs --model DIR, the served model's tokenizer directory "
                             "(model: in a config file)")  # fmt: skip
    if model is not None:
        path = Path(model)
        if not path.is_dir():
            raise RunConfigError(f"--model {model}: no such directory (a Hugging Face model or tokenizer directory)")
        if not any((path / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
            raise RunConfigError(f"--model {model}: no tokenizer there (tokenizer.json or tokenizer_config.json)")
