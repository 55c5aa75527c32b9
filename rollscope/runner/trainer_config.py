"""verl's ``ppo_trainer`` config, composed with Hydra from verl's own packaged files: a run and
a replay build verl's agent loops from it exactly as training does.

Composing it costs Hydra ~0.5 s, the most a short ``rollscope run`` spent besides importing verl;
so each composition is kept in rollscope's cache as a record of its own (JSON: its format, the whole
key, a checksum of the data), under a digest of everything it came from (verl's config files as they
are on disk, the files a ``hydra.searchpath`` override adds, the overrides, OmegaConf's and Hydra's
versions), and read back in ~50 ms. A kept file that is not that record whole (another mapping, a
tampered value, a link to a device) is said and composed again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import secrets
from pathlib import Path
from typing import Any

from rollscope._cache import cache_dir
from rollscope._files import read_text
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
    key = json.dumps(
        [
            str(config_dir),
            _files_of(config_dir),
            [_files_of(d) for d in _search_dirs(overrides)],
            overrides,
            omegaconf.__version__,
            hydra.__version__,
        ]
    )
    cached = cache_dir() / "verl-config" / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"
    data = _read(cached, key)
    if data is None:
        with hydra.initialize_config_dir(config_dir=str(config_dir), version_base=None):
            composed = hydra.compose("ppo_trainer", overrides=overrides)
        data = omegaconf.OmegaConf.to_container(composed, resolve=False)
        _write(cached, key, data)
    return data


def _files_of(folder: Path) -> list[tuple[str, int, int]]:
    """The YAML files under ``folder`` as the key sees them: name, modification time, size."""
    return sorted((str(p.relative_to(folder)), p.stat().st_mtime_ns, p.stat().st_size) for p in folder.rglob("*.yaml"))


def _search_dirs(overrides: list[str]) -> list[Path]:
    """The folders a ``hydra.searchpath`` override adds (``file://DIR`` or ``DIR``): their files
    compose the config too, so they are part of the key."""
    found = []
    for item in overrides:
        key, _, value = item.partition("=")
        if key.lstrip("+~") == "hydra.searchpath":
            for part in value.strip("[]").split(","):
                path = Path(part.strip().strip("'\"").removeprefix("file://"))
                if path.is_dir():
                    found.append(path)
    return found


def _as_config(data: dict[str, Any]) -> Any:
    """A DictConfig of its own for ``data``, in struct mode as Hydra composes it (a misspelled key
    is an error). OmegaConf copies what it is given: ``data`` stays as it was."""
    from omegaconf import OmegaConf

    config = OmegaConf.create(data)
    OmegaConf.set_struct(config, True)
    return config


_FORMAT = "rollscope verl-config 1"
_MAX_BYTES = 16 << 20  # a kept composition is ~30 KB


def _read(path: Path, key: str) -> dict[str, Any] | None:
    """The composition kept in ``path`` for ``key``, or None: none kept, or one that is not this
    cache's own record of this very key, whole (said, and composed again). A file is read only if
    it is a regular file of a bounded size: the cache is a folder anyone with the user's rights
    can write."""
    if not path.is_symlink() and not path.exists():
        return None
    try:
        record = json.loads(read_text(path, "kept composition", ValueError, limit=_MAX_BYTES))
        if not isinstance(record, dict) or record.get("format") != _FORMAT or record.get("key") != key:
            raise ValueError("not this cache's record of this composition")
        data = record.get("data")
        if not isinstance(data, dict) or not _plain(data) or record.get("sha256") != _digest(data):
            raise ValueError("its data is not what its checksum says")
    except (ValueError, RecursionError) as exc:
        log.warning("verl's composed config kept in %s could not be read (%s); composing it again", path, exc)
        return None
    return data


def _digest(data: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def _plain(value: Any) -> bool:
    """Whether ``value`` holds only what a kept composition holds: mappings by name, lists, text,
    numbers, booleans and nulls (what YAML could also give, a date say, OmegaConf would refuse)."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, str | int | float)


def _write(path: Path, key: str, data: dict[str, Any]) -> None:
    """Keep ``data`` in ``path``, whole or not at all (a cache that cannot be written costs only
    the next run its composition): written to a file of its own, created exclusively and never
    through a link planted at its name, then renamed over ``path`` (which replaces a link there,
    never what it points to)."""
    record = json.dumps({"format": _FORMAT, "key": key, "sha256": _digest(data), "data": data}).encode()
    partial = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(record)
        os.replace(partial, path)
    except OSError as exc:
        log.debug("verl's composed config not kept in %s: %s", path, exc)
        with contextlib.suppress(OSError):
            partial.unlink()


def _hydra_value(value: Any) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
