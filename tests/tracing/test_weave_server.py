"""The weave backend against W&B's own Weave trace server (tests.engines: weave's
ClickHouseTraceServer on in-process ClickHouse, one per module), read back through the weave
client's own queries, as a user's Weave pages read them."""

import pytest

from rollscope import tracing
from rollscope.store import TraceStore
from tests.engines import weave_calls
from tests.tracing.value_kinds import TABLE, cut_cycle

pytestmark = pytest.mark.slow


def test_every_kind_of_value_reads_back_from_weave_as_the_table_says(weave_trace_server):
    tracing.init_tracing(backend="weave", weave_project="ent/values")
    with tracing.rollout_trace_attr(step=0, sample_index=0):
        for name, value, _ in TABLE:
            with tracing.trace_span(name, inputs={"value": value}) as span:
                span.outputs = {"value": value}
    assert tracing.flush_tracing(120)
    tracing.shutdown_tracing(120)
    calls = {c["display_name"]: c for c in weave_calls("ent/values")}
    assert set(calls) >= {name for name, _, _ in TABLE}  # no call lost to a hostile value
    for name, _, expected in TABLE:
        expected = cut_cycle(1) if name == "cycle" else expected  # (a level down: under "value")
        assert calls[name]["inputs"] == {"value": _in_weave(expected)}, name
        assert calls[name]["output"] == {"value": _in_weave(expected)}, name


def _in_weave(value):
    """The documented Weave form (docs/backends.md): a list of 16 or more numbers (token ids,
    log-probs) packed into one space-separated string."""
    if isinstance(value, dict):
        return {k: _in_weave(v) for k, v in value.items()}
    if isinstance(value, list):
        if len(value) >= 16 and {type(v) for v in value} <= {int, float}:
            return " ".join(map(str, value))
        return [_in_weave(v) for v in value]
    return value


def _rollout(step, sample, n, validate, reward):
    with tracing.rollout_trace_attr(step=step, sample_index=sample, rollout_n=n, validate=validate, name="tool_agent"):
        with tracing.trace_span("ToolAgentLoop.run", kind="agent", inputs={"raw_prompt": f"what is {sample} + 1?"}):
            with tracing.trace_span("llm.generate", kind="llm", inputs={"prompt_text": f"what is {sample} + 1?"}) as s:
                s.outputs = {"response_text": '<tool_call>{"name": "calculator"}</tool_call>', "stop_reason": "stop"}
            with tracing.trace_span("calculator", kind="tool", inputs={"expression": f"{sample} + 1"}) as s:
                s.outputs = {"text": str(sample + 1)}
        tracing.set_reward(reward)


def _eq(field, value):
    """A filter as the Weave UI's Traces table writes it."""
    return {"$expr": {"$eq": [{"$getField": field}, {"$literal": value}]}}


