"""A stored trajectory as a dataset row: its ids, its GRPO group, the conversation as chat
messages, the reward and what training recorded, its counts and timings.

The conversation is rebuilt from the spans, not from the rendered prompt: the dataset's own
messages (the run span's ``raw_prompt``), then each llm turn's reply as an assistant message and
each tool call's result as a tool message, in the order they happened. That is the form chat
datasets (TRL's conversational format, a ``datasets`` ``messages`` column) take, whatever chat
template rendered it for the model.
"""

from __future__ import annotations

import json
from typing import Any

from rollscope.analysis.grpo import group_advantages
from rollscope.semconv import REWARD_DETAILS
from rollscope.trajectory.records import SpanRecord, TrajectoryRecord
from rollscope.trajectory.text import recorded_decoder, with_text

# Per response token, what the trainer computed (``trainer.training_record``): lists as long as the
# response, None where the run recorded none. ``token_advantages`` is verl's advantages tensor: the
# record's per-token values, or its one GRPO value on the loss tokens and 0 elsewhere.
TOKEN_COLUMNS = ("response_mask", "old_log_probs", "rollout_log_probs", "entropy", "ref_log_probs", "token_advantages")
# The columns of a row, in order (``trajectory_row``); what Parquet's schema is built from.
COLUMNS = (
    "id",
    "project",
    "experiment",
    "step",
    "sample_index",
    "rollout_n",
    "validate",
    "group_id",
    "data_source",
    "ground_truth",
    "prompt",
    "messages",
    "response",
    "reward",
    "reward_details",
    "group_size",
    "group_mean",
    "group_std",
    "group_advantage",
    "advantage",
    "policy_version",
    "status",
    "turns",
    "tool_calls",
    "tool_errors",
    "errors",
    "error_message",
    "truncated",
    "start_ns",
    "duration_s",
    *TOKEN_COLUMNS,
)


def trajectory_row(record: TrajectoryRecord, group: list[TrajectoryRecord]) -> dict[str, Any]:
    """The row of ``record``, a member of ``group`` (its GRPO group as stored)."""
    with_text(record)  # token ids read as text with the run's tokenizer, where it is here
    spans, _, inputs = _run_of(record)
    prompt = _prompt(inputs.get("raw_prompt"))
    conversation = prompt + _turns(spans)
    replies = [m["content"] for m in conversation[len(prompt) :] if m["role"] == "assistant"]
    mean, std, members = group_advantages(group)
    mine = next((m for m in members if m.record.id == record.id), None)
    training = record.training
    truth = _ground_truth(inputs)
    return {
        "id": record.id,
        "project": record.project,
        "experiment": record.experiment,
        "step": record.step,
        "sample_index": None if record.sample_index is None else str(record.sample_index),
        "rollout_n": record.rollout_n,
        "validate": record.validate,
        "group_id": training.uid if training is not None and training.uid else group_id(record),
        "data_source": _text(inputs.get("data_source")),
        "ground_truth": None if truth is None else str(truth),
        "prompt": prompt,
        "messages": conversation,
        "response": "".join(replies),
        "reward": record.reward,
        "reward_details": json.dumps(record.attributes.get(REWARD_DETAILS) or {}, sort_keys=True),
        "group_size": len(group),
        "group_mean": mean,
        "group_std": std,
        "group_advantage": mine.normalized if mine is not None else None,
        "advantage": training.advantage if training is not None else None,
        "policy_version": training.policy_version if training is not None else None,
        "status": record.status,
        "turns": record.num_llm_calls,
        "tool_calls": record.num_tool_calls,
        "tool_errors": record.num_tool_errors,
        "errors": record.num_errors,
        "error_message": record.error_message,
        "truncated": record.num_truncated,
        "start_ns": record.start_ns,
        "duration_s": record.duration_s,
        **token_columns(training.values if training is not None else {}),
    }


