"""What a run is: one YAML file (or a bundled example's name) plus ``key=value`` overrides.

Paths in a config file are relative to that file, so an example folder can be moved as a whole.
Unknown keys are refused with the list of known ones: a typo must not silently run the defaults.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollscope import _verl
from rollscope._files import load_yaml, read_text
from rollscope.semconv import CONSTRAIN
from rollscope.tracing import wandb_run

BUNDLED = Path(__file__).resolve().parent.parent / "bundled"  # the bundled examples, and verl's files (verl/)
# (CONSTRAIN is the tool loop's: tool calls sampled to their schemas, llm.constrained)
SAMPLING_KEYS = {"temperature", "top_p", "top_k", "max_tokens", "stop", "seed", "repetition_penalty", CONSTRAIN}


class RunConfigError(ValueError):
    """A config that cannot run; the message names the file or the override at fault."""


@dataclass
class RunConfig:
    name: str = "run"
    agent: str = "rollscope_tool_agent"  # a registered loop name or a dotted class path
    dataset: str | None = None  # JSONL or parquet in verl's RLHFDataset row shape
    tools: str | None = None  # a verl tool YAML
    reward: str | None = None  # "module:function" with verl's compute_score signature
    llm: str = "embedded"  # embedded | http(s)://host:port | sglang:http://... | scripted:PATH
    model: str | None = None  # tokenizer directory for server LLMs (the embedded model brings its own)
    chat_template: str | None = None  # a Jinja2 file replacing the tokenizer's template
    n: int = 1
    limit: int | None = None
    step: int = 0
    validate: bool = False
    concurrency: int = 8
    workers: int = 1
    project: str = "rollscope"
    experiment: str | None = None
    trace_dir: str | None = None  # None: $ROLLSCOPE_TRACE_DIR, else ./rollscope_traces
    backend: str = "local"
    wandb_run: str | None = None  # entity/project/run_id: Weave calls link to that W&B run at ``step``
    token2text: bool = True
    prompt_length: int = 1024
    response_length: int = 512
    sampling: dict[str, Any] = field(default_factory=lambda: {"temperature": 1.0, "top_p": 1.0})
    multi_turn: dict[str, Any] = field(default_factory=dict)
    verl: list[str] = field(default_factory=list)  # extra Hydra overrides of verl's trainer config
    seed: int = 0

    def resolve(self, value: str | None) -> str | None:
        """A path from the config made absolute (bundled config names are looked up too)."""
        if value is None:
            return None
        base = Path(getattr(self, "_base", "."))
        for candidate in (base / value, Path(value), BUNDLED / value, BUNDLED / "verl" / value):
            if candidate.exists():
                return str(candidate.resolve())
        return str(base / value)


KNOWN = {f.name: f for f in dataclasses.fields(RunConfig)}


def bundled() -> dict[str, Path]:
    """Example name -> config file: every ``*.yaml`` under ``rollscope/bundled`` (``_`` reads as ``-``)."""
    return {p.stem.replace("_", "-"): p for p in sorted(BUNDLED.glob("*.yaml"))}


def load_config(name_or_path: str, overrides: list[str] = ()) -> RunConfig:
    path = Path(name_or_path)
    if not path.exists():
        path = bundled().get(name_or_path, path)
    if not path.exists():
        known = ", ".join(bundled()) or "none"
        raise RunConfigError(f"{name_or_path}: no such config file or bundled example (bundled: {known})")
    data = load_yaml(read_text(path, "run config", RunConfigError), str(path), RunConfigError) or {}
    if not isinstance(data, dict):
        raise RunConfigError(f"{path}: a run config is a mapping of keys, got {type(data).__name__}")
    data.setdefault("name", path.stem.replace("_", "-"))
    config = _build(data, where=str(path))
    config._base = str(path.resolve().parent)
    for item in overrides:
        apply_override(config, item)
    return config


def apply_override(config: RunConfig, item: str) -> None:
    key, sep, raw = item.partition("=")
    if not sep or not key:
        raise RunConfigError(f"override {item!r}: expected key=value")
    value = load_yaml(raw, f"override {item!r}", RunConfigError) if raw else None
    head, _, sub = key.partition(".")
    _check_key(head, f"override {item!r}")
    if sub:
        current = getattr(config, head)
        if not isinstance(current, dict):
            raise RunConfigError(f"override {item!r}: {head} is not a mapping")
        _check_subkey(head, sub, f"override {item!r}")
        current[sub] = value
    else:
        setattr(config, head, _coerce(head, value, f"override {item!r}"))


def _build(data: dict[str, Any], where: str) -> RunConfig:
    config = RunConfig()
    for key, value in data.items():
        _check_key(key, where)
        if isinstance(getattr(config, key), dict):
            if not isinstance(value, dict):
                raise RunConfigError(f"{where}: {key} must be a mapping")
            for sub in value:
                _check_subkey(key, sub, where)
            getattr(config, key).update(value)
        else:
            setattr(config, key, _coerce(key, value, where))
    return config


def _check_key(key: str, where: str) -> None:
    if key not in KNOWN:
        raise RunConfigError(f"{where}: unknown config key {key!r} (known: {', '.join(sorted(KNOWN))})")


def _check_subkey(key: str, sub: str, where: str) -> None:
    if key == "sampling" and sub not in SAMPLING_KEYS:
        raise RunConfigError(f"{where}: unknown sampling key {sub!r} (known: {', '.join(sorted(SAMPLING_KEYS))})")
    if key == "multi_turn":
        known = _verl.multi_turn_keys()
        if sub not in known:
            raise RunConfigError(
                f"{where}: unknown multi_turn key {sub!r} (verl's MultiTurnConfig has: {', '.join(sorted(known))})"
            )


def _coerce(key: str, value: Any, where: str) -> Any:
    kind = KNOWN[key].type
    if value is None:
        if "None" in str(kind):
            return None
        raise RunConfigError(f"{where}: {key} needs a value")
    want = {"int": int, "bool": bool, "str": str}.get(str(kind).split(" ")[0].split("[")[0])
    if key == "verl":
        if not isinstance(value, list):
            raise RunConfigError(f"{where}: verl must be a list of Hydra overrides")
        return [str(v) for v in value]
    if want is bool and not isinstance(value, bool):
        raise RunConfigError(f"{where}: {key} must be true or false, got {value!r}")
    if want is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise RunConfigError(f"{where}: {key} must be an integer, got {value!r}")
    if want is int and value < (0 if key == "step" else 1):
        raise RunConfigError(f"{where}: {key} must be at least {0 if key == 'step' else 1}, got {value}")
    if key == "wandb_run":
        try:
            wandb_run.parse(str(value))
        except wandb_run.RunPathError as exc:
            raise RunConfigError(f"{where}: wandb_run: {exc}") from None
    return str(value) if want is str else value
