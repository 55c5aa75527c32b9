"""Every code block in README.md and docs/*.md runs here, so the docs cannot drift from the code.

Each document runs in a directory of its own that holds a store recorded by `rollscope run` (the
gsm8k example at step 120: 8 questions, 2 rollouts each, a scripted LLM) and the repository's
`examples/` and `rollscope/` paths; its blocks run in order, so a block may use what an earlier one
made.

- python: run in a fresh interpreter; a block that defines `test_*` functions is run by pytest.
- bash: each command runs (continuation lines joined, comments dropped); the words `ID`, `A` and
  `B` stand for stored trajectory ids. `make T` runs as `make -n T` (what it would do: `make test`
  would run this very test). A block marked `<!-- doc-test: parse-only (why) -->` needs what this
  machine lacks (a model server, W&B): its commands must be accepted by rollscope's own parser. A
  block marked `verl overrides` is composed with verl's own Hydra config: every key must exist.
- yaml: parsed; one marked `run config in DIR` is checked as a run config placed in DIR (keys,
  dataset, tool file: `rollscope run`'s pre-flight check).
- toml: parsed. text: every `rollscope/...` path it names exists.
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.toml_compat import tomllib

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
DOCS = [doc for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))] if "```" in doc.read_text()]
ENV_EXTRA = {"WANDB_ERROR_REPORTING": "false", "WANDB_SILENT": "true", "COLUMNS": "160"}
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
_DIRECTIVE = re.compile(r"<!-- doc-test: (.*?) -->\s*$")


@dataclass
class Block:
    doc: Path
    line: int
    language: str
    code: str
    directive: str

    def __str__(self) -> str:
        return f"{self.doc.relative_to(REPO)}:{self.line} ({self.language or 'text'})"


def blocks(doc: Path) -> list[Block]:
    text = doc.read_text()
    found = []
    for m in _FENCE.finditer(text):
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        directive = _DIRECTIVE.search(before)
        found.append(
            Block(
                doc, text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2), directive.group(1) if directive else ""
            )
        )
    return found


def commands(code: str) -> list[str]:
    """A shell block's commands: continuation lines joined, comments and blank lines dropped."""
    joined = re.sub(r"\\\n", " ", code)
    out = []
    for line in joined.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        if line:
            out.append(line)
    return out


@pytest.fixture(scope="session")
def recorded(tmp_path_factory):
    """The store every document starts from."""
    root = tmp_path_factory.mktemp("docs-store")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "rollscope.cli",
            "run",
            "gsm8k-calculator",
            "--limit",
            "8",
            "--n",
            "2",
            "--step",
            "120",
            "--llm",
            "scripted:scripted_replies.yaml",
            "--dir",
            str(root / "rollscope_traces"),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=_env(),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return root / "rollscope_traces"


def _env() -> dict[str, str]:
    return {**os.environ, **ENV_EXTRA}


@pytest.fixture
def workdir(tmp_path, recorded):
    shutil.copytree(recorded, tmp_path / "rollscope_traces")
    for name in ("examples", "rollscope"):
        (tmp_path / name).symlink_to(REPO / name)
    from rollscope.store import TraceStore

    with TraceStore(tmp_path / "rollscope_traces") as store:
        ids = [t.id for t in store.trajectories(order_by="start")]
    return tmp_path, {"ID": ids[0], "A": ids[0], "B": ids[1]}


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(REPO)) for d in DOCS])
def test_every_code_block_runs(doc, workdir):
    cwd, placeholders = workdir
    for block in blocks(doc):
        RUNNERS[block.language or "text"](block, cwd, placeholders)


# ---- one runner per block language ----
def run_python(block: Block, cwd: Path, _: dict) -> None:
    script = cwd / f"block_{block.line}.py"
    script.write_text(block.code)
    tests = re.search(r"^def test_", block.code, re.M)
    argv = (
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(script)]
        if tests
        else [sys.executable, str(script)]
    )
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600, env=_env())
    assert result.returncode == 0, f"{block} failed:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"


