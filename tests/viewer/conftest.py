"""A store recorded through the real tracing API: 3 steps x 2 samples x GRPO groups of 4, llm and
tool spans with token counts, rewards, a failed tool call, and a tool result carrying HTML."""

import contextlib
import threading

import pytest

from rollscope import tracing
from rollscope.viewer.server import make_server

HOSTILE = '<script>window.__xss = 1</script><img src="x" onerror="window.__xss = 2">'


def record(trace_dir, steps=3, samples=2, rollouts=4, experiment="viewer"):
    tracing.init_tracing(project="proj", experiment=experiment, trace_dir=str(trace_dir))
    for step in range(steps):
        for sample in range(samples):
            for n in range(rollouts):
                with tracing.rollout_trace_attr(step=step, sample_index=sample, rollout_n=n, name="tool_agent"):
                    with tracing.trace_span(
                        "ToolAgentLoop.run",
                        kind="agent",
                        inputs={"raw_prompt": [{"role": "user", "content": f"What is {step} + {n}?"}]},
                    ):
                        with tracing.trace_span(
                            "llm.generate",
                            kind="llm",
                            inputs={"prompt_text": "<bos>question"},
                            **{"gen_ai.usage.input_tokens": 20, "gen_ai.usage.output_tokens": 10 + n},
                        ) as s:
                            s.outputs = {"response_text": f"<tool_call>calculator {step}+{n}</tool_call>"}
                        with tracing.trace_span(
                            "CalculatorTool.execute",
                            kind="tool",
                            inputs={"parameters": {"expression": f"{step}+{n}"}},
                            **{"tool.name": "calculator"},
                        ) as s:
                            if n == 3:
                                s.fail(ValueError("calculator: bad expression"))
                                s.outputs = {"text": "Error: bad expression"}
                            else:
                                s.outputs = {"text": HOSTILE if (step, sample, n) == (0, 0, 1) else str(step + n)}
                        with tracing.trace_span(
                            "llm.generate",
                            kind="llm",
                            inputs={"prompt_text": "<bos>more"},
                            **{"gen_ai.usage.input_tokens": 40, "gen_ai.usage.output_tokens": 5},
                        ) as s:
                            s.outputs = {"response_text": f"The answer is {step + n}."}
                    tracing.set_reward(float(n % 2) + step * 0.1)
    assert tracing.flush_tracing(30)
    tracing.shutdown_tracing()


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("viewer") / "traces"
    record(path)
    return path


def serve(store_dir):
    """The viewer on a free port of 127.0.0.1, in a thread: yields its URL, then stops it."""
    httpd = make_server(str(store_dir), port=0)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


serving = contextlib.contextmanager(serve)  # ``with serving(store_dir) as url:`` inside a test


@contextlib.contextmanager
def serving_source(source):
    """The viewer of ``--source SOURCE`` on a free port of 127.0.0.1, in a thread."""
    httpd = make_server(None, port=0, source=source)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


# What a hostile value tries in a page the browser draws: leave it, post a form elsewhere, change
# where its links go. The CSP stops scripts; these it does not.
HOSTILE_TAGS = (
    '<meta http-equiv="refresh" content="0;url=https://example.invalid/">',
    '<form action="https://example.invalid/login"><input name="password"></form>',
    '<base href="https://example.invalid/">',
)


def assert_drawn_as_text(browser, url, texts=(), shot=None):
    """``url`` as Chromium draws it: still there a moment later (no refresh went elsewhere), no
    element a hostile value tried to make, and each of ``texts`` shown as the characters it is;
    saved as test-artifacts/screenshots/SHOT.png."""
    import time
    from pathlib import Path

    from selenium.webdriver.common.by import By

    browser.get(url)
    time.sleep(1.5)  # (a refresh of 0 s would have left by now)
    assert browser.current_url == url
    for selector in ("meta[http-equiv]", "form[action*='example.invalid']", "base", "input[name=password]"):
        assert not browser.find_elements(By.CSS_SELECTOR, selector), (url, selector)
    body = browser.find_element(By.TAG_NAME, "body").text
    for text in texts:
        assert text in body, (url, text)
    if shot:
        shots = Path(__file__).parents[2] / "test-artifacts" / "screenshots"
        shots.mkdir(parents=True, exist_ok=True)
        assert browser.save_screenshot(str(shots / f"{shot}.png"))


@pytest.fixture(scope="module")
def server(store_dir):
    yield from serve(store_dir)


CHATML_PROMPT = (
    "<|im_start|>system\nYou are a calculator.<|im_end|>\n<|im_start|>user\nWhat is 6 * 7?<|im_end|>\n"
    "<|im_start|>assistant\n"
)
TOKENS = ["The", " answer", " is", " 42", "."]
LOG_PROBS = [-0.01, -0.2, -0.05, -3.5, -0.7]


