"""Shipped configuration files (agent loops and tools for verl, examples, trace presets)."""

from pathlib import Path

CONFIG_DIR = Path(__file__).parent


def path(name: str) -> Path:
    """Absolute path of a shipped config file, for verl's *_config_path keys."""
    p = CONFIG_DIR / name
    if not p.is_file():
        available = ", ".join(sorted(f.name for f in CONFIG_DIR.glob("*.yaml")))
        raise FileNotFoundError(f"no shipped config {name!r}; available: {available}")
    return p
