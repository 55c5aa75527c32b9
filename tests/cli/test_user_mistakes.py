"""A new user's own tools, schemas, dataset and reward, each with one mistake: ``rollscope run``
says it in one line naming the file, the entry and the key, before verl, torch or a model is
imported; a reward that returns no number names the reward and the row."""

import subprocess
import sys
import textwrap

from tests.cli.test_run_cli import ENV, REPLIES, assert_one_line_error, rollscope

# The probe runs the command and says, as the process ends, whether anything heavy was imported.
PROBE = (
    "import atexit, runpy, sys; sys.argv = ['rollscope', *sys.argv[1:]]\n"
    "atexit.register(lambda: print('HEAVY' if {'verl', 'torch', 'transformers'} & set(sys.modules)"
    " else 'LIGHT', file=sys.stderr))\n"
    "runpy.run_module('rollscope.cli', run_name='__main__')\n"
)

SHOP = '''
def multiply(a: float, b: float) -> str:
    """Multiply.

    Args:
        a: one factor
        b: the other
    """
    return str(a * b)


def convert(amount: float, currency: str = "EUR") -> str:
    """Convert.

    Args:
        amount: how much
        currency: into what
    """
    return f"{amount} {currency}"


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    if ground_truth in solution_str:
        return 1.0


def format_score(data_source, solution_str, ground_truth, extra_info=None):
    return 1.0 if "<answer>" in solution_str else 0.0
'''

SCHEMA = "    tool_schema:\n      type: function\n      function:\n        name: {name}\n        description: d\n"
TOOL_FILES = {
    "config_typo.yaml": "tools:\n  - function: shop:multiply\n    confg: {timeout: 5}\n",
    "schema_typo.yaml": (
        "tools:\n  - class_name: shop_tools.PriceTool\n    config: {type: native}\n"
        + SCHEMA.format(name="price").replace("tool_schema", "tool_shema")
    ),
    "wrong_parameters.yaml": (
        "tools:\n  - function: shop:multiply\n"
        + SCHEMA.format(name="multiply")
        + "        parameters: {type: object, properties: {x: {type: number}, y: {type: number}}"
        ", required: [x, y]}\n"
    ),
    "required_undeclared.yaml": (
        "tools:\n  - function: shop:convert\n"
        + SCHEMA.format(name="convert")
        + "        parameters: {type: object, properties: {amount: {type: number}},"
        " required: [amount, currency]}\n"
    ),
}


def _workspace(tmp_path):
    (tmp_path / "shop.py").write_text(SHOP)
    (tmp_path / "shop_tools.py").write_text(
        "from verl.tools.base_tool import BaseTool\n\n\nclass PriceTool(BaseTool):\n    pass\n"
    )
    for name, body in TOOL_FILES.items():
        (tmp_path / name).write_text(body)
    (tmp_path / "replies.yaml").write_text(REPLIES)
    (tmp_path / "rows.jsonl").write_text('{"prompt": [{"role": "user", "content": "2 * 3?"}], "data_source": "shop"}\n')


def test_five_mistakes_each_one_line_before_the_heavy_imports(tmp_path):
    _workspace(tmp_path)
    scripted = f"scripted:{tmp_path / 'replies.yaml'}"
    cases = [
        (
            "tools=config_typo.yaml",
            "config_typo.yaml: tools[0] (shop:multiply): confg: unknown key; did you mean 'config'?",
        ),
        (
            "tools=schema_typo.yaml",
            "schema_typo.yaml: tools[0] (shop_tools.PriceTool): tool_shema: unknown key; did you mean 'tool_schema'?",
        ),
        (
            "tools=wrong_parameters.yaml",
            "wrong_parameters.yaml: tools[0] (shop:multiply): "
            "tool_schema.function.parameters.properties: 'x', 'y' not parameters of shop:multiply(a, b)",
        ),
        (
            "tools=required_undeclared.yaml",
            "required_undeclared.yaml: tools[0] (shop:convert): "
            "tool_schema.function.parameters.required: 'currency' not in properties (amount)",
        ),
        (
            "reward=shop:compute_score",
            "dataset rows.jsonl: reward 'shop:compute_score' reads ground_truth (each "
            "row's reward_model.ground_truth), which 1 of 1 rows lack (row 0 first)",
        ),
    ]
    for arg, fragment in cases:
        result = subprocess.run(
            [sys.executable, "-c", PROBE, "run", "gsm8k-calculator", "dataset=rows.jsonl", arg, "--llm", scripted],
            capture_output=True,
            text=True,
            env=ENV,
            timeout=120,
            cwd=tmp_path,
        )
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and "Traceback" not in result.stderr, (arg, result.stderr)
        assert lines[-1] == "LIGHT", (arg, result.stderr)
        assert lines[-2].startswith("rollscope: error: ") and fragment in lines[-2], (arg, lines[-2])
    # A reward that reads no ground truth runs on rows without one.
    result = rollscope(
        "run",
        "gsm8k-calculator",
        "dataset=rows.jsonl",
        "reward=shop:format_score",
        "--llm",
        scripted,
        "--quiet",
        "--dir",
        str(tmp_path / "t"),
        cwd=tmp_path,
    )
    assert result.returncode == 0 and "1 of 1" in result.stdout, result.stderr


