"""Arithmetic through Python's AST — never eval: only numbers and + - * / // % ** and unary -."""

from __future__ import annotations

import ast
import math
import operator
from typing import Any

from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from rollscope.tools.traced_tool import ExecuteResult, ToolError, TracedTool

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
MAX_EXPRESSION_CHARS = 200
MAX_EXPONENT = 100

SCHEMA = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression with + - * / // % ** and parentheses.",
        "parameters": {
            "type": "object",
            "properties": {
                "expression": {
                    "type": "string",
                    "description": "for example (17 * 23) - 4",
                    "pattern": "^[0-9 .+*/%()-]+$",
                }
            },
            "required": ["expression"],
        },
    },
}


def evaluate(expression: str) -> int | float:
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ToolError(f"cannot parse {expression!r}: {exc.msg}") from None
    return _eval(tree.body)


def _eval(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ToolError(f"exponent {right} is larger than {MAX_EXPONENT}")
        try:
            return _BINARY[type(node.op)](left, right)
        except ZeroDivisionError:
            raise ToolError("division by zero") from None
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    raise ToolError(f"unsupported element {type(node).__name__}: only numbers and arithmetic operators")


def format_number(value: int | float) -> str:
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ToolError("the result is not a finite number")
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.10g}"
    return str(value)


class CalculatorTool(TracedTool):
    def __init__(self, config: dict | None = None, tool_schema: OpenAIFunctionToolSchema | None = None) -> None:
        super().__init__(config, tool_schema or OpenAIFunctionToolSchema.model_validate(SCHEMA))

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> ExecuteResult:
        expression = parameters.get("expression")
        if not isinstance(expression, str):
            raise ToolError("'expression' must be a string")
        return ToolResponse(text=format_number(evaluate(expression))), 0.0, {}
