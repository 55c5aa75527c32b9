"""The training demo's task, data and model: a tiny policy that learns to use the calculator.

Sixteen two-digit multiplications. The policy is a ~150K-parameter Qwen2 with a tokenizer trained
here, warm-started in a few seconds on demonstrations in which one answer in four calls the
calculator (and then states its result) and the rest guess a wrong number. The reward
(``rollscope.bundled.rewards.calculator_drill``) is 1 for the right final number in the model's
own words, so GRPO can only raise it by calling the calculator more often: the reward curve and the
tool-call count per trajectory climb together, and every step is in the trace.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from rollscope.llm.tokenizer_dir import CONTENT_WITH_CALLS, make_model_dir

# tool responses are wrapped in tags the decoded text keeps (special tokens are dropped there),
# so the reward tells the model's own words from the calculator's. An assistant turn's tool calls
# are written back where and as the model wrote them (``CONTENT_WITH_CALLS``): re-rendering a
# conversation gives the tokens it was trained on. The end-of-turn token verl's own parser leaves
# in a reply (decoded with special tokens) is written once.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['role'] == 'tool' %}<tool_response>{{ m['content'] }}</tool_response>"
    "{% else %}{% filter replace('<|im_end|>', '') %}" + CONTENT_WITH_CALLS + "{% endfilter %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TOOL_SHARE = 0.25  # of the warm-start demonstrations that call the calculator
# The reward-hacking demo's (``loophole``): the share of warm-start demonstrations that list
# candidates, the right one among them, where the rest guess one wrong number
LIST_SHARE = 0.08
MODEL_SIZES = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
)
# vLLM's CPU attention takes head sizes 32, 64, 80, ... only: the same model with 2 heads of 32, which
# the demo and the tests serve on both engines (vLLM and SGLang)
ENGINE_MODEL_SIZES = {**MODEL_SIZES, "num_attention_heads": 2, "num_key_value_heads": 1}
WARM_START_STEPS = 400
MODEL_VERSION = 4  # part of the cache key: bump when the task or the warm start changes


def problems(count: int = 16, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    found = []
    for index in range(count):
        a, b = rng.randint(12, 49), rng.randint(12, 49)
        found.append(
            {"index": index, "question": f"What is {a} * {b}?", "expression": f"{a} * {b}", "answer": str(a * b)}
        )
    return found


def tool_call(expression: str) -> str:
    return f'<tool_call>{{"name": "calculator", "arguments": {{"expression": "{expression}"}}}}</tool_call>'


def wrong_answers(answer: str, rng: random.Random, k: int = 3) -> list[str]:
    value = int(answer)
    return [str(value + d) for d in rng.sample([d for d in range(-40, 41) if d], k)]


def conversations(
    task: list[dict[str, Any]], seed: int = 0, tool_share: float = TOOL_SHARE
) -> list[tuple[list[dict[str, str]], float]]:
    """(messages, weight) demonstrations: per problem the calculator path with weight
    ``tool_share`` and three wrong guesses sharing the rest."""
    rng = random.Random(seed)
    found = []
    for p in task:
        user = {"role": "user", "content": p["question"]}
        found.append(
            (
                [
                    user,
                    {"role": "assistant", "content": tool_call(p["expression"])},
                    {"role": "tool", "content": p["answer"]},
                    {"role": "assistant", "content": f"The answer is {p['answer']}."},
                ],
                tool_share,
            )
        )
        guesses = wrong_answers(p["answer"], rng)
        for guess in guesses:
            found.append(
                ([user, {"role": "assistant", "content": f"The answer is {guess}."}], (1 - tool_share) / len(guesses))
            )
    return found


def listing_conversations(
    task: list[dict[str, Any]], seed: int = 0, list_share: float = LIST_SHARE
) -> list[tuple[list[dict[str, str]], float]]:
    """The reward-hacking demo's demonstrations: per problem, four candidates listed with the
    right one among them (never last: the final number is wrong) with weight ``list_share``,
    and three wrong guesses sharing the rest. A reward paying any mention of the answer pays
    the lists; an honest one pays nothing here."""
    rng = random.Random(seed)
    found = []
    for p in task:
        user = {"role": "user", "content": p["question"]}
        candidates = wrong_answers(p["answer"], rng)
        candidates.insert(rng.randrange(3), p["answer"])
        listed = f"The answer is {', '.join(candidates[:3])} or {candidates[3]}."
        found.append(([user, {"role": "assistant", "content": listed}], list_share))
        guesses = wrong_answers(p["answer"], rng)
        for guess in guesses:
            found.append(
                ([user, {"role": "assistant", "content": f"The answer is {guess}."}], (1 - list_share) / len(guesses))
            )
    return found


def build_model(
    path: Path,
    task: list[dict[str, Any]],
    seed: int = 0,
    tool_share: float = TOOL_SHARE,
    sizes: dict[str, int] | None = None,
    loophole: bool = False,
) -> Path:
    """Tokenizer, config and warm-started weights in ``path`` (kept: built once per version): on
    the calculator demonstrations, or with ``loophole`` on the listing ones."""
    sizes = sizes or MODEL_SIZES
    stamp = path / "rollscope-demo.json"
    key = {
        "version": MODEL_VERSION,
        "problems": task,
        "seed": seed,
        "tool_share": tool_share,
        "sizes": sizes,
        "chat_template": CHAT_TEMPLATE,
        **({"loophole": LIST_SHARE} if loophole else {}),
    }
    if stamp.is_file() and json.loads(stamp.read_text()) == key:
        return path
    import torch
    from transformers import AutoConfig, AutoTokenizer, Qwen2ForCausalLM

    demos = listing_conversations(task, seed) if loophole else conversations(task, seed, tool_share)
    corpus = [json.dumps(m) for messages, _ in demos for m in messages] * 4
    # (its texts are ASCII: with no token per byte the policy cannot sample half a character,
    # which no text re-encodes to: retokenization drift no template could prevent)
    make_model_dir(path, corpus=corpus, chat_template=CHAT_TEMPLATE, vocab_size=400, every_byte=False, **sizes)
    tokenizer = AutoTokenizer.from_pretrained(path)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(AutoConfig.from_pretrained(path))
    rows = [_supervised(tokenizer, messages) for messages, _ in demos]
    weights = torch.tensor([w for _, w in demos])
    width = max(len(ids) for ids, _ in rows)
    ids = torch.full((len(rows), width), tokenizer.pad_token_id)
    labels = torch.full((len(rows), width), -100)
    for i, (row_ids, row_labels) in enumerate(rows):
        ids[i, : len(row_ids)] = torch.tensor(row_ids)
        labels[i, : len(row_labels)] = torch.tensor(row_labels)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(WARM_START_STEPS):
        batch = torch.multinomial(weights, 32, replacement=True, generator=generator)
        loss = model(
            input_ids=ids[batch], attention_mask=(ids[batch] != tokenizer.pad_token_id).long(), labels=labels[batch]
        ).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    model.save_pretrained(path)
    stamp.write_text(json.dumps(key))
    return path


def _supervised(tokenizer: Any, messages: list[dict[str, str]]) -> tuple[list[int], list[int]]:
    """Token ids of a conversation as the agent loop builds it, and labels on what the assistant
    writes (its text and the end-of-turn token) only."""
    ids: list[int] = []
    labels: list[int] = []
    for i, message in enumerate(messages):
        if message["role"] == "assistant":
            reply = [*tokenizer.encode(message["content"], add_special_tokens=False), tokenizer.eos_token_id]
            ids += reply
            labels += reply
            continue
        rendered = tokenizer.apply_chat_template([message], add_generation_prompt=True, tokenize=False)
        if i > 0:  # after an assistant turn the template's newline follows the end-of-turn token
            rendered = "\n" + rendered
        part = tokenizer.encode(rendered, add_special_tokens=False)
        ids += part
        labels += [-100] * len(part)
    return ids, labels


def dataset_rows(task: list[dict[str, Any]], split: str) -> list[dict[str, Any]]:
    """verl's RLHFDataset columns (prompt messages, reward_model.ground_truth, extra_info.index)."""
    return [
        {
            "data_source": "rollscope/calculator_drill",
            "prompt": [{"role": "user", "content": p["question"]}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": p["answer"]},
            "extra_info": {"index": p["index"], "split": split},
        }
        for p in task
    ]


def write_dataset(directory: Path, task: list[dict[str, Any]]) -> tuple[Path, Path]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for split in ("train", "val"):
        path = directory / f"{split}.parquet"
        pq.write_table(pa.Table.from_pylist(dataset_rows(task, split)), path)
        paths.append(path)
    return paths[0], paths[1]