def test_the_traces_table_shows_each_trajectory_as_one_filterable_tree(weave_trace_server, trace_dir):
    import weave

    tracing.init_tracing(
        backend="local,weave", project="guide", experiment="exp-a", trace_dir=str(trace_dir), weave_project="ent/guide"
    )
    plan = [(step, sample, n, step == 2) for step in (1, 2) for sample in (0, 1) for n in (0, 1)]
    for step, sample, n, validate in plan:
        _rollout(step, sample, n, validate, reward=float(n))
    assert tracing.flush_tracing(120)
    [stored] = [t for t in TraceStore(trace_dir).trajectories() if (t.step, t.sample_index, t.rollout_n) == (1, 0, 1)]
    tracing.shutdown_tracing(120)
    tracing.init_tracing(backend="weave", project="guide", weave_project="ent/guide")  # the trainer's process
    tracing.get_tracer().training(stored.id, {"advantage": 0.5, "uid": "g1", "score": 1.0})
    assert tracing.flush_tracing(60)
    tracing.shutdown_tracing(60)

    client = weave.init("ent/guide")
    roots = list(client.get_calls(filter={"trace_roots_only": True}))
    assert len(roots) == len(plan)  # one root call per trajectory
    for field, value, expected in [
        ("attributes.step", 2, 4),
        ("attributes.sample_index", 1, 4),
        ("attributes.rollout_n", 0, 4),
        ("attributes.validate", True, 4),
        ("attributes.experiment_name", "exp-a", 8),
        ("attributes.step", 7, 0),
    ]:
        found = list(client.get_calls(filter={"trace_roots_only": True}, query=_eq(field, value)))
        want = [r for r in roots if r.attributes[field.split(".")[1]] == value]
        assert len(found) == expected == len(want), field
        assert {c.id for c in found} == {c.id for c in want}, field
    for root in roots:
        tree = list(client.get_calls(filter={"trace_ids": [root.trace_id]}))
        names = sorted(c.display_name for c in tree)
        assert names == sorted(["tool_agent", "ToolAgentLoop.run", "llm.generate", "calculator"])
        assert root.output["reward"] == float(root.attributes["rollout_n"])
        llm = next(c for c in tree if c.display_name == "llm.generate")
        tool = next(c for c in tree if c.display_name == "calculator")
        run = next(c for c in tree if c.display_name == "ToolAgentLoop.run")
        assert llm.parent_id == tool.parent_id == run.id and run.parent_id == root.id
        sample = root.attributes["sample_index"]
        assert llm.inputs["prompt_text"] == f"what is {sample} + 1?" and "calculator" in llm.output["response_text"]
        assert tool.inputs["expression"] == f"{sample} + 1" and tool.output["text"] == str(sample + 1)
    feedback = list(client.get_feedback(query=_eq("feedback_type", "rollscope.training")))
    assert [(f.weave_ref.rsplit("/", 1)[1], f.payload["advantage"]) for f in feedback] == [
        (
            next(
                r.id
                for r in roots
                if (r.attributes["step"], r.attributes["sample_index"], r.attributes["rollout_n"]) == (1, 0, 1)
            ),
            0.5,
        )
    ]
    a, b = roots[0], roots[1]  # two trajectories fetched for comparison hold the same fields
    assert set(a.attributes) == set(b.attributes) and set(a.output) == set(b.output)


def test_filter_columns_hold_what_users_filter_by_and_replay_data_is_in_the_summary(weave_trace_server):

    from rollscope.semconv import REPLAY

    tracing.init_tracing(backend="weave", project="columns", weave_project="ent/columns")
    replay = {"class": "my_pkg.loops.MathLoop", "tokenizer": "/models/qwen"}
    with (
        tracing.rollout_trace_attr(step=5, sample_index=0, rollout_n=0, name="math_agent"),
        tracing.trace_span("MathLoop.run", kind="agent", **{REPLAY: replay}),
    ):
        pass
    assert tracing.flush_tracing(60)
    tracing.shutdown_tracing(60)
    calls = {c["display_name"]: c for c in weave_calls("ent/columns")}
    root, run = calls["math_agent"], calls["MathLoop.run"]
    assert root["attributes"]["agent_name"] == "math_agent" and root["attributes"]["step"] == 5
    assert REPLAY not in run["attributes"] and run["attributes"]["step"] == 5
    assert run["summary"][REPLAY] == replay


