"""``rollscope export`` on a store recorded by ``rollscope run``'s runner (real verl loop, tools
and reward; ScriptedLLM, the test double for a model, answering each question right on its
1st and 3rd rollout and wrong on the others), read back with pyarrow and ``datasets``."""

import json
from collections import Counter, defaultdict

from rollscope.datasets import export
from rollscope.store import TraceStore
from tests.cli.test_run_cli import rollscope
from tests.conftest import RECORDED_N as N
from tests.conftest import RECORDED_SAMPLES as SAMPLES


def test_parquet_rows_read_back_with_pyarrow(recorded, tmp_path):
    import pyarrow.parquet as pq

    traces, truth = recorded
    with TraceStore(traces) as store:
        done = export(store, tmp_path / "run.parquet", "parquet")
        stored = {t.id: t for t in store.trajectories(limit=None)}
    table = pq.read_table(tmp_path / "run.parquet")
    rows = table.to_pylist()
    assert done.rows == table.num_rows == len(stored) == SAMPLES * N and done.groups == SAMPLES
    for row in rows:
        t = stored[row["id"]]
        assert (row["step"], row["sample_index"], row["rollout_n"], row["reward"]) == (
            2,
            str(t.sample_index),
            t.rollout_n,
            t.reward,
        )
        assert row["prompt"] == [{"role": "user", "content": row["messages"][0]["content"]}]
        assert row["prompt"][0]["content"] in truth and row["ground_truth"] == truth[row["prompt"][0]["content"]]
        assert [m["role"] for m in row["messages"]] == ["user", "assistant", "tool", "assistant"]
        assert row["messages"][2]["content"] in (row["ground_truth"], "2")  # the calculator's result
        assert row["response"] == row["messages"][1]["content"] + row["messages"][3]["content"]
        assert (row["turns"], row["tool_calls"], row["group_size"]) == (2, 1, N)
        assert row["group_mean"] == 0.5 and row["group_advantage"] == (1.0 if row["reward"] == 1 else -1.0)
    assert Counter(r["reward"] for r in rows) == {1.0: SAMPLES * 2, 0.0: SAMPLES * 2}


def test_hf_directory_loads_with_datasets_and_jsonl_has_the_same_rows(recorded, tmp_path):
    import datasets

    traces, _ = recorded
    with TraceStore(traces) as store:
        export(store, tmp_path / "hf", "hf")
        export(store, tmp_path / "run.jsonl", "jsonl", min_reward=1.0)  # traces ls's filters apply
    # (a cache of its own: datasets' shared cache keys a local directory by what it lists, so
    # another run's export of the same shape would be read back instead)
    loaded = datasets.load_dataset(str(tmp_path / "hf"), split="train", cache_dir=str(tmp_path / "hf-cache"))
    assert loaded.num_rows == SAMPLES * N and loaded[0]["messages"][0]["role"] == "user"
    lines = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    assert len(lines) == SAMPLES * 2 and all(r["reward"] == 1.0 for r in lines)
    by_id = {r["id"]: r for r in loaded}
    assert all(by_id[r["id"]]["messages"] == r["messages"] for r in lines)


def test_one_dpo_pair_per_group_whose_rewards_differ_and_sft_takes_each_best(recorded, tmp_path):
    traces, _ = recorded
    with TraceStore(traces) as store:
        pairs = export(store, tmp_path / "dpo.jsonl", "dpo")
        sft = export(store, tmp_path / "sft.jsonl", "sft")
        rewards = {t.id: t.reward for t in store.trajectories(limit=None)}
        groups = defaultdict(set)
        for t in store.trajectories(limit=None):
            groups[t.sample_index].add(t.id)
    dpo = [json.loads(line) for line in (tmp_path / "dpo.jsonl").read_text().splitlines()]
    assert pairs.rows == len(dpo) == SAMPLES  # every group has a right and a wrong rollout
    for pair in dpo:
        assert rewards[pair["chosen_id"]] == 1.0 and rewards[pair["rejected_id"]] == 0.0
        assert any({pair["chosen_id"], pair["rejected_id"]} <= ids for ids in groups.values())
        assert pair["prompt"][0]["role"] == "user" and pair["chosen"][0]["role"] == "assistant"
        assert pair["chosen"] != pair["rejected"]
    examples = [json.loads(line) for line in (tmp_path / "sft.jsonl").read_text().splitlines()]
    assert sft.rows == SAMPLES and all(rewards[e["id"]] == 1.0 for e in examples)
    assert [m["role"] for m in examples[0]["messages"]] == ["user", "assistant", "tool", "assistant"]


def test_the_command_writes_and_says_what_it_wrote(recorded, tmp_path):
    traces, _ = recorded
    result = rollscope("export", str(tmp_path / "pairs.jsonl"), "--format", "dpo", "--dir", str(traces), "--step", "2")
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"{SAMPLES} pairs from {SAMPLES * N} trajectories in {SAMPLES} groups" in result.stdout
    bad = rollscope("export", str(tmp_path / "x"), "--format", "csv", "--dir", str(traces))
    assert bad.returncode == 2 and "invalid choice: 'csv'" in bad.stderr
