"""Helpers for your tests of a loop, a tool or a reward; production code never imports them.

- ``make_model_dir`` and ``compose_config``: verl's real agent-loop classes on a CPU — a model
  directory made on the spot and verl's own packaged ``ppo_trainer`` config composed with Hydra.
  Pair them with ``rollscope.llm.ScriptedLLM``.
- ``replay``: a stored trajectory as a regression test.
"""

from __future__ import annotations

from typing import Any

from rollscope.llm.tokenizer_dir import make_model_dir
from rollscope.runner.trainer_config import compose_config

__all__ = ["compose_config", "make_model_dir", "replay"]


def replay(trajectory_id: str, store: str | None = None, *, config: str | None = None, tokenizer: Any = None) -> Any:
    """A stored trajectory as a regression test: every model turn from the record, tools, loop and
    reward run for real; the outcome's ``ok`` is False, with ``differences`` naming each changed
    tool result, final response or reward (``rollscope replay ID --check``)."""
    from rollscope.runner.replay import replay as run_replay

    return run_replay(trajectory_id, store=store, config=config, check=True, tokenizer=tokenizer)
