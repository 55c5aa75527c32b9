"""Run verl's real agent-loop classes on a CPU, for tests and benchmarks (yours and rollscope's).

verl needs a model directory and a full trainer config even when no GPU server is involved. Here:
a model directory made on the spot (a byte-level BPE tokenizer trained on a few sentences, with a
ChatML chat template, and a tiny Qwen2 config — no weights, no download) and verl's own packaged
``ppo_trainer`` config composed with Hydra. Pair them with ``rollscope.llm.ScriptedLLM``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CORPUS = [
    "What is 17 * 23? Use the calculator tool.",
    '<tool_call>{"name": "calculator", "arguments": {"expression": "17 * 23"}}</tool_call>',
    "The answer is 391.",
    "user assistant tool system error unknown invalid arguments JSON",
] * 30


def make_model_dir(path: Path) -> Path:
    """Write tokenizer and config files into ``path`` (created if missing); returns it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())  # fmt: skip
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   additional_special_tokens=["<|im_start|>"])  # fmt: skip
    fast.chat_template = CHAT_TEMPLATE
    path.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(path)
    cfg = Qwen2Config(vocab_size=len(fast), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096)  # fmt: skip
    cfg.architectures = ["Qwen2ForCausalLM"]
    cfg.save_pretrained(path)
    return path


def compose_config(model_dir: Path, overrides: list[str] = ()) -> Any:
    """verl's ppo_trainer config for ``model_dir``, with rollscope's test defaults, then ``overrides``."""
    import verl
    from hydra import compose, initialize_config_dir

    config_dir = Path(verl.__file__).parent / "trainer" / "config"
    base = [
        f"actor_rollout_ref.model.path={model_dir}",
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.prompt_length=512",
        "actor_rollout_ref.rollout.response_length=512",
        "actor_rollout_ref.rollout.multi_turn.format=hermes",
        "trainer.project_name=rollscope_tests",
        "trainer.experiment_name=cpu",
    ]
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return compose("ppo_trainer", overrides=[*base, *overrides])


# ---- trace backends that fail the way remote ones do (test doubles, for fault tests and benchmarks) ----


def register_fault_backends(delay_s: float = 5.0) -> list[str]:
    """Register ``fault-down``, ``fault-slow`` and ``fault-raising``; returns their names.

    fault-down: every call fails as a collector that is not there (connection refused).
    fault-slow: every call takes ``delay_s`` (a server answering in 5 s).
    fault-raising: every call raises an unexpected error (a bug in a backend).
    """
    from rollscope.tracing.backends import TraceBackend, register_backend

    class DownBackend(TraceBackend):
        name = "fault-down"

        def on_trajectory_start(self, trajectory: Any) -> None:
            raise ConnectionRefusedError(111, "Connection refused (test double: collector down)")

        on_span_end = on_trajectory_end = on_trajectory_start

    class SlowBackend(TraceBackend):
        name = "fault-slow"

        def on_trajectory_start(self, trajectory: Any) -> None:
            import time

            time.sleep(delay_s)

        on_span_end = on_trajectory_end = on_trajectory_start

    class RaisingBackend(TraceBackend):
        name = "fault-raising"

        def on_trajectory_start(self, trajectory: Any) -> None:
            raise RuntimeError("backend bug (test double)")

        on_span_end = on_trajectory_end = on_trajectory_start

    for cls in (DownBackend, SlowBackend, RaisingBackend):
        register_backend(cls.name, cls)
    return [DownBackend.name, SlowBackend.name, RaisingBackend.name]


def replay(trajectory_id: str, store: str | None = None, *, config: str | None = None, tokenizer: Any = None) -> Any:
    """A stored trajectory as a regression test: every model turn from the record, tools, loop and
    reward run for real; the outcome's ``ok`` is False, with ``differences`` naming each changed
    tool result, final response or reward (``rollscope replay ID --check``)."""
    from rollscope.runner.replay import replay as run_replay

    return run_replay(trajectory_id, store=store, config=config, check=True, tokenizer=tokenizer)

