"""Token-in/token-out LLM clients with verl's ``generate`` shape.

``EmbeddedLLM`` (llama.cpp in-process), ``OpenAICompatibleLLM`` (vLLM, llama.cpp servers),
``SGLangLLM`` (SGLang's native API), ``ScriptedLLM`` (a test double), and ``create_llm`` for a
``--llm`` spec. Imported on first use: the CLI's trace commands do not pay for verl's import.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "EmbeddedLLM": "rollscope.llm.embedded",
    "OpenAICompatibleLLM": "rollscope.llm.openai_compat",
    "SGLangLLM": "rollscope.llm.sglang",
    "ScriptedLLM": "rollscope.llm.scripted",
    "LLMServerError": "rollscope.llm.base",
    "create_llm": "rollscope.llm.factory",
}
__all__ = list(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'rollscope.llm' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
