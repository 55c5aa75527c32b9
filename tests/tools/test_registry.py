"""Tool YAML: verl's format unchanged, function tools by path, and one clear error per mistake."""

import asyncio
import textwrap
from pathlib import Path

import pytest
from verl.tools.tool_registry import initialize_tools_from_config

from rollscope.bundled import path as config_path
from rollscope.tools import ToolConfigError, load_tools


def _yaml(tmp_path, body):
    p = tmp_path / "tools.yaml"
    p.write_text(textwrap.dedent(body))
    return p


def test_verl_format_and_function_entries(tmp_path):
    p = _yaml(
        tmp_path,
        """
        tools:
          - class_name: rollscope.tools.builtin.CalculatorTool
            config: {type: native, timeout: 3}
          - function: tests.tools.sample_tools:shout
          - function: tests.tools.sample_tools.whisper
            config: {timeout: 1}
          - class_name: rollscope.tools.FunctionTool
            config: {type: native, function: "tests.tools.sample_tools:whisper"}
            tool_schema:
              type: function
              function:
                name: murmur
                description: Lower-case a text, renamed.
                parameters: {type: object, properties: {text: {type: string}}, required: [text]}
        """,
    )
    tools = load_tools(p)
    assert [t.name for t in tools] == ["calculator", "shout", "whisper", "murmur"]
    assert tools[0].timeout_s == 3 and tools[2].timeout_s == 1
    response, _, _ = asyncio.run(tools[3].execute("i", {"text": "QUIET"}))
    assert response.text == "quiet"


def test_verls_own_loader_reads_the_shipped_yaml():
    tools = initialize_tools_from_config(str(config_path("gsm8k_tools.yaml")))
    assert [t.name for t in tools] == ["calculator", "submit_answer"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "tools:\n  - class_name: rollscope.tools.builtin.Nope\n    config: {type: native}\n",
            r"tools\[0\] \(rollscope.tools.builtin.Nope\): module 'rollscope.tools.builtin' has no attribute 'Nope'",
        ),
        (
            "tools:\n  - class_name: tests.tools.sample_tools.NotATool\n    config: {type: native}\n",
            r"tools\[0\] \(tests.tools.sample_tools.NotATool\): 'tests.tools.sample_tools.NotATool' is not a subclass",
        ),
        (
            "tools:\n  - class_name: rollscope.tools.builtin.CalculatorTool\n    config: {type: native}\n"
            "    tool_schema: {type: function, function: {name: calc}}\n",
            r"\(rollscope.tools.builtin.CalculatorTool\): tool_schema.function.description: a string is needed, got None",
        ),
        (
            "tools:\n  - function: tests.tools.sample_tools:shout\n  - function: tests.tools.sample_tools:shout\n",
            r"tools\[1\] \(tests.tools.sample_tools:shout\): duplicate tool name 'shout' \(also tools\[0\]\)",
        ),
        (
            "tools:\n  - function: no_such_module_xyz:fn\n",
            r"tools\[0\] \(no_such_module_xyz:fn\): cannot import module 'no_such_module_xyz'",
        ),
        ("tools:\n  - config: {type: native}\n", r"tools\[0\] \(\?\): needs 'class_name'"),
        (
            "tools:\n  - class_name: rollscope.tools.builtin.CalculatorTool\n    config: {type: mcp}\n",
            r"config.type 'mcp' is not supported",
        ),
        (
            "tools:\n  - class_name: verl.tools.base_tool.BaseTool\n    config: {type: native}\n",
            r"no tool_schema given and the class provides none",
        ),
        (
            "tools:\n  - class_name: tests.tools.sample_tools.NeedsAKey\n    config: {type: native}\n"
            "    tool_schema: {type: function, function: {name: s, description: search}}\n",
            r"NeedsAKey\(config, tool_schema\) raised RuntimeError: SEARCH_API_KEY is not set",
        ),
        ("tool: []\n", r"expected a top-level 'tools:' list"),
        ("tools: [\n", r"not valid YAML"),
    ],
)
def test_mistakes_name_the_file_and_entry(tmp_path, body, message):
    p = _yaml(tmp_path, body)
    with pytest.raises(ToolConfigError, match=f"^{p}: .*{message}" if "tools[" not in message else message):
        load_tools(p)