def run_shell(block: Block, cwd: Path, placeholders: dict) -> None:
    for command in commands(block.code):
        if block.directive.startswith("verl overrides"):
            _compose_verl(block, command, cwd / "model")
            continue
        argv = [placeholders.get(word, word) for word in shlex.split(command)]
        if argv[0] == "make":
            result = subprocess.run(["make", "-n", *argv[1:]], cwd=REPO, capture_output=True, text=True, timeout=60)
            assert result.returncode == 0, f"{block}: `{command}`: {result.stderr}"
            continue
        assert argv[0] == "rollscope", f"{block}: `{command}`: only rollscope and make commands run here; mark it"
        if block.directive.startswith("parse-only"):
            from rollscope.cli import parse

            parse(argv[1:])  # argparse exits 2 (SystemExit) on a wrong subcommand, flag or override
            continue
        result = subprocess.run(
            [sys.executable, "-m", "rollscope.cli", *argv[1:]],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=600,
            env=_env(),
        )
        assert result.returncode == 0, f"{block}: `{command}` exited {result.returncode}:\n{result.stderr[-3000:]}"


def _compose_verl(block: Block, command: str, model_dir: Path) -> None:
    """verl's ppo_trainer config composed with the command's overrides (the ``... settings ...``
    placeholders left out; ``$(...)`` expanded by the shell, as it would be)."""
    from rollscope.llm.tokenizer_dir import make_model_dir
    from rollscope.runner.trainer_config import compose_config

    assert command.startswith("python -m verl.trainer.main_ppo"), f"{block}: not a verl command: {command}"
    rest = re.sub(r"\.\.\.[^.]*?\.\.\.|\.\.\.", " ", command.removeprefix("python -m verl.trainer.main_ppo"))
    expanded = subprocess.run(
        ["bash", "-c", f"printf '%s\\0' {rest}"],
        capture_output=True,
        text=True,
        check=True,
        env={**_env(), "PATH": f"{Path(sys.executable).parent}:{_env()['PATH']}"},
    )
    overrides = [o for o in expanded.stdout.split("\0") if o]
    assert overrides, f"{block}: no overrides in {command}"
    if not (model_dir / "tokenizer.json").exists():
        make_model_dir(model_dir)
    compose_config(model_dir, overrides)


def run_yaml(block: Block, cwd: Path, _: dict) -> None:
    data = yaml.safe_load(block.code)
    assert data, f"{block}: empty"
    if block.directive.startswith("run config in "):
        from rollscope.runner import preflight
        from rollscope.runner.config import load_config

        folder = REPO / block.directive.removeprefix("run config in ").strip()
        config = folder / f"doc_block_{block.line}.yaml"
        config.write_text(block.code)
        try:
            preflight.check(load_config(str(config), []))
        finally:
            config.unlink()


def run_toml(block: Block, cwd: Path, _: dict) -> None:
    assert tomllib.loads(block.code), f"{block}: empty"


def run_text(block: Block, cwd: Path, _: dict) -> None:
    paths = re.findall(r"(rollscope/[\w/]+(?:\.py)?)", block.code)
    assert paths, f"{block}: names no path"
    missing = [p for p in paths if not (REPO / p).exists()]
    assert not missing, f"{block} names paths that do not exist: {missing}"


RUNNERS = {"python": run_python, "bash": run_shell, "yaml": run_yaml, "toml": run_toml, "text": run_text}


def test_quickstart_one_reads_clean(recorded):
    """Quickstart 1's run (the scripted model on the project's own ChatML template): every
    trajectory's messages render back to the tokens the loop produced — the template writes each
    tool call back where the model wrote it, the end-of-turn token is not doubled, and verl's Qwen
    builder (the model directory's model type) joins the turns as the template does."""
    from rollscope.store import TraceStore

    with TraceStore(recorded) as store:
        records = [store.get(t.id) for t in store.trajectories()]
    checks = [s.attributes["rollscope.retokenization"] for r in records for s in r.spans if s.kind == "agent"]
    assert len(checks) == 16 and all(c["match"] for c in checks), [c for c in checks if not c["match"]][:1]
    assert all(r.num_tool_calls >= 1 for r in records)