def test_each_op_page_shows_the_traced_functions_own_code(weave_trace_server):
    """Each op rollscope publishes is the traced function as its source reads (the file and line
    its spans name, read in the sidecar; nothing of it imported there): two different ``run``
    methods are two op objects, each with its own code, and where they are is no filter column."""
    import weave

    @tracing.rollout_trace_op(kind="agent", name="MathLoop.run")
    def math_run(question):
        return f"math: {question} * 2"

    @tracing.rollout_trace_op(kind="agent", name="CodeLoop.run")
    def code_run(question):
        return f"code: {question}.upper()"

    tracing.init_tracing(backend="weave", project="ops", weave_project="ent/ops")
    for sample, run in enumerate((math_run, code_run)):
        with tracing.rollout_trace_attr(step=1, sample_index=sample, rollout_n=0):
            run("q")
    assert tracing.flush_tracing(60)
    tracing.shutdown_tracing(60)
    client = weave.init("ent/ops")
    filters = {"is_op": True, "latest_only": True, "object_ids": ["MathLoop.run", "CodeLoop.run"]}
    ops = client.server.objs_query(
        {
            "project_id": client.project_id,
            "filter": filters,
            "limit": None,
            "offset": None,
            "sort_by": None,
            "metadata_only": False,
            "include_storage_size": False,
            "include_tags_and_aliases": False,
        }
    ).objs
    sources = {}
    for op in ops:
        digest = op.val["files"]["obj.py"]
        sources[op.object_id] = client.server.file_content_read(
            {"project_id": client.project_id, "digest": digest}
        ).content.decode()
    assert sorted(sources) == ["CodeLoop.run", "MathLoop.run"]
    assert "def math_run(question):" in sources["MathLoop.run"] and '* 2"' in sources["MathLoop.run"]
    assert "def code_run(question):" in sources["CodeLoop.run"] and ".upper()" in sources["CodeLoop.run"]
    assert "math_run" not in sources["CodeLoop.run"]
    for call in weave_calls("ent/ops"):
        assert not any(key.startswith("code.") for key in call["attributes"]), call["attributes"]


def test_push_publishes_no_file_a_stored_span_names_as_its_op_source(weave_trace_server, tmp_path):
    """A shard is others' writing: a span whose code attributes name a file (a key file, a module's
    line that defines no function) must not make that file's text an op's source in Weave when the
    store is pushed; the calls are sent, their ops are stubs."""
    import weave

    from rollscope.datasets.push import push, weave_destination

    secret = tmp_path / "id_rsa"
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY----- not-for-weave\n")
    module = tmp_path / "settings.py"
    module.write_text('TOKEN = "not-for-weave-either"\n')
    tracing.init_tracing(trace_dir=str(tmp_path / "traces"))
    for i, (path, name) in enumerate([(secret, "Leak.run"), (module, "Settings.run")]):
        code = {"code.file.path": str(path), "code.line.number": 1, "code.function.name": name.split(".")[0]}
        with tracing.rollout_trace_attr(step=0, sample_index=i), tracing.trace_span(name, kind="agent", **code):
            pass
    assert tracing.flush_tracing(30)
    tracing.shutdown_tracing()
    client = weave.init("ent/pushed-ops")
    assert list(push("weave", str(tmp_path / "traces"), destination=weave_destination(client=client)))[-1] == (2, 2)
    filters = {"is_op": True, "latest_only": True, "object_ids": ["Leak.run", "Settings.run"]}
    ops = client.server.objs_query(
        {
            "project_id": client.project_id,
            "filter": filters,
            "limit": None,
            "offset": None,
            "sort_by": None,
            "metadata_only": False,
            "include_storage_size": False,
            "include_tags_and_aliases": False,
        }
    ).objs
    assert sorted(op.object_id for op in ops) == ["Leak.run", "Settings.run"]
    for op in ops:
        source = client.server.file_content_read(
            {"project_id": client.project_id, "digest": op.val["files"]["obj.py"]}
        ).content.decode()
        assert "not-for-weave" not in source and "Stands for an op recorded by rollscope" in source