def test_missing_file(tmp_path):
    with pytest.raises(ToolConfigError, match="cannot read tool config"):
        load_tools(tmp_path / "absent.yaml")


VERL_CONFIGS = sorted((Path(__file__).resolve().parent.parent / "fixtures" / "verl_tools").glob("*.yaml"))


@pytest.mark.parametrize("path", VERL_CONFIGS, ids=[p.name for p in VERL_CONFIGS])
def test_verls_own_tool_configs_load_as_in_verl(path):
    """verl's tool YAML (its repository's example and test configs): what verl's loader builds,
    rollscope's builds — the same classes, names and schemas; what verl refuses (a class that left
    its package), rollscope refuses too, in one ToolConfigError naming the file and the entry."""
    try:
        theirs = initialize_tools_from_config(str(path))
    except Exception:  # (verl's: "'NoneType' object has no attribute 'loader'", for a module not there)
        with pytest.raises(ToolConfigError) as err:
            load_tools(path)
        assert str(err.value).startswith(f"{path}: tools[0] (")
        assert "cannot import module 'verl.tools." in str(err.value)
        return
    ours = load_tools(path)
    assert [(type(t), t.name, t.tool_schema.model_dump()) for t in ours] == [
        (type(t), t.name, t.tool_schema.model_dump()) for t in theirs
    ]


def test_loading_prints_no_schema_and_keeps_what_a_tool_prints_itself(tmp_path, capsys, monkeypatch):
    """verl's ``BaseTool.__init__`` prints each tool's schema (a dozen lines a tool, every run):
    not through rollscope's loader; what a tool's own ``__init__`` prints still shows."""
    (tmp_path / "loud_tools.py").write_text(
        "from verl.tools.base_tool import BaseTool\n\n\nclass LoudTool(BaseTool):\n"
        "    def __init__(self, config, tool_schema):\n        super().__init__(config, tool_schema)\n"
        "        print('LoudTool ready')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    p = _yaml(
        tmp_path,
        """
        tools:
          - class_name: rollscope.tools.builtin.CalculatorTool
            config: {type: native}
          - class_name: loud_tools.LoudTool
            config: {type: native}
            tool_schema: {type: function, function: {name: loud, description: Be loud.}}
        """,
    )
    assert [t.name for t in load_tools(p)] == ["calculator", "loud"]
    assert capsys.readouterr().out == "LoudTool ready\n"


@pytest.mark.parametrize(
    ("module", "raised"),
    [
        ("raise RuntimeError('no GPU found')\n", "RuntimeError: no GPU found"),
        (
            "from verl.tools.base_tool import BaseTool\n\n\nclass BrokenTool(BaseTool):\n"
            "    def __init__(self, config, tool_schema):\n        raise SystemExit('bye')\n",
            "SystemExit: bye",
        ),
    ],
)
def test_a_tool_whose_own_code_fails_is_one_error_naming_file_and_entry(tmp_path, monkeypatch, module, raised):
    """The tool's module raising as it is imported, or its class leaving as it is built: a
    ``ToolConfigError`` naming the file, the entry and what was raised, never the raw exception."""
    (tmp_path / "broken_tools.py").write_text(module)
    monkeypatch.syspath_prepend(str(tmp_path))
    p = _yaml(
        tmp_path,
        """
        tools:
          - class_name: rollscope.tools.builtin.CalculatorTool
            config: {type: native}
          - class_name: broken_tools.BrokenTool
            config: {type: native}
            tool_schema: {type: function, function: {name: broken, description: Breaks.}}
        """,
    )
    with pytest.raises(ToolConfigError, match=rf"tools\.yaml: tools\[1\].*{raised}"):
        load_tools(p)
