"""A call Weave refuses costs that call only. W&B's server refuses a whole ``calls/complete`` batch
when one call in it is bad; no call rollscope makes is one W&B's own server (tests.engines)
refuses, so the refusing server here is the stand-in of W&B's endpoints, a test double told which
call to refuse (``WandbStandIn.refuse``)."""

import json

import pytest

from rollscope import tracing
from rollscope.cli import main
from rollscope.tracing.backends.weave import dead_letters_path

pytestmark = pytest.mark.slow


def test_one_refused_call_among_100_costs_that_call_only(wandb, trace_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("ROLLSCOPE_SPOOL_DIR", str(tmp_path / "spool"))  # (the sidecar's, too)
    wandb.refuse = lambda call: (call.get("inputs") or {}).get("i") == 17
    tracing.init_tracing(
        backend="local,weave", project="refused", trace_dir=str(trace_dir), weave_project="ent/refused"
    )
    for i in range(50):  # 50 roots and 50 tool calls
        with (
            tracing.rollout_trace_attr(step=0, sample_index=i, rollout_n=0, name="agent"),
            tracing.trace_span("calculator", kind="tool", inputs={"i": i}) as s,
        ):
            s.outputs = {"text": str(i)}
    assert tracing.flush_tracing(120)
    stats = tracing.stats()["backends"]
    destination = f"weave {wandb.url}/traces ent/refused"
    tracing.shutdown_tracing(60)
    ids = [c["id"] for c in wandb.calls]
    assert len(ids) == len(set(ids)) == 99 and wandb.refused_batches >= 1
    assert 17 not in {(c.get("inputs") or {}).get("i") for c in wandb.calls}
    assert stats["weave"]["rejected"] == 1 and stats["weave"]["dropped"] == 0 and stats["weave"]["errors"] == 0
    assert stats["local"]["errors"] == 0  # the local store has all 100
    [letter] = [json.loads(line) for line in dead_letters_path(destination).read_text().splitlines()]
    assert letter["call"]["inputs"] == {"i": 17} and letter["reason"].startswith("400")

    # kept for `rollscope push --refused`: refused again, it stays; taken once the server takes it
    assert main(["push", "--to", "weave", "--refused", "--project", "ent/refused"]) == 1
    assert len(wandb.calls) == 99 and len(dead_letters_path(destination).read_text().splitlines()) == 1
    wandb.refuse = None
    assert main(["push", "--to", "weave", "--refused", "--project", "ent/refused"]) == 0
    assert [c for c in wandb.calls if (c.get("inputs") or {}).get("i") == 17] == [letter["call"]]
    assert len(wandb.calls) == 100 and dead_letters_path(destination).read_text() == ""
