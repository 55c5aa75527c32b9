"""Tools named by dotted path from the YAML tests."""

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
