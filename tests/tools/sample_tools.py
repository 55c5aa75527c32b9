"""Tools named by dotted path from the YAML tests."""

from verl.tools.base_tool import BaseTool

from rollscope.tools import tool


@tool
def shout(text: str) -> str:
    """Upper-case a text.

    Args:
        text: what to shout
    """
    return text.upper()


def whisper(text: str) -> str:
    """Lower-case a text.

    Args:
        text: what to whisper
    """
    return text.lower()


class NotATool:
    pass


class NeedsAKey(BaseTool):
    """A verl tool whose own __init__ fails (its service's key is not set)."""

    def __init__(self, config, tool_schema):
        super().__init__(config, tool_schema)
        raise RuntimeError("SEARCH_API_KEY is not set")