def test_a_128k_token_trajectory_arrives_whole_and_nothing_of_its_batch_is_refused(weave_trace_server):
    """Each llm turn is stored as what it adds; Weave shows each call on its own, so the backend
    makes every prompt whole again before it writes (a 128k-token context: under the server's
    payload limit as packed ids), and the trajectory traced beside it arrives too."""
    import asyncio
    import random

    from rollscope.agentloops.llm_client import TracedLLMClient

    rng = random.Random(0)

    class Server:  # the LLM server, a test double: 200 tokens a reply
        async def generate(self, request_id, *, prompt_ids, sampling_params):
            return {"token_ids": [rng.randrange(150_000) for _ in range(200)], "stop_reason": "stop"}

    passed = []

    async def loop(sample, turns, added):
        client = TracedLLMClient(Server())
        with tracing.rollout_trace_attr(step=0, sample_index=sample):
            prompt = [rng.randrange(150_000) for _ in range(2000)]
            for _ in range(turns):
                passed.append((sample, list(prompt)))
                out = await client.generate("r", prompt_ids=prompt, sampling_params={})
                prompt += out["token_ids"] + [rng.randrange(150_000) for _ in range(added)]

    tracing.init_tracing(backend="weave", weave_project="ent/long")
    asyncio.run(loop(0, 16, 8000))
    asyncio.run(loop(1, 3, 100))
    assert tracing.flush_tracing(300)
    assert all(s["errors"] == 0 and s["dropped"] == 0 for s in tracing.stats()["backends"].values())
    tracing.shutdown_tracing(300)
    assert len(passed[15][1]) > 128_000 - 8200
    calls = [c for c in weave_calls("ent/long") if c["display_name"] == "llm.generate"]
    by_trace: dict = {}
    for c in sorted(calls, key=lambda c: c["started_at"]):
        by_trace.setdefault(c["trace_id"], []).append(c["inputs"]["prompt_ids"])
    short, long_ = sorted(by_trace.values(), key=len)  # the 3-turn trajectory, then the 16-turn one
    assert short == [_in_weave(p) for s, p in passed if s == 1]
    assert long_ == [_in_weave(p) for s, p in passed if s == 0]


def test_a_call_past_the_servers_limit_arrives_cut_with_the_cut_said(weave_trace_server):
    """A 700k-token prompt packs to ~4.6 MB, past the 3.5 MiB at which W&B's server replaces a
    row's JSON columns with a placeholder (``clickhouse_trace_server_batched._strip_large_values``;
    this in-process server stored it whole): it arrives with its last ids kept and what was left
    out said on the call; the call beside it whole."""
    import asyncio
    import random

    from rollscope.agentloops.llm_client import TracedLLMClient
    from rollscope.tracing.backends.weave import CUT

    rng = random.Random(1)

    class Server:  # the LLM server, a test double
        async def generate(self, request_id, *, prompt_ids, sampling_params):
            return {"token_ids": [rng.randrange(100_000, 150_000) for _ in range(50)], "stop_reason": "stop"}

    huge = [rng.randrange(100_000, 150_000) for _ in range(700_000)]

    async def loop():
        client = TracedLLMClient(Server())
        with tracing.rollout_trace_attr(step=0, sample_index=0):
            await client.generate("r", prompt_ids=huge, sampling_params={})
            await client.generate("r", prompt_ids=[1, 2, 3] * 10, sampling_params={})

    tracing.init_tracing(backend="weave", weave_project="ent/cut")
    asyncio.run(loop())
    assert tracing.flush_tracing(300)
    assert all(s["errors"] == 0 and s["dropped"] == 0 for s in tracing.stats()["backends"].values())
    tracing.shutdown_tracing(300)
    calls = sorted(
        (c for c in weave_calls("ent/cut") if c["display_name"] == "llm.generate"), key=lambda c: c["started_at"]
    )
    big, small = calls
    kept = big["inputs"]["prompt_ids"].split(" ")
    assert 300_000 < len(kept) < 700_000 and [int(x) for x in kept] == huge[-len(kept) :]
    assert "of 700,000 values kept" in big["attributes"][CUT]["inputs.prompt_ids"]
    assert small["inputs"]["prompt_ids"] == " ".join(map(str, [1, 2, 3] * 10)) and CUT not in small["attributes"]


