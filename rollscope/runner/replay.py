"""Replay: run a stored trajectory again, from its record, and compare.

The loop is rebuilt from what its run span recorded (``rollscope.replay``: class, rollout lengths,
multi-turn settings, tokenizer) and what the runner recorded on the trajectory (``rollscope.run``:
reward function, tool file, LLM); the row is the run span's inputs. ``ReplayLLM`` answers the
model turns before ``from_turn`` with their recorded token ids (the conversation is the same token
for token) and hands later turns to a live client. Tools, the loop's own code and the reward run
for real, so ``check`` turns a stored trajectory into a regression test of them.

The replay is stored beside the original (same step, sample, experiment) with ``replay_of`` and
``from_turn``; ``/steps``, GRPO groups and insights leave replays out.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollscope.semconv import REPLAY, RUN
from rollscope.store import TraceStore
from rollscope.trajectory import tokens
from rollscope.trajectory.decoders import load_tokenizer
from rollscope.trajectory.diff import TrajectoryDiff, turn_text
from rollscope.trajectory.records import SpanRecord, TrajectoryRecord


class ReplayError(ValueError):
    """A trajectory that cannot be replayed; the message says what is missing."""


@dataclass
class ReplayOutcome:
    original: str
    replay: str | None  # the new trajectory's id
    from_turn: int | None
    differences: list[str] = field(default_factory=list)
    diff: TrajectoryDiff | None = None
    notes: list[str] = field(default_factory=list)  # what could not be compared, and why

    @property
    def ok(self) -> bool:
        return not self.differences

    def to_dict(self) -> dict[str, Any]:
        return {
            "original": self.original,
            "replay": self.replay,
            "from_turn": self.from_turn,
            "ok": self.ok,
            "differences": self.differences,
            "notes": self.notes,
            "first_divergence": None if self.diff is None else self.diff.first_divergence,
            "first_divergent_model_turn": None if self.diff is None else self.diff.first_divergent_model_turn,
            "original_training": None
            if self.diff is None or self.diff.left.training is None
            else self.diff.left.training.to_dict(),
        }


class ReplayLLM:
    """Test double standing for the model: recorded model turns before ``from_turn`` (their exact
    token ids), then ``live``. A trajectory is one conversation: turns are counted in call order."""

    def __init__(self, turns: list[SpanRecord], from_turn: int | None, live: Any = None) -> None:
        self.turns, self.from_turn, self.live = turns, from_turn, live
        self.calls = 0

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs: Any
    ) -> Any:
        from verl.workers.rollout.replica import TokenOutput

        turn, self.calls = self.calls, self.calls + 1
        if self.from_turn is not None and turn >= self.from_turn:
            return await self.live.generate(
                request_id, prompt_ids=prompt_ids, sampling_params=sampling_params, **kwargs
            )
        if turn >= len(self.turns):
            raise ReplayError(
                f"the replay asked for model turn {turn}, but the record has {len(self.turns)} "
                "(replay from that turn with --from-turn and --llm)"
            )
        out = self.turns[turn].outputs
        return TokenOutput(
            token_ids=list(out["token_ids"]),
            log_probs=out.get("log_probs"),
            stop_reason=out.get("stop_reason") or "completed",
        )

    async def close(self) -> None:
        close = getattr(self.live, "close", None)
        if close is not None:
            await close()


def _run_span(record: TrajectoryRecord) -> SpanRecord:
    runs = [s for s in record.spans if s.kind == "agent" and REPLAY in (s.attributes or {})]
    if not runs:
        raise ReplayError(
            f"trajectory {record.id} cannot be replayed: its run span records no loop to rebuild "
            "(recorded by an older rollscope, or not by a TracedAgentLoop)"
        )
    return runs[0]


def _model_turns(record: TrajectoryRecord, from_turn: int | None) -> list[SpanRecord]:
    """The model turns the replay answers from the record (those before ``from_turn``), each with
    its token ids whole: a turn whose tokens carried a secret was stored without them."""
    turns = [s for s in record.spans if s.kind == "llm"]
    for i, s in enumerate(turns[:from_turn]):
        if not (isinstance(s.outputs, dict) and isinstance(s.outputs.get("token_ids"), list)):
            raise ReplayError(f"trajectory {record.id} cannot be replayed: model turn {i} has no recorded token ids")
        hidden = tokens.count(s.outputs["token_ids"])
        if hidden:
            raise ReplayError(
                f"trajectory {record.id} cannot be replayed from its record past model turn {i}: "
                f"{hidden} of that turn's tokens carried a secret and were stored redacted "
                f"(replay from turn {i} with --from-turn {i} and --llm)"
            )
    return turns


def _tokenizer(model: str | None, info: dict[str, Any], run: dict[str, Any], live_tokenizer: Any) -> Any:
    if live_tokenizer is not None and model is None:
        return live_tokenizer
    path = model or info.get("tokenizer") or run.get("model")
    if path and Path(path).is_dir():
        tokenizer = load_tokenizer(path)
        if tokenizer is None:
            raise ReplayError(f"the tokenizer in {path} cannot be loaded; give --model DIR")
        return tokenizer
    if run.get("llm"):  # the recorded client brings its tokenizer (the embedded model's, a scripted one's)
        from rollscope.llm.factory import create_llm

        return create_llm(run["llm"], model=run.get("model"))[1]
    raise ReplayError(f"no tokenizer to rebuild the loop with (recorded: {path!r}); give --model DIR")


def replay(
    trajectory_id: str,
    *,
    store: str | None = None,
    from_turn: int | None = None,
    llm: str | None = None,
    model: str | None = None,
    config: str | None = None,
    check: bool = False,
    tokenizer: Any = None,
) -> ReplayOutcome:
    """Replay ``trajectory_id`` from ``store`` (see the module docstring). ``check``: every model
    turn from the record, and the outcome lists every tool result, final response and reward that
    differs from the recorded one. ``tokenizer``: one already loaded (else the recorded one)."""
    if check and from_turn is not None:
        raise ReplayError("--check replays every model turn from the record: leave out --from-turn")
    if from_turn is not None and llm is None:
        raise ReplayError("--from-turn K asks a model from turn K on: name it with --llm")
    with TraceStore(store) as opened:
        original = opened.get(trajectory_id)
        directory = opened.path
    run_span = _run_span(original)
    turns = _model_turns(original, from_turn)
    info = run_span.attributes[REPLAY]
    run = original.attributes.get(RUN) or {}
    live, live_tokenizer = None, None
    if llm is not None:
        from rollscope.llm.factory import create_llm

        live, live_tokenizer = create_llm(llm, model=model, max_tokens=info.get("response_length") or 512)
    tokenizer = tokenizer or _tokenizer(model, info, run, live_tokenizer)
    new_id, error = asyncio.run(
        _run(original, run_span, info, run, ReplayLLM(turns, from_turn, live), tokenizer, directory, from_turn, config)
    )
    with TraceStore(directory) as opened:
        replayed = opened.get(new_id)
        diff = opened.diff(original, replayed)
    outcome = ReplayOutcome(original.id, new_id, from_turn, diff=diff)
    if error is not None:  # (the loop asked for a model turn the record does not have)
        outcome.differences.append(f"the replay stopped: {error}")
    if check:
        outcome.differences += compare(original, replayed, outcome.notes)
    return outcome


async def _run(
    original: TrajectoryRecord,
    run_span: SpanRecord,
    info: dict[str, Any],
    run: dict[str, Any],
    llm: ReplayLLM,
    tokenizer: Any,
    directory: Path,
    from_turn: int | None,
    tool_config: str | None,
) -> tuple[str, str | None]:
    """(the replay's trajectory id, the error that ended it early, if any)."""
    from rollscope.runner.config import RunConfig
    from rollscope.runner.runner import Runner
    from rollscope.tracing import init_tracing, shutdown_tracing

    multi_turn = dict(info.get("multi_turn") or {})
    tools = tool_config or run.get("tools") or multi_turn.get("tool_config_path")
    multi_turn.pop("tool_config_path", None)  # the runner hands the tools over itself
    if tools and not Path(tools).is_file():
        raise ReplayError(f"the tool config the trajectory ran with, {tools}, is gone: give --config FILE")
    config = RunConfig(
        name="replay",
        agent=info["loop"],
        tools=tools,
        reward=run.get("reward"),
        step=original.step if isinstance(original.step, int) else 0,
        validate=original.validate,
        project=original.project or "rollscope",
        experiment=original.experiment,
        trace_dir=str(directory),
        prompt_length=info.get("prompt_length") or 1024,
        response_length=info.get("response_length") or 512,
        multi_turn=multi_turn,
        concurrency=1,
    )
    runner = Runner(config, llm=llm, tokenizer=tokenizer)
    runner.rows = []
    runner.setup()
    kwargs = dict(run_span.inputs or {})
    sampling_params = kwargs.pop("sampling_params", None) or {}
    # One trajectory: stored in this process (a trace sidecar would cost more to start than it saves).
    init_tracing(
        project=config.project,
        experiment=config.experiment,
        trace_dir=str(directory),
        token2text=True,
        tokenizer=tokenizer,
        sidecar=False,
    )
    try:
        outcome = await runner.run_trajectory(
            kwargs,
            sampling_params,
            original.sample_index,
            original.rollout_n,
            replay_of=original.id,
            from_turn=from_turn,
        )
    finally:
        shutdown_tracing()
        await llm.close()
    if outcome.trajectory_id is None:
        raise ReplayError(f"the replay of {original.id} recorded no trajectory ({outcome.error})")
    return outcome.trajectory_id, outcome.error


def compare(original: TrajectoryRecord, replayed: TrajectoryRecord, notes: list[str] | None = None) -> list[str]:
    """What differs between a trajectory and its every-turn-recorded replay: each tool result (by
    call), the final response, the reward, the status. A reward the replay could not compute (no
    reward function recorded: verl's reward manager scored it) is noted, not compared."""
    out = []
    a_tools = [s for s in original.spans if s.kind == "tool"]
    b_tools = [s for s in replayed.spans if s.kind == "tool"]
    for i in range(max(len(a_tools), len(b_tools))):
        a = a_tools[i] if i < len(a_tools) else None
        b = b_tools[i] if i < len(b_tools) else None
        if a is None or b is None:
            out.append(
                f"tool call {i}: {'missing from the replay' if b is None else 'not in the record'} ({(a or b).name})"
            )  # type: ignore[union-attr]
            continue
        if (turn_text(a), a.status) != (turn_text(b), b.status):
            out.append(
                f"tool call {i} ({a.name}, model turn {_model_turn_of(original, a)}): result "
                f"{_short(turn_text(a))} [{a.status}] -> {_short(turn_text(b))} [{b.status}]"
            )
    a_final, b_final = _final(original), _final(replayed)
    if a_final != b_final:
        out.append(f"final response: {_short(a_final)} -> {_short(b_final)}")
    if replayed.reward is None and original.reward is not None:
        if notes is not None:
            notes.append(f"reward {original.reward} not compared: no reward function was recorded to recompute it")
    elif original.reward != replayed.reward:
        out.append(f"reward: {original.reward} -> {replayed.reward}")
    if original.status != replayed.status:
        out.append(f"status: {original.status} -> {replayed.status} ({replayed.error_message or ''})".rstrip(" ()"))
    return out


def _final(record: TrajectoryRecord) -> str | None:
    turns = [s for s in record.spans if s.kind == "llm"]
    return turn_text(turns[-1]) if turns else None


def _model_turn_of(record: TrajectoryRecord, span: SpanRecord) -> int:
    """How many model turns came before ``span``."""
    return sum(1 for s in record.spans if s.kind == "llm" and s.start_ns <= span.start_ns) - 1


def _short(text: str | None, limit: int = 120) -> str:
    if text is None:
        return "none"
    return repr(text if len(text) <= limit else text[:limit] + "…")
