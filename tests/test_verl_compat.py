"""verl's and MLflow's internals, read in one place (``rollscope._verl``): one contract per
internal, each failing with the verl version and the internal that moved; and nothing outside that
module (and the CPU platform's own registrations, ``rollscope.cpu``) reaches them.

import-linter sees an external package whole (``verl``), not its modules, so the second half is
checked here, over every module's source: its imports (ast) and the private names it spells."""

import ast
import logging
import re
from pathlib import Path

import pytest

from rollscope import _verl

PACKAGE = Path(_verl.__file__).parent
ALLOWED = {PACKAGE / "_verl.py"} | set((PACKAGE / "trainer" / "cpu").rglob("*.py"))
PRIVATE_MODULES = ("verl.utils.rollout_trace", "mlflow.tracing.trace_manager")
PRIVATE_NAMES = re.compile(
    r"\b(_trace_enabled|_trace_attributes|_run_agent_loop|_run_prompt|InMemoryTraceManager|"
    r"_agent_loop_registry|f_locals|cr_frame|_update_actor|_compute_advantage)\b"
)


@pytest.mark.parametrize("internal", list(_verl.CONTRACTS))
def test_each_internal_is_where_rollscope_reads_it(internal):
    import verl

    try:
        _verl.CONTRACTS[internal]()
    except (AssertionError, ImportError, AttributeError) as exc:
        pytest.fail(f"verl {verl.__version__}: {internal} moved: {exc}")


def test_verls_version_is_one_the_contracts_were_checked_against(caplog):
    import verl

    _verl.check_version.cache_clear()
    with caplog.at_level(logging.WARNING, logger="rollscope"):
        assert _verl.check_version() == verl.__version__
    assert verl.__version__ in _verl.TESTED_VERL and not caplog.records


def test_an_untested_verl_is_said_once(monkeypatch, caplog):
    import verl

    monkeypatch.setattr(verl, "__version__", "99.0.0")
    _verl.check_version.cache_clear()
    with caplog.at_level(logging.WARNING, logger="rollscope"):
        _verl.check_version()
        _verl.check_version()
    [record] = caplog.records
    assert "this is verl 99.0.0" in record.getMessage() and "tests/test_verl_compat.py" in record.getMessage()
    _verl.check_version.cache_clear()


def test_nothing_else_reaches_verls_or_mlflows_internals():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path in ALLOWED:
            continue
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            found += [f"{path.relative_to(PACKAGE.parent)}: imports {n}" for n in names if n in PRIVATE_MODULES]
        for number, line in enumerate(source.splitlines(), 1):
            if PRIVATE_NAMES.search(line):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{number}: {line.strip()}")
    assert not found, "verl's or MLflow's internals outside rollscope/_verl.py:\n" + "\n".join(found)
