"""verl's ``ppo_trainer`` config, composed with Hydra from verl's own packaged files: a run and
a replay build verl's agent loops from it exactly as training does."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from rollscope.runner.config import RunConfig, RunConfigError


def compose_config(model_dir: Path, overrides: list[str] = ()) -> Any:
    """verl's ppo_trainer config for ``model_dir``, with rollscope's test defaults, then ``overrides``."""
    import verl
    from hydra import compose, initialize_config_dir

    config_dir = Path(verl.__file__).parent / "trainer" / "config"
    base = [
        f"actor_rollout_ref.model.path={model_dir}",
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.prompt_length=512",
        "actor_rollout_ref.rollout.response_length=512",
        "actor_rollout_ref.rollout.multi_turn.format=hermes",
        "trainer.project_name=rollscope_tests",
        "trainer.experiment_name=cpu",
    ]
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return compose("ppo_trainer", overrides=[*base, *overrides])


def trainer_config(config: RunConfig, model_path: str) -> Any:
    """verl's ppo_trainer config with the run's lengths, multi-turn settings and extra overrides."""
    overrides = [
        f"actor_rollout_ref.rollout.prompt_length={config.prompt_length}",
        f"actor_rollout_ref.rollout.response_length={config.response_length}",
        f"trainer.project_name={config.project}",
        f"trainer.experiment_name={config.experiment or config.name}",
        *(f"actor_rollout_ref.rollout.multi_turn.{k}={_hydra_value(v)}" for k, v in config.multi_turn.items()),
        *config.verl,
    ]
    key = (str(model_path), tuple(overrides))
    if key not in _composed:  # Hydra takes ~0.5 s a composition; a replay suite asks for the same one often
        try:
            _composed[key] = compose_config(model_path, overrides)
        except Exception as exc:  # Hydra raises several types for a bad override
            raise RunConfigError(f"verl config: {exc}") from None
    return copy.deepcopy(_composed[key])


_composed: dict[tuple, Any] = {}


def _hydra_value(value: Any) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