def token_columns(values: dict[str, Any]) -> dict[str, list | None]:
    """``TOKEN_COLUMNS`` from a training record's values."""
    out: dict[str, list | None] = {
        name: values.get(name) if isinstance(values.get(name), list) else None for name in TOKEN_COLUMNS[:-1]
    }
    mask, advantage = out["response_mask"], values.get("advantage")
    per_token = values.get("advantages")
    if isinstance(per_token, list):
        out["token_advantages"] = per_token
    elif mask is not None and isinstance(advantage, int | float):
        out["token_advantages"] = [float(advantage) if m else 0.0 for m in mask]
    else:
        out["token_advantages"] = None
    return out


def reward_inputs(record: TrajectoryRecord) -> dict[str, Any]:
    """The arguments of verl's ``compute_score`` for a stored trajectory, as its run gave them:
    ``solution_str`` is the reward span's recorded solution (``rollscope run``), else the response
    ids decoded with the run's tokenizer as verl's reward manager decodes them (tool responses
    included), else the model's replies joined."""
    spans, run, inputs = _run_of(record)
    truth = _ground_truth(inputs)
    return {
        "data_source": inputs.get("data_source"),
        "solution_str": _solution(record, spans, run),
        "ground_truth": truth,
        "extra_info": inputs.get("extra_info"),
    }


def _solution(record: TrajectoryRecord, spans: list[SpanRecord], run: SpanRecord | None) -> str:
    for s in spans:
        if s.kind == "reward" and isinstance(s.inputs, dict) and isinstance(s.inputs.get("solution"), str):
            return s.inputs["solution"]
    outputs = run.outputs if run is not None and isinstance(run.outputs, dict) else {}
    ids = outputs.get("response_ids")
    tokenizer = recorded_decoder(record.spans) if isinstance(ids, list) and ids else None
    if tokenizer is not None:
        return tokenizer.decode(ids, skip_special_tokens=True)
    with_text(record)
    return "".join(m["content"] for m in _turns(spans) if m["role"] == "assistant")


def _ground_truth(inputs: dict[str, Any]) -> Any:
    reward_model = inputs.get("reward_model")
    return reward_model.get("ground_truth") if isinstance(reward_model, dict) else None


def group_id(record: TrajectoryRecord) -> str:
    """A group's name where the trainer recorded none: the run, the step and the sample."""
    return f"{record.project or ''}/{record.experiment or ''}/{record.step}/{record.sample_index}"


def _run_of(record: TrajectoryRecord) -> tuple[list[SpanRecord], SpanRecord | None, dict[str, Any]]:
    """(its spans in the order they started, its run span, that span's inputs: the dataset row)."""
    spans = sorted(record.spans, key=lambda s: (s.start_ns, s.id))
    run = _run_span(spans)
    return spans, run, run.inputs if run is not None and isinstance(run.inputs, dict) else {}


def _run_span(spans: list[SpanRecord]) -> SpanRecord | None:
    with_prompt = [s for s in spans if s.kind == "agent" and isinstance(s.inputs, dict) and "raw_prompt" in s.inputs]
    return with_prompt[0] if with_prompt else next((s for s in spans if s.kind == "agent"), None)


def _prompt(raw: Any) -> list[dict[str, str]]:
    if isinstance(raw, str):
        return [{"role": "user", "content": raw}]
    if not isinstance(raw, list):
        return []
    return [
        {"role": _text(m.get("role")) or "user", "content": _text(m.get("content")) or ""}
        for m in raw
        if isinstance(m, dict)
    ]


def _turns(spans: list[SpanRecord]) -> list[dict[str, str]]:
    """The llm replies and tool results, in the order they happened."""
    out = []
    for s in spans:
        outputs = s.outputs if isinstance(s.outputs, dict) else {}
        if s.kind == "llm":
            text = outputs.get("response_text")
            if isinstance(text, str):
                out.append({"role": "assistant", "content": text})
        elif s.kind == "tool":
            text = outputs.get("text", s.outputs if isinstance(s.outputs, str) else None)
            out.append({"role": "tool", "content": _text(text) or (s.error_message or "")})
    return out


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, default=str)