def test_a_long_turn_with_its_text_and_chat_is_measured_as_sent(weave_trace_server, tmp_path):
    """A 300k-token turn with token2text and texts kept whole (``max_payload_chars=None``): its ids
    fit the limit alone, but its text, and the chat
    messages made from that text for Weave's Chat tab, take it past it. The call is measured with
    every field it is sent with, cut by the same rule (its end kept), and the cut said on it."""
    import asyncio
    import random

    from transformers import AutoTokenizer

    from rollscope.agentloops.llm_client import TracedLLMClient
    from rollscope.tracing.backends.weave import CUT
    from tests.agentloops.real_models import model_dir

    tokenizer = AutoTokenizer.from_pretrained(model_dir("qwen2.5", tmp_path / "qwen"))
    rng = random.Random(2)
    words = ["alpha", "beta", "gamma", "delta", "tool", "result", "value", "line"]
    text = "<|im_start|>user\n" + " ".join(rng.choice(words) + str(rng.randrange(100)) for _ in range(190_000))
    prompt = tokenizer.encode(text)
    assert len(prompt) > 250_000 and len(" ".join(map(str, prompt))) < 3 << 20  # (the ids alone fit)

    class Server:  # the LLM server, a test double
        async def generate(self, request_id, *, prompt_ids, sampling_params):
            return {"token_ids": tokenizer.encode(" done"), "stop_reason": "stop"}

    async def loop():
        with tracing.rollout_trace_attr(step=0, sample_index=0):
            await TracedLLMClient(Server(), tokenizer).generate("r", prompt_ids=prompt, sampling_params={})

    tracing.init_tracing(backend="weave", weave_project="ent/long-turn", token2text=True, max_payload_chars=None)
    asyncio.run(loop())
    assert tracing.flush_tracing(300)
    assert all(s["errors"] == 0 and s["dropped"] == 0 for s in tracing.stats()["backends"].values())
    tracing.shutdown_tracing(300)
    [call] = [c for c in weave_calls("ent/long-turn") if c["display_name"] == "llm.generate"]
    assert CUT in call["attributes"] and "messages" in call["inputs"]
    assert call["inputs"]["prompt_ids"] and text.endswith(call["inputs"]["prompt_text"][-1000:])


def test_every_call_of_a_trajectory_links_its_wandb_run_and_step(weave_trace_server):
    """A trajectory's W&B run (``tracing.wandb_run``) on each of its calls, in Weave's own fields
    (the run's page lists them, the Traces table filters by run); a trajectory without one has none."""
    import weave

    from rollscope.tracing import wandb_run

    tracing.init_tracing(backend="weave", weave_project="ent/runs")
    _rollout(3, 0, 0, False, 1.0)  # (no run)
    with (
        tracing.rollout_trace_attr(step=3, sample_index=1, **{wandb_run.ATTRIBUTE: "ent/runs/r8x2k1"}),
        tracing.trace_span("ToolAgentLoop.run", kind="agent"),
        tracing.trace_span("llm.generate", kind="llm", inputs={"prompt_text": "hi"}) as s,
    ):
        s.outputs = {"response_text": "hello"}
    assert tracing.flush_tracing(60)
    tracing.shutdown_tracing(60)
    calls = weave_calls("ent/runs")
    linked = [c for c in calls if c["wb_run_id"]]
    assert len(linked) == 3 and {(c["wb_run_id"], c["wb_run_step"]) for c in linked} == {("ent/runs/r8x2k1", 3)}
    assert len(calls) == 7  # the other trajectory's four calls, unlinked
    found = list(weave.init("ent/runs").get_calls(filter={"wb_run_ids": ["ent/runs/r8x2k1"]}))
    assert {c.id for c in found} == {c["id"] for c in linked}
    from rollscope.sources import open_source

    for name in ("ent/runs/r8x2k1", "r8x2k1"):  # read back: the server filters by run, so does the reader
        with open_source("weave:ent/runs", wandb_run=name) as source:
            [trajectory] = source.trajectories(wandb_run=name)
            assert (trajectory.wandb_run, trajectory.step, trajectory.sample_index) == ("ent/runs/r8x2k1", 3, 1)
            assert source.count() == 1  # the server sent that run's root only
