"""Every private module of rollscope.tracing is under the import contract that keeps code outside
tracing/ from importing it (`lint-imports` in `make lint`): a new `_module.py` cannot slip out."""

from pathlib import Path

import rollscope.tracing
from tests.toml_compat import tomllib

TRACING = Path(rollscope.tracing.__file__).parent


def test_the_protected_contract_lists_every_private_module():
    config = tomllib.loads((TRACING.parents[1] / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    protected = next(c for c in contracts if c["type"] == "protected")
    private = {
        f"rollscope.tracing.{p.stem if p.is_file() else p.name}"
        for p in TRACING.iterdir()
        if p.name.startswith("_") and not p.name.startswith("__") and (p.suffix == ".py" or p.is_dir())
    }
    assert private, "no private modules found"
    assert private == set(protected["protected_modules"])
    assert protected["allowed_importers"] == ["rollscope.tracing"]
