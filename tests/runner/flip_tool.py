"""A calculator whose answer a test can break (``FlipCalculator.broken = True``): the changed tool
code a replay's --check must catch."""

from typing import Any

from rollscope.tools import TracedTool
from rollscope.tools.builtin.calculator import CalculatorTool


class FlipCalculator(TracedTool):
    broken = False  # set by a test: every answer is off by one

    def __init__(self, config: dict | None, tool_schema: Any = None) -> None:
        self.inner = CalculatorTool(config, tool_schema)
        super().__init__(config, self.inner.tool_schema)

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> Any:
        response, reward, metrics = await self.inner.execute(instance_id, parameters, **kwargs)
        if FlipCalculator.broken and response.text.lstrip("-").isdigit():
            return str(int(response.text) + 1)
        return response, reward, metrics