def record_rich(trace_dir):
    """One trajectory with timed spans (an llm turn of ~300 ms, a tool call of ~30 ms), a ChatML
    prompt, token texts and log-probs, a ground truth; a second turn without log-probs; and a
    second experiment running the same step and sample (another GRPO group)."""
    import time

    for experiment, rewards in (("alpha", (1.0, 0.0)), ("beta", (1.0, 1.0))):
        tracing.init_tracing(project="proj", experiment=experiment, trace_dir=str(trace_dir))
        for n, reward in enumerate(rewards):
            with tracing.rollout_trace_attr(step=5, sample_index=0, rollout_n=n, name="tool_agent"):
                with tracing.trace_span(
                    "ToolAgentLoop.run",
                    kind="agent",
                    inputs={
                        "raw_prompt": [{"role": "user", "content": "What is 6 * 7?"}],
                        "reward_model": {"style": "rule", "ground_truth": "42"},
                    },
                ):
                    with tracing.trace_span("llm.generate", kind="llm", inputs={"prompt_text": CHATML_PROMPT}) as s:
                        time.sleep(0.3)
                        s.outputs = {
                            "token_ids": [11, 12, 13, 14, 15],
                            "token_texts": TOKENS,
                            "log_probs": LOG_PROBS,
                            "response_text": "The answer is 42.<|im_end|>",
                            "stop_reason": "completed",
                        }
                    with tracing.trace_span(
                        "calculator", kind="tool", inputs={"parameters": {"expression": "6*7"}}
                    ) as s:
                        time.sleep(0.03)
                        s.outputs = {"text": "42"}
                    with tracing.trace_span("llm.generate", kind="llm", inputs={"prompt_text": "plain"}) as s:
                        s.outputs = {"token_ids": [16, 17], "response_text": "done"}
                tracing.set_reward(reward)
        assert tracing.flush_tracing(30)
        tracing.shutdown_tracing()


@pytest.fixture(scope="module")
def rich_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("viewer-rich") / "traces"
    record_rich(path)
    return path


@pytest.fixture(scope="module")
def rich_server(rich_store):
    yield from serve(rich_store)


def train_on(trace_dir, experiment="viewer"):
    """What a trainer would record for the stored trajectories (``trainer.training_record`` from
    arrays shaped as verl's batch), through a tracer of its own, as verl's driver does: per step,
    GRPO advantages of the stored rewards, 6 response tokens of which 2 are a masked tool
    response, the trainer's and the rollout's log-probs agreeing except on one planted token of
    one trajectory (step 1, sample 0, rollout 2: position 4, 1.5 nats), where the entropy also
    collapses (0.01 nats at position 5; 1.0 elsewhere) and the policy drifts from the reference (0.8
    nats at position 1; 0.02 elsewhere), and the trajectories of step 2 generated one actor update
    behind."""
    import torch

    from rollscope.store import TraceStore
    from rollscope.trainer.training_record import StepArrays, records

    by_step: dict = {}
    for t in TraceStore(trace_dir).trajectories(experiment=experiment, limit=None):
        by_step.setdefault(t.step, []).append(t)
    tracing.init_tracing(project="proj", experiment=experiment, trace_dir=str(trace_dir))
    for step, rows in sorted(by_step.items()):
        rows.sort(key=lambda t: (t.sample_index, t.rollout_n))
        rewards = torch.tensor([t.reward for t in rows])
        scores = torch.zeros(len(rows), 6)
        scores[:, -1] = rewards
        uids = [f"s{step}-{t.sample_index}" for t in rows]
        advantages = torch.zeros(len(rows), 6)
        for uid in set(uids):
            members = [i for i, u in enumerate(uids) if u == uid]
            group = rewards[members]
            advantages[members] = ((group - group.mean()) / (group.std() + 1e-6))[:, None]
        mask = torch.tensor([[1, 1, 0, 0, 1, 1]] * len(rows))
        rollout = torch.full((len(rows), 6), -0.5) * mask
        old = torch.full((len(rows), 6), -0.5)
        entropy = torch.full((len(rows), 6), 1.0)
        reference = old - 0.02
        for i, t in enumerate(rows):
            if (t.step, t.sample_index, t.rollout_n) == (1, 0, 2):
                old[i, 4], entropy[i, 5], reference[i, 1] = -2.0, 0.01, -1.3
        versions = [step - 2 if step == 2 else step - 1] * len(rows)
        arrays = StepArrays(
            step=step,
            trajectory_ids=[t.id for t in rows],
            uids=uids,
            response_mask=mask,
            advantages=advantages,
            scores=scores,
            rewards=scores,
            lengths=torch.full((len(rows),), 6),
            old_log_probs=old,
            rollout_log_probs=rollout,
            min_versions=versions,
            max_versions=versions,
            entropy=entropy,
            ref_log_probs=reference,
        )
        for tid, record_ in records(arrays):
            tracing.get_tracer().training(tid, record_)
    assert tracing.flush_tracing(30)
    tracing.shutdown_tracing()


@pytest.fixture(scope="module")
def trained_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("viewer-trained") / "traces"
    record(path, experiment="trained")
    train_on(path, experiment="trained")
    return path


@pytest.fixture(scope="module")
def trained_server(trained_store):
    yield from serve(trained_store)
