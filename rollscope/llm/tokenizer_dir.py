"""A model directory without weights: a byte-level BPE tokenizer trained on a few sentences, with a
ChatML chat template, and a tiny Qwen2 config (no download). verl needs a model directory even when
no model runs on this machine: the scripted LLM (``--llm scripted:FILE``) and replays use this one.
"""

from __future__ import annotations

import hashlib
import string
from collections.abc import Sequence
from pathlib import Path

# A message's content with its tool calls written back where and as the model wrote them
# (rollscope's parser keeps each call's ``text`` and its place ``at`` in the content), so that
# re-rendering a conversation gives the tokens the model produced, a call that did not parse
# included; a call without them (a dataset's message) in the canonical form after the content.
CONTENT_WITH_CALLS = (
    "{% set content = m['content'] or '' %}{% set ns = namespace(at=0) %}{% for c in m['tool_calls'] or [] %}"
    "{% set at = c['at'] if c['at'] is defined else content | length %}{{ content[ns.at:at] }}"
    "{% set ns.at = at %}{% if c['text'] is defined %}{{ c['text'] }}{% else %}{% set f = c['function'] %}"
    "<tool_call>{\"name\": {{ f['name'] | tojson }}, \"arguments\": {% if f['arguments'] is string %}"
    "{{ f['arguments'] }}{% else %}{{ f['arguments'] | tojson }}{% endif %}}</tool_call>{% endif %}"
    "{% endfor %}{{ content[ns.at:] }}"
)
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n" + CONTENT_WITH_CALLS + "<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CORPUS = [
    "What is 17 * 23? Use the calculator tool.",
    '<tool_call>{"name": "calculator", "arguments": {"expression": "17 * 23"}}</tool_call>',
    "The answer is 391.",
    "user assistant tool system error unknown invalid arguments JSON",
] * 30


def model_dir_version() -> str:
    """What ``make_model_dir``'s default directory depends on, as a short digest: a directory kept
    under this name (the scripted LLM's) was made from this template and corpus."""
    return hashlib.sha256("\0".join([CHAT_TEMPLATE, *CORPUS]).encode()).hexdigest()[:12]


def make_model_dir(
    path: Path,
    corpus: Sequence[str] = CORPUS,
    chat_template: str = CHAT_TEMPLATE,
    vocab_size: int = 600,
    every_byte: bool = True,
    **model: int,
) -> Path:
    """Write tokenizer and config files into ``path`` (created if missing); returns it. ``model``
    overrides the Qwen2 sizes (``hidden_size``, ``num_hidden_layers``, ...) of the config.
    ``every_byte=False``: a token per printable ASCII character (and newline, tab) instead of one
    per byte, so a model sampling from it never writes half a character (other characters do not
    tokenize: for a model whose whole world is ASCII)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    # a token per byte, or the ASCII characters learned from a string of them put beside the corpus
    alphabet, extra = (pre_tokenizers.ByteLevel.alphabet(), []) if every_byte else ([], [string.printable])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, initial_alphabet=alphabet)
    tok.train_from_iterator([*corpus, *extra], trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
    )
    fast.chat_template = chat_template
    path.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(path)
    sizes = dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=4096,
    )
    cfg = Qwen2Config(
        vocab_size=len(fast), eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id, **{**sizes, **model}
    )
    cfg.architectures = ["Qwen2ForCausalLM"]
    cfg.save_pretrained(path)
    return path
