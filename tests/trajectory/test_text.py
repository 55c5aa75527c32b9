"""Token ids read as text with the tokenizer the run recorded, whatever token2text was: a
trajectory traced with ids only (verl's default) reads as text in ``traces show`` and the viewer;
without the tokenizer here, the ids stay ids and nothing fails."""

import subprocess
import sys

import httpx

from rollscope import tracing
from rollscope.semconv import REPLAY
from rollscope.store import TraceStore
from rollscope.trajectory.decoders import Decoder, load_decoder, load_tokenizer
from rollscope.trajectory.text import with_text
from tests.viewer.conftest import serve


def record_ids_only(trace_dir, tokenizer_dir, tokenizer):
    prompt = tokenizer.encode("what is six times seven")
    reply = tokenizer.encode("the answer is 42")
    tracing.init_tracing(trace_dir=str(trace_dir), experiment="ids")
    with (
        tracing.rollout_trace_attr(step=0, sample_index=0, rollout_n=0),
        tracing.trace_span("ToolAgentLoop.run", kind="agent", **{REPLAY: {"tokenizer": str(tokenizer_dir)}}),
        tracing.trace_span("llm.generate", kind="llm", inputs={"prompt_ids": prompt}) as s,
    ):
        s.outputs = {"token_ids": reply, "log_probs": [-0.1] * len(reply)}
    assert tracing.flush_tracing(30)
    tracing.shutdown_tracing()


def test_ids_only_trajectory_reads_as_text_everywhere(tmp_path, tiny_tokenizer):
    tokenizer_dir = tmp_path / "tokenizer"
    tiny_tokenizer.save_pretrained(tokenizer_dir)
    trace_dir = tmp_path / "traces"
    record_ids_only(trace_dir, tokenizer_dir, tiny_tokenizer)
    with TraceStore(trace_dir) as store:
        (t,) = store.trajectories()
        record = store.get(t.id)
    llm = next(s for s in record.spans if s.kind == "llm")
    assert "response_text" not in llm.outputs  # as stored: ids only
    assert with_text(record) == 2
    assert llm.outputs["response_text"] == "the answer is 42" and llm.inputs["prompt_text"] == "what is six times seven"

    shown = subprocess.run(
        [sys.executable, "-m", "rollscope.cli", "traces", "show", t.id, "--dir", str(trace_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0 and "the answer is 42" in shown.stdout, shown.stdout + shown.stderr
    diffed = subprocess.run(
        [sys.executable, "-m", "rollscope.cli", "traces", "diff", t.id, t.id, "--dir", str(trace_dir), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert diffed.returncode == 0 and '"text": "the answer is 42"' in diffed.stdout, diffed.stdout + diffed.stderr
    for url in serve(trace_dir):
        page = httpx.get(f"{url}/t/{t.id}", timeout=30).text
        assert "the answer is 42" in page and "what is six times seven" in page


def test_without_the_tokenizer_the_ids_stay_ids(tmp_path, tiny_tokenizer):
    tokenizer_dir = tmp_path / "tokenizer"
    tiny_tokenizer.save_pretrained(tokenizer_dir)
    trace_dir = tmp_path / "traces"
    record_ids_only(trace_dir, tokenizer_dir, tiny_tokenizer)
    for path in tokenizer_dir.iterdir():  # another machine: the directory is not there
        path.unlink()
    tokenizer_dir.rmdir()
    load_tokenizer.cache_clear()
    load_decoder.cache_clear()
    with TraceStore(trace_dir) as store:
        record = store.get(store.trajectories()[0].id)
    assert with_text(record) == 0
    llm = next(s for s in record.spans if s.kind == "llm")
    assert "response_text" not in llm.outputs and llm.outputs["token_ids"]


def test_ids_decode_without_transformers_exactly_as_transformers_does(tmp_path, tiny_tokenizer):
    """Readers and the trace sidecar decode with ``tokenizers`` alone (importing transformers, and
    the torch it brings, takes seconds a niced sidecar under a busy trainer does not have): the same
    text as transformers' own decode, special tokens and per-token pieces included."""
    tokenizer_dir = tmp_path / "tokenizer"
    tiny_tokenizer.save_pretrained(tokenizer_dir)
    ids = [*tiny_tokenizer.encode("what is six times seven? the answer is 42"), tiny_tokenizer.eos_token_id]
    decoder = load_decoder(str(tokenizer_dir))
    assert isinstance(decoder, Decoder)
    assert decoder.decode(ids) == tiny_tokenizer.decode(ids) and "<eos>" in decoder.decode(ids)
    assert decoder.decode(ids, skip_special_tokens=True) == tiny_tokenizer.decode(ids, skip_special_tokens=True)
    assert decoder.batch_decode([[i] for i in ids]) == tiny_tokenizer.batch_decode([[i] for i in ids])
    probe = (
        "import sys; from rollscope.trajectory.decoders import load_decoder; "
        f"print(load_decoder({str(tokenizer_dir)!r}).decode({ids!r})); print('transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.stdout.splitlines() == [tiny_tokenizer.decode(ids), "False"], out.stderr
