"""``trackio``: each trajectory one ``trackio.Trace``, logged as verl's own trackio tracing logs them.

Under the key ``rollout_trace/<agent>`` at the trajectory's step, into the trackio run verl opened
in this process (``trackio.init(project, name=experiment)``), or one this backend opens the same
way. A trace holds the conversation as OpenAI-style messages (the decoded prompt split into roles,
each reply, each tool result: token2text gives the text), the spans as trackio spans (the run,
each LLM generation with its token usage, each tool call, nested by ``parent_id``), and verl's
attributes plus the reward and status as metadata. Trackio is local-first: its SQLite store under
``TRACKIO_DIR`` (default ``~/.cache/huggingface/trackio``), its dashboard ``trackio show``.

Runs in the traced process: trackio's run object lives there (verl's, when verl opened it), and
logging a trace is a queue append; trackio ships it on its own thread.
"""

from __future__ import annotations

import re
from typing import Any

from rollscope.semconv import INPUT_TOKENS, OUTPUT_TOKENS, REQUEST_MODEL, TOOL_NAME
from rollscope.tracing.backends.buffered import TrajectoryBackend
from rollscope.tracing.backends.conversation import prompt_messages
from rollscope.tracing.backends.records import SpanLike, TrajectoryLike, in_start_order, kind_of
from rollscope.tracing.spans import Span, Trajectory

_SPAN_KIND = {"llm": "generation", "tool": "tool"}


def trace_key(agent: str) -> str:
    """verl's key for a trace of this op (``rollout_trace/<name>``, unsafe characters as ``_``)."""
    return "rollout_trace/" + re.sub(r"[^\w.-]", "_", agent)


class TrackioBackend(TrajectoryBackend):
    name = "trackio"
    requires = ("trackio",)
    extra = "trackio"
    options = frozenset({"trackio_project"})

    def __init__(
        self, *, project: str | None = None, experiment: str | None = None, trackio_project: str | None = None
    ) -> None:
        super().__init__(project=project, experiment=experiment)
        import trackio
        from trackio import context_vars

        self.trackio = trackio
        self.run = context_vars.current_run.get()  # verl's, when verl's worker opened one here
        self._owns_run = self.run is None
        if self._owns_run:
            self.run = trackio.init(
                project=trackio_project or project or "rollscope",
                name=experiment,
                config={"framework": "verl", "tracer": "rollscope"},
                resume="allow",
            )

    def write(self, trajectory: Trajectory, spans: list[Span]) -> None:
        trace = self.trackio.Trace(**trace_fields(trajectory, spans, self.experiment))
        step = trajectory.step if isinstance(trajectory.step, int) else None
        self.run.log({trace_key(trajectory.agent_name or "rollout_trace"): trace}, step=step)

    def close(self) -> None:
        if self._owns_run:  # verl's run is verl's to finish
            self.run.finish()


def trace_fields(t: TrajectoryLike, spans: list[SpanLike], experiment: str | None = None) -> dict[str, Any]:
    """A trackio Trace's messages, metadata and spans for a trajectory (live or stored) and its spans."""
    ordered = in_start_order(spans)
    messages: list[dict[str, Any]] = []
    for s in ordered:
        kind = kind_of(s)
        inputs = s.inputs if isinstance(s.inputs, dict) else {}
        outputs = s.outputs if isinstance(s.outputs, dict) else {}
        if kind == "llm":
            if not messages and isinstance(inputs.get("prompt_text"), str):
                messages.extend(prompt_messages(inputs["prompt_text"]))
            reply = outputs.get("response_text")
            messages.append({"role": "assistant", "content": reply if isinstance(reply, str) else str(outputs)})
        elif kind == "tool":
            text = outputs.get("text")
            name = (s.attributes or {}).get(TOOL_NAME) or s.name
            messages.append(
                {
                    "role": "tool",
                    "name": name,
                    "tool_call_id": str(inputs.get("instance_id", s.id)),
                    "content": text if isinstance(text, str) else str(s.outputs),
                }
            )
    metadata = {
        "trajectory_id": t.id,
        "step": t.step,
        "sample_index": t.sample_index,
        "rollout_n": t.rollout_n,
        "validate": bool(t.validate),
        "experiment_name": t.experiment or experiment,
        "agent": t.agent_name,
        "reward": t.reward,
        "status": "success" if t.status == "ok" else t.status,
        "backend": "rollscope",
        "duration_ms": ((t.end_ns or t.start_ns) - t.start_ns) / 1e6,
    }
    return {
        "messages": messages or [{"role": "user", "content": ""}],
        "metadata": {k: v for k, v in metadata.items() if v is not None},
        "spans": [_span(s) for s in ordered],
    }


def _span(s: Any) -> dict[str, Any]:
    kind = kind_of(s)
    attrs = s.attributes or {}
    end_ns = s.end_ns or s.start_ns
    span = {
        "id": s.id,
        "parent_id": s.parent_id,
        "name": s.name,
        "kind": _SPAN_KIND.get(kind, "span"),
        "start_time": s.start_ns / 1e9,
        "end_time": end_ns / 1e9,
        "duration_ms": (end_ns - s.start_ns) / 1e6,
        "status": "error" if s.status == "error" else "success",
        "input": s.inputs,
        "output": s.outputs,
    }
    if s.status == "error":
        span["error"] = f"{s.error_type}: {s.error_message}"
    if kind == "llm":
        prompt, completion = attrs.get(INPUT_TOKENS), attrs.get(OUTPUT_TOKENS)
        span["model"] = attrs.get(REQUEST_MODEL) or "model"
        span["usage"] = {
            "prompt_tokens": prompt or 0,
            "completion_tokens": completion or 0,
            "total_tokens": (prompt or 0) + (completion or 0),
        }
    return span