def test_the_same_mistakes_are_said_by_load_tools(tmp_path, monkeypatch, caplog):
    """``load_tools`` (the Python path, and verl's worker through rollscope) says them the same way;
    a parameter's misspelt JSON Schema keyword (verl's own search-tool example writes ``item:``) is
    warned and the tool loads, as verl loads it."""
    import pytest

    from rollscope.tools import ToolConfigError, load_tools

    _workspace(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name, fragment in (
        ("config_typo.yaml", "confg: unknown key; did you mean 'config'?"),
        ("schema_typo.yaml", "tool_shema: unknown key; did you mean 'tool_schema'?"),
        ("wrong_parameters.yaml", "'x', 'y' not parameters of shop:multiply(a, b)"),
        ("required_undeclared.yaml", "required: 'currency' not in properties"),
    ):
        with pytest.raises(ToolConfigError, match=f"^{tmp_path / name}: tools\\[0\\] .*") as err:
            load_tools(tmp_path / name)
        assert fragment in str(err.value), str(err.value)
    (tmp_path / "item_typo.yaml").write_text(
        "tools:\n  - function: shop:multiply\n"
        + SCHEMA.format(name="multiply")
        + "        parameters: {type: object, properties: {a: {type: number}, b: {type: array, item: {type: number}}},"
        " required: [a, b]}\n"
    )
    [multiply] = load_tools(tmp_path / "item_typo.yaml")
    assert multiply.name == "multiply"
    assert "properties.b.item: unknown key; did you mean 'items'?" in caplog.text


def test_a_reward_that_returns_none_is_named_with_its_row(tmp_path):
    """The run's error names the reward, the row and what it returned, and points at the reward's
    own definition, not into rollscope."""
    _workspace(tmp_path)
    (tmp_path / "rows.jsonl").write_text(
        textwrap.dedent("""\
        {"prompt": [{"role": "user", "content": "2 * 3?"}], "reward_model": {"ground_truth": "never"}}
        {"prompt": [{"role": "user", "content": "2 * 4?"}], "reward_model": {"ground_truth": "never"}}
        """)
    )
    result = rollscope(
        "run",
        "gsm8k-calculator",
        "dataset=rows.jsonl",
        "reward=shop:compute_score",
        "--llm",
        f"scripted:{tmp_path / 'replies.yaml'}",
        "--dir",
        str(tmp_path / "t"),
        cwd=tmp_path,
    )
    assert_one_line_error(
        result,
        3,
        "every trajectory failed (2 in the reward, 2 of 2); the first: RewardError: reward shop:compute_score returned "
        "None for row ",
        "expected a number or a dict with a numeric 'score' (at shop.py:22, in compute_score)",
    )
    assert "rollscope/runner" not in result.stderr


SLOW = '''
import asyncio

CALLS = []


async def multiply(a: float, b: float) -> str:
    """Multiply; from the fifth call on, slowly.

    Args:
        a: one factor
        b: the other
    """
    CALLS.append(a)
    if len(CALLS) > 4:
        await asyncio.sleep(120)
    return str(a * b)


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    raise ValueError("the grader is down")
'''


def test_a_stopped_run_says_its_running_trajectories_were_cancelled(tmp_path):
    """The first four trajectories fail alike (their reward raises) while four more wait on a slow
    tool: the run stops, and those four are stored as cancelled, with why, no span of theirs an
    error and the tool not blamed."""
    from rollscope.store import TraceStore

    (tmp_path / "slow.py").write_text(SLOW)
    (tmp_path / "tools.yaml").write_text("tools:\n  - function: slow:multiply\n")
    (tmp_path / "replies.yaml").write_text(
        """replies:\n  - '<tool_call>{"name": "multiply", "arguments": """
        """{"a": 6, "b": 7}}</tool_call>'\n  - 'It is 42.'\n"""
    )
    (tmp_path / "rows.jsonl").write_text(
        "".join(
            f'{{"prompt": [{{"role": "user", "content": "6 * 7, take {i}?"}}], '
            f'"reward_model": {{"ground_truth": "42"}}}}\n'
            for i in range(8)
        )
    )
    result = rollscope(
        "run",
        "gsm8k-calculator",
        "dataset=rows.jsonl",
        "tools=tools.yaml",
        "reward=slow:compute_score",
        "--llm",
        f"scripted:{tmp_path / 'replies.yaml'}",
        "--concurrency",
        "8",
        "--dir",
        str(tmp_path / "t"),
        cwd=tmp_path,
    )
    assert result.returncode == 3 and "rollscope: error: the first 4 trajectories failed the same way" in result.stderr
    with TraceStore(tmp_path / "t") as store:
        records = [store.get(t.id) for t in store.trajectories()]
        assert store.count(status="cancelled") == 4
    by_status = {}
    for record in records:
        by_status.setdefault(record.status, []).append(record)
    assert sorted((status, len(found)) for status, found in by_status.items()) == [("cancelled", 4), ("error", 4)]
    for record in by_status["cancelled"]:
        assert record.error_message.startswith(
            "cancelled: the run stopped after RunFailed: the first 4 trajectories failed the same way"
        ), record.error_message
        assert record.num_errors == 0 and "first_error" not in record.attributes
        [tool] = [s for s in record.spans if s.kind == "tool"]
        assert tool.status == "cancelled" and not [s for s in record.spans if s.status == "error"]
    listed = rollscope("traces", "ls", "--dir", str(tmp_path / "t"), "--status", "cancelled", "--json")
    assert len(__import__("json").loads(listed.stdout)) == 4, listed.stderr
