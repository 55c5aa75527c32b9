"""verl's ``ppo_trainer`` config, composed with Hydra from verl's own packaged files: a run and
a replay build verl's agent loops from it exactly as training does.

Composing it costs Hydra ~0.5 s, the most a short ``rollscope run`` spent besides importing verl;
so each composition is kept as YAML in rollscope's cache, under a digest of everything it came from
(verl's config files as they are on disk, the overrides, OmegaConf's and Hydra's versions), and
read back in ~50 ms. A cached file that cannot be read is composed again and rewritten.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

import yaml

from rollscope._cache import cache_dir
from rollscope.runner.config import RunConfig, RunConfigError

log = logging.getLogger("rollscope.runner")


def compose_config(model_dir: Path, overrides: list[str] = ()) -> Any:
    """verl's ppo_trainer config for ``model_dir``, with rollscope's test defaults, then ``overrides``."""
    import hydra
    import omegaconf
    import verl

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
    overrides = [*base, *overrides]
    files = sorted((str(p.relative_to(config_dir)), p.stat().st_mtime_ns, p.stat().st_size)
                   for p in config_dir.rglob("*.yaml"))  # fmt: skip
    key = json.dumps([str(config_dir), files, overrides, omegaconf.__version__, hydra.__version__])
    cached = cache_dir() / "verl-config" / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.yaml"
    config = _read(cached)
    if config is None:
        with hydra.initialize_config_dir(config_dir=str(config_dir), version_base=None):
            config = hydra.compose("ppo_trainer", overrides=overrides)
        _write(cached, config)
    return config


def _read(path: Path) -> Any:
    """The config kept in ``path`` (struct, as Hydra composes it), or None: none kept, or one that
    cannot be read (said)."""
    from omegaconf import OmegaConf

    try:
        text = path.read_text()
    except OSError:
        return None
    try:
        data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        if not isinstance(data, dict):
            raise ValueError(f"a {type(data).__name__}, not a mapping")
        config = OmegaConf.create(data)
    except Exception as exc:
        log.warning("verl's composed config kept in %s could not be read (%s: %s); composing it again",
                    path, type(exc).__name__, exc)  # fmt: skip
        return None
    OmegaConf.set_struct(config, True)
    return config


def _write(path: Path, config: Any) -> None:
    """Keep ``config`` in ``path``, whole or not at all (a cache that cannot be written costs only
    the next run its composition)."""
    from omegaconf import OmegaConf

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        partial.write_text(OmegaConf.to_yaml(config))
        partial.replace(path)
    except OSError as exc:
        log.debug("verl's composed config not kept in %s: %s", path, exc)


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
    if key not in _composed:  # (a replay suite asks for the same one often)
        try:
            _composed[key] = compose_config(model_path, overrides)
        except Exception as exc:  # Hydra raises several types for a bad override
            raise RunConfigError(f"verl config: {exc}") from None
    return copy.deepcopy(_composed[key])


_composed: dict[tuple, Any] = {}


def _hydra_value(value: Any) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
