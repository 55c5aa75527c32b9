"""`rollscope traces ls` as a user runs it: a real subprocess over a real store."""

import json
import subprocess
import sys

import pytest

from rollscope import tracing


@pytest.fixture
def store_dir(tmp_path):
    d = tmp_path / "traces"
    tracing.init_tracing(project="p", experiment="cli", trace_dir=str(d))
    for sample in range(3):
        for n in range(2):
            with tracing.rollout_trace_attr(step=5, sample_index=sample, rollout_n=n):
                with tracing.trace_span("generate", kind="llm"):
                    pass
                tracing.set_reward(sample + n / 2)
    tracing.shutdown_tracing()
    return d


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "rollscope.cli", *args], capture_output=True, text=True, timeout=60)


@pytest.mark.slow
def test_ls_json_has_the_documented_fields(store_dir):
    out = _cli("traces", "ls", "--dir", str(store_dir), "--json", "--min-reward", "1", "--sort", "reward", "--desc")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [r["reward"] for r in rows] == [2.5, 2.0, 1.5, 1.0]
    for key in (
        "id",
        "experiment",
        "step",
        "sample_index",
        "rollout_n",
        "validate",
        "status",
        "reward",
        "num_turns",
        "num_tool_calls",
    ):
        assert key in rows[0]
    assert rows[0]["num_turns"] == 1 and rows[0]["experiment"] == "cli"


@pytest.mark.slow
def test_ls_table_and_clear_error(store_dir, tmp_path):
    out = _cli("traces", "ls", "--dir", str(store_dir), "--sample", "1")
    assert out.returncode == 0
    assert out.stdout.strip().splitlines()[-1] == f"2 of 2 matching trajectories (6 trajectories in all) in {store_dir}"
    nothing = _cli("traces", "ls", "--dir", str(store_dir), "--step", "99")  # says how many there are
    assert (
        nothing.stdout.strip().splitlines()[-1]
        == f"0 of 0 matching trajectories (6 trajectories in all) in {store_dir}"
    )
    first = _cli("traces", "ls", "--dir", str(store_dir), "--limit", "4")  # the limit said once, with how to lift it
    assert (
        first.stdout.strip().splitlines()[-1]
        == f"4 of 6 trajectories in {store_dir}; --limit N lists more, --limit 0 all"
    )
    everything = _cli("traces", "ls", "--dir", str(store_dir))
    assert everything.stdout.strip().splitlines()[-1] == f"6 of 6 trajectories in {store_dir}"
    missing = _cli("traces", "ls", "--dir", str(tmp_path / "none"))
    assert missing.returncode == 2
    expected = f"rollscope: error: no trace store at {tmp_path / 'none'} (set --dir or ROLLSCOPE_TRACE_DIR)"
    assert missing.stderr.strip() == expected


@pytest.mark.slow
def test_escape_sequences_in_names_and_model_output_are_shown_escaped(tmp_path):
    """Text from a model or a user never drives the terminal: clear-screen, window-title and colour
    sequences in experiment and agent names and in model output are printed as escapes."""
    clear, title, c1 = "\x1b[2J", "\x1b]0;pwned\x07", "\x9b31m"
    d = tmp_path / "traces"
    tracing.init_tracing(project="p", experiment=f"exp{clear}{title}", trace_dir=str(d))
    with (
        tracing.rollout_trace_attr(step=1, sample_index=0, name=f"agent{c1}"),
        tracing.trace_span("llm.generate", kind="llm") as s,
    ):
        s.outputs = {"response_text": f"reply {clear} with\ttab and\nnewline {title}"}
    tracing.shutdown_tracing()
    listing = _cli("traces", "ls", "--dir", str(d))
    [trajectory] = json.loads(_cli("traces", "ls", "--dir", str(d), "--json").stdout)
    shown = _cli("traces", "show", trajectory["id"], "--dir", str(d))
    for out in (listing.stdout, shown.stdout):
        assert "\x1b" not in out and "\x07" not in out and "\x9b" not in out
    assert "exp\\x1b[2J" in listing.stdout
    assert "reply \\x1b[2J with" in shown.stdout and "\\x1b]0;pwned\\x07" in shown.stdout
    assert "agent\\x9b31m" in shown.stdout


@pytest.mark.slow
def test_ui_on_a_port_already_taken_says_so_in_one_line(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _cli("ui", "--dir", str(tmp_path), "--port", str(port))
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "Traceback" not in result.stderr
    assert f"cannot serve on 127.0.0.1:{port}" in result.stderr and "--port 0" in result.stderr


@pytest.mark.slow
def test_ls_filters_by_wandb_run_by_path_or_id(tmp_path):
    """The trajectories of one W&B run (the ``wandb.run`` attribute verl's trainer gives them), named
    by its path or its id alone; a run whose id ends another's is not matched."""
    from tests.sources.wandb_runs import traced_runs

    d = tmp_path / "traces"
    traced_runs(d, ["ent/proj/r8x2k1", "ent/proj/r8x2k1", "ent/proj/xr8x2k1", None])
    for name in ("ent/proj/r8x2k1", "r8x2k1"):
        out = _cli("traces", "ls", "--dir", str(d), "--json", "--wandb-run", name)
        assert out.returncode == 0, out.stderr
        assert sorted(r["rollout_n"] for r in json.loads(out.stdout)) == [0, 1]
    out = _cli("traces", "ls", "--dir", str(d), "--json", "--wandb-run", "other")
    assert json.loads(out.stdout) == []
