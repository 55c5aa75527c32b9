"""Tools: ``TracedTool`` (verl's BaseTool, traced), ``@tool`` function tools, YAML loading,
and bundled tools under ``rollscope.tools.builtin``."""

from rollscope.tools.function_tool import FunctionTool, as_tool_result, tool
from rollscope.tools.registry import ToolConfigError, load_tools
from rollscope.tools.schema import ToolDefinitionError, check_arguments, schema_from_function
from rollscope.tools.traced_tool import ToolError, TracedTool

__all__ = [
    "FunctionTool",
    "ToolConfigError",
    "ToolDefinitionError",
    "ToolError",
    "TracedTool",
    "as_tool_result",
    "check_arguments",
    "load_tools",
    "schema_from_function",
    "tool",
]
