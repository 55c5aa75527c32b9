import asyncio
import fcntl
import os
import re

os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
os.environ.setdefault("WANDB_SILENT", "true")

import shutil
import tempfile
from collections import Counter
from pathlib import Path

# Remote backends' spools (tracing._spool) of this test session: never the user's cache.
# (kept when set: the tests' own subprocesses share their parent's)
if "ROLLSCOPE_SPOOL_DIR" not in os.environ:
    os.environ["ROLLSCOPE_SPOOL_DIR"] = tempfile.mkdtemp(prefix="rollscope-spool-")

import pytest

from rollscope import tracing
from rollscope.store import TraceStore
from tests.wandb_stand_in import wandb  # noqa: F401  (a fixture: W&B's endpoints on 127.0.0.1)

# The modules whose tests start a Ray cluster (verl's trainer, its Ray workers, `--workers`): marked
# `ray`, which `make test` runs after the others, one at a time with the machine to themselves (a
# trainer beside other tests misses what a real run has: a core to spare when Ray ends its workers).
RAY_MODULES = frozenset(
    {
        "tests/agentloops/test_verl_training_path.py",
        "tests/agentloops/test_verl_worker.py",
        "tests/runner/test_distributed.py",
        "tests/tracing/test_sidecar_ray.py",
        "tests/trainer/test_main_ppo_local.py",
        "tests/trainer/test_main_ppo_engines.py",
        "tests/trainer/test_main_ppo_weave.py",
        "tests/trainer/test_main_ppo_sglang_refused.py",
    }
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks RAY_MODULES' tests ``ray``; puts the modules with slow tests first, so that neither of
    ``make test``'s xdist workers is left with one at the end (``--dist loadscope`` keeps a module
    on one worker: its engines start once, its tests run in order)."""
    slow_modules = {item.module.__name__ for item in items if item.get_closest_marker("slow")}
    for item in items:
        if item.nodeid.split("::", 1)[0] in RAY_MODULES:
            item.add_marker(pytest.mark.ray)
    items.sort(key=lambda item: item.module.__name__ not in slow_modules)


@pytest.fixture
def trace_dir(tmp_path):
    return tmp_path / "traces"


@pytest.fixture
def local_tracer(trace_dir):
    """A real tracer writing to a real store in a temporary directory."""
    tracer = tracing.init_tracing(project="proj", experiment="exp", trace_dir=str(trace_dir))
    yield tracer
    tracing.shutdown_tracing()


@pytest.fixture
def read_store(trace_dir):
    """Flush tracing, then open the store for reading."""

    def _read() -> TraceStore:
        assert tracing.flush_tracing(30)
        return TraceStore(trace_dir)

    return _read


@pytest.fixture(autouse=True)
def _no_tracer_leak():
    yield
    tracing.shutdown_tracing()


@pytest.fixture(scope="session")
def tiny_tokenizer():
    """A real byte-level BPE tokenizer trained here (no hub download), wrapped as verl expects."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<pad>", "<eos>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    corpus = ["what is six times seven", "the answer is 42", "calculate 3 + 4 with the tool"] * 20
    tok.train_from_iterator(corpus, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<pad>")


# Debian's Chromium, headless, driven by Selenium: the viewer's pages as a browser draws them.
@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver_path, (
        "install Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)"
    )
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


# A store recorded by ``rollscope run``'s runner (real verl loop, tools and reward; ScriptedLLM, the
# test double for a model, answering each question right on its 1st and 3rd rollout and wrong on
# the others, rewards 1, 0, 1, 0 per group), shared by the dataset and retention tests; a test that
# changes a store works on a copy (``recorded_copy``).
RECORDED_SAMPLES, RECORDED_N = 3, 4


@pytest.fixture(scope="session")
def recorded(tmp_path_factory):
    return record_run(tmp_path_factory.mktemp("export"))


def record_run(tmp, overrides=(), steps=(2,), failing_every=0):
    """``rollscope run``'s runner over the gsm8k-calculator example, ScriptedLLM answering as
    ``recorded`` says, once per step in ``steps``, traced into ``tmp/traces`` (and whatever
    backends ``overrides`` add); ``failing_every``: every Nth rollout's tool call fails."""
    from transformers import AutoTokenizer

    from rollscope.llm import ScriptedLLM
    from rollscope.runner import session
    from rollscope.runner.config import load_config
    from rollscope.runner.dataset import load_rows
    from rollscope.runner.runner import Runner
    from rollscope.testing import make_model_dir

    tokenizer = AutoTokenizer.from_pretrained(make_model_dir(tmp / "model"))
    asked: Counter = Counter()
    truth: dict = {}

    def reply(turn, prompt_ids):
        text = tokenizer.decode(prompt_ids)
        question = max((q for q in truth if q in text), key=text.rindex)
        if turn == 0:
            asked[question] += 1
            expression = truth[question] if asked[question] % 2 else "1 + 1"
            if failing_every and asked[question] % failing_every == 0:
                expression = "1 +"
            return f'<tool_call>{{"name": "calculator", "arguments": {{"expression": "{expression}"}}}}</tool_call>'
        results = re.findall(r"tool\n(?:<tool_response>\n)?(-?\d+)", text)  # the calculator's answer
        return f"The answer is {results[-1]}." if results else "I cannot tell."

    for step in steps:
        config = load_config(
            "gsm8k-calculator",
            [f"limit={RECORDED_SAMPLES}", f"n={RECORDED_N}", f"step={step}", f"trace_dir={tmp / 'traces'}", *overrides],
        )
        rows = load_rows(config.resolve(config.dataset), RECORDED_SAMPLES)
        truth.update({r["prompt"][0]["content"]: r["reward_model"]["ground_truth"] for r in rows})
        runner = Runner(config, llm=ScriptedLLM(tokenizer, reply), tokenizer=tokenizer)
        runner.setup()
        asyncio.run(session.run_traced(runner))
    return tmp / "traces", truth


@pytest.fixture
def recorded_copy(recorded, tmp_path):
    traces, truth = recorded
    shutil.copytree(traces, tmp_path / "traces")
    return tmp_path / "traces", truth


@pytest.fixture(scope="module")
def weave_trace_server(tmp_path_factory):
    """W&B's own Weave trace server (weave's ClickHouseTraceServer on in-process ClickHouse), one per
    test module, with this process and its trace sidecars pointed at it (tests.engines)."""
    from weave.trace.context.weave_client_context import set_weave_client_global

    from tests.engines import WeaveTraceServer

    server = WeaveTraceServer(tmp_path_factory.mktemp("weave-server"))
    with pytest.MonkeyPatch.context() as patch:
        for key, value in server.environment().items():
            patch.setenv(key, value)
        set_weave_client_global(None)
        yield server
        set_weave_client_global(None)
    server.close()


def shared_model(tmp_path_factory, name: str, **options) -> Path:
    """The training demo's warm-started model (``demo_task.build_model(**options)``, a minute or more
    of training on a busy machine), built once per test session in a folder xdist's workers share:
    the first to take the lock builds it, the others find it built."""
    from rollscope.cpu import demo_task

    folder = tmp_path_factory.getbasetemp().parent / name
    with open(folder.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return demo_task.build_model(folder, demo_task.problems(), **options)


@pytest.fixture(scope="session")
def engine_model(tmp_path_factory):
    """The model the engines (vLLM, SGLang) serve: the training demo's, with heads vLLM's CPU
    attention takes (32 wide), half its demonstrations calling the calculator."""
    from rollscope.cpu import demo_task

    return shared_model(tmp_path_factory, "engine-model", tool_share=0.5, sizes=demo_task.ENGINE_MODEL_SIZES)


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory, engine_model):
    """``vllm serve`` of that model, one per test module (tests.engines)."""
    from tests.engines import VLLMServer

    server = VLLMServer(engine_model, tmp_path_factory.mktemp("vllm-server") / "server.log")
    yield server
    server.close()


@pytest.fixture(scope="module")
def sglang_server(tmp_path_factory, engine_model):
    """SGLang's server of the same model on the CPU, one per test module (tests.engines)."""
    from tests.engines import SGLangServer

    server = SGLangServer(engine_model, tmp_path_factory.mktemp("sglang-server") / "server.log")
    yield server
    server.close()


@pytest.fixture(scope="session")
def demo_model(tmp_path_factory):
    """The training demo's warm-started model, with half its demonstrations calling the
    calculator: every run of a few trajectories has tool calls in it."""
    return shared_model(tmp_path_factory, "demo-model", tool_share=0.5)
