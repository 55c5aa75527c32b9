"""Tools that ship with rollscope: calculator, answer checker (reward), Python sandbox, local search."""

from rollscope.tools.builtin.answer_checker import AnswerCheckerTool
from rollscope.tools.builtin.calculator import CalculatorTool
from rollscope.tools.builtin.local_search import LocalSearchTool
from rollscope.tools.builtin.python_sandbox import PythonSandboxTool

__all__ = ["AnswerCheckerTool", "CalculatorTool", "LocalSearchTool", "PythonSandboxTool"]
