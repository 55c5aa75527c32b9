"""Token-in/token-out LLM clients with verl's ``generate`` shape."""

from rollscope.llm.scripted import ScriptedLLM

__all__ = ["ScriptedLLM"]
