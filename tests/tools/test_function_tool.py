"""@tool: schemas from typed, documented functions; clear refusals; argument checks."""

import asyncio
import re
from typing import Literal

import pytest

from rollscope import tracing
from rollscope.tools import ToolDefinitionError, tool


@tool
def convert(amount: float, unit: Literal["km", "mi"], precision: int = 2, note: str | None = None) -> str:
    """Convert a distance between kilometres and miles.

    Args:
        amount: the distance to convert
        unit: the unit of `amount`
        precision: decimals in the result
        note: free text, ignored
    """
    factor = 0.621371 if unit == "km" else 1 / 0.621371
    return f"{round(amount * factor, precision)}"


@tool(name="fetch_user", timeout=0.3)
async def get_user(user_id: int) -> dict:
    """Fetch a user record.

    Args:
        user_id: numeric id
    """
    if user_id == 0:
        await asyncio.sleep(2)
    return {"id": user_id, "name": f"user{user_id}"}


def test_schema_from_signature_and_docstring():
    fn = convert.tool_schema.function
    assert fn.name == "convert" and fn.description == "Convert a distance between kilometres and miles."
    props = fn.parameters.properties
    assert props["amount"].type == "number" and props["amount"].description == "the distance to convert"
    assert props["unit"].type == "string" and props["unit"].enum == ["km", "mi"]
    assert props["precision"].type == "integer" and props["note"].type == "string"
    assert fn.parameters.required == ["amount", "unit"]
    assert get_user.name == "fetch_user" and get_user.timeout_s == 0.3
    assert convert(10, "km") == "6.21"  # still callable as a function


def test_execute_sync_and_async_with_traces(local_tracer, read_store):
    async def main():
        with tracing.rollout_trace_attr(step=0, sample_index=0):
            a = await convert.execute("i", {"amount": 10, "unit": "km"})
            b = await get_user.execute("i", {"user_id": 7})
            c = await get_user.execute("i", {"user_id": 0})
            return a, b, c

    a, b, c = asyncio.run(main())
    assert a[0].text == "6.21"
    assert b[0].text == '{"id": 7, "name": "user7"}'
    assert c[0].text == "Error: tool 'fetch_user' timed out after 0.3s"
    spans = read_store().trajectories()[0].spans
    assert [(s.name, s.status) for s in spans] == [
        ("convert", "ok"),
        ("fetch_user", "ok"),
        ("fetch_user", "error"),
    ]  # (named by the tool, not by FunctionTool)
    assert spans[0].attributes == {"tool.name": "convert"}


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        ({"unit": "km"}, "missing required argument 'amount'"),
        ({"amount": "ten", "unit": "km"}, "argument 'amount' must be number, got str 'ten'"),
        ({"amount": 1, "unit": "yards"}, "argument 'unit' must be one of ['km', 'mi'], got 'yards'"),
        ({"amount": 1, "unit": "km", "speed": 3}, "unknown argument 'speed' (allowed: amount, unit, precision, note)"),
        ({"amount": True, "unit": "km"}, "argument 'amount' must be number, got bool True"),
    ],
)
def test_bad_arguments_are_explained(params, problem):
    response, reward, _ = asyncio.run(convert.execute("i", params))
    assert problem in response.text and response.text.startswith("Error: invalid arguments for 'convert'")
    assert reward == 0.0


def _no_doc(x: int) -> int:
    return x


def _no_annotation(x) -> int:
    """Do it.

    Args:
        x: a number
    """
    return x


def _undocumented(x: int, y: int) -> int:
    """Do it.

    Args:
        x: a number
    """
    return x


def _varargs(*xs: int) -> int:
    """Do it.

    Args:
        xs: numbers
    """
    return 0


def _object_param(x: object) -> int:
    """Do it.

    Args:
        x: anything
    """
    return 0


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (_no_doc, "no docstring; its first line tells the model what the tool does"),
        (_no_annotation, "parameter 'x' has no type annotation"),
        (_undocumented, "parameter 'y' is not described in the docstring's Args: section"),
        (_varargs, "*xs / **xs cannot be described"),
        (_object_param, "parameter 'x': type <class 'object'> cannot be described in JSON Schema"),
    ],
)
def test_undescribable_functions_are_refused(fn, message):
    with pytest.raises(ToolDefinitionError, match=f"tool '{fn.__name__}'.*{re.escape(message)}"):
        tool(fn)


def test_a_sync_tool_whose_parameters_are_called_name_and_fn_runs():
    """A sync tool runs on a thread of its own (``tools.blocking.in_thread``): its parameters are
    passed whole, whatever they are called."""

    @tool
    def greet(name: str, fn: str) -> str:
        """Greet someone.

        Args:
            name: who
            fn: how
        """
        return f"{fn} {name}"

    response, reward, _ = asyncio.run(greet.execute("i", {"name": "Ada", "fn": "hello"}))
    assert response.text == "hello Ada" and reward == 0.0
