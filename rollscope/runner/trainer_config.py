"""verl's ``ppo_trainer`` config, composed with Hydra from verl's own packaged files: a run and
a replay build verl's agent loops from it exactly as training does.

Composing it costs Hydra ~0.5 s, the most a short ``rollscope run`` spent besides importing verl;
so each composition is kept as YAML in rollscope's cache, under a digest of everything it came from
(verl's config files as they are on disk, the overrides, OmegaConf's and Hydra's versions), and
read back in ~50 ms. A cached file that cannot be read is composed again and rewritten.
"""

from __future__ import annotations

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
    return _as_config(_composed(model_dir, list(overrides)))


def trainer_config(config: RunConfig, model_path: str) -> Any:
    """verl's ppo_trainer config with the run's lengths, multi-turn settings and extra overrides
    (a config of its own each call: loops may change theirs)."""
    overrides = [
        f"actor_rollout_ref.rollout.prompt_length={config.prompt_length}",
        f"actor_rollout_ref.rollout.response_length={config.response_length}",
        f"trainer.project_name={config.project}",
        f"trainer.experiment_name={config.experiment or config.name}",
        *(f"actor_rollout_ref.rollout.multi_turn.{k}={_hydra_value(v)}" for k, v in config.multi_turn.items()),
        *config.verl,
    ]
    key = (str(model_path), tuple(overrides))
    if key not in _in_process:  # (a replay suite asks for the same one often)
        try:
            _in_process[key] = _composed(model_path, overrides)
        except Exception as exc:  # Hydra raises several types for a bad override
            raise RunConfigError(f"verl config: {exc}") from None
    return _as_config(_in_process[key])


_in_process: dict[tuple, dict[str, Any]] = {}


def _composed(model_dir: Path | str, overrides: list[str]) -> dict[str, Any]:
    """The composition as plain data (interpolations unresolved): from the cache, else Hydra's."""
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
    data = _read(cached)
    if data is None:
        with hydra.initialize_config_dir(config_dir=str(config_dir), version_base=None):
            composed = hydra.compose("ppo_trainer", overrides=overrides)
        data = omegaconf.OmegaConf.to_container(composed, resolve=False)
        _write(cached, data)
    return data


def _as_config(data: dict[str, Any]) -> Any:
    """A DictConfig of its own for ``data``, in struct mode as Hydra composes it (a misspelled key
    is an error). OmegaConf copies what it is given: ``data`` stays as it was."""
    from omegaconf import OmegaConf

    config = OmegaConf.create(data)
    OmegaConf.set_struct(config, True)
    return config


def _read(path: Path) -> dict[str, Any] | None:
    """The composition kept in ``path``, or None: none kept, or one that cannot be read (said)."""
    try:
        text = path.read_text()
    except OSError:
        return None
    try:
        data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        if not isinstance(data, dict) or not _plain(data):
            raise ValueError("not a mapping of names to plain values, as a composition is kept")
    except Exception as exc:
        log.warning("verl's composed config kept in %s could not be read (%s: %s); composing it again",
                    path, type(exc).__name__, exc)  # fmt: skip
        return None
    return data


def _plain(value: Any) -> bool:
    """Whether ``value`` holds only what a kept composition holds: mappings by name, lists, text,
    numbers, booleans and nulls (what YAML could also give, a date say, OmegaConf would refuse)."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, str | int | float)


def _write(path: Path, data: dict[str, Any]) -> None:
    """Keep ``data`` in ``path``, whole or not at all (a cache that cannot be written costs only
    the next run its composition)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        partial.write_text(yaml.safe_dump(data, sort_keys=False))
        partial.replace(path)
    except OSError as exc:
        log.debug("verl's composed config not kept in %s: %s", path, exc)


def _hydra_value(value: Any) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
