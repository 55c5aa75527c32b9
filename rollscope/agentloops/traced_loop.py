"""TracedAgentLoop: subclass it, write ``run``, get complete traces with no tracing code.

``__init_subclass__`` wraps the ``run`` of every subclass once. Built by verl's own
``AgentLoopWorker``, the loop starts tracing from verl's ``trace.*`` keys (``verl_run``). The wrapper:
- opens a trajectory when none is active: under verl's worker with verl's step, sample_index,
  rollout_n and validate (traced when rollscope's seeded sampler picks the sample); called on its
  own with sample_index from ``extra_info.index`` or ``index``, plus ``step``, ``rollout_n`` and
  ``validate`` when given; under rollscope's runner it joins the trajectory already open;
- keeps verl's own decorators silent inside it, so each trajectory is one call tree;
- records one span per run, however many classes of a ``super().run()`` chain are wrapped;
- records the reward the loop knows (``reward_score``, turn scores, tool rewards).
Every tool the loop is given or keeps in ``self.tools`` is traced whatever its class (``tools.observed``).
Every ``generate`` through ``self.server_manager`` is an llm span (see ``llm_client``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from contextvars import ContextVar
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase

from rollscope import _verl
from rollscope.agentloops import retokenization
from rollscope.agentloops.llm_client import running_loop, traced_client
from rollscope.agentloops.verl_run import VerlTrajectory, current_verl_run, start_from_trainer_config
from rollscope.semconv import (
    ERROR_KIND,
    REPLAY,
    RETOKENIZATION,
    RETOKENIZATION_REQUEST,
    STOP,
    TOOL_ERROR_PREFIX,
    TURN_LIMIT,
)
from rollscope.tools.observed import observe_tools
from rollscope.tracing import SpanKind, rollout_trace_attr, set_reward, trace_span
from rollscope.tracing.instrument import begin_span, current_frame, end_span, native, state, verl_context
from rollscope.tracing.spans import code_location
from rollscope.trajectory.decoders import fingerprint

_VERL_TRACE = _verl.trace_switch()  # verl's per-task switch for its own decorators
log = logging.getLogger("rollscope.agentloops")

# The run span of the loop running in this task: what ``record_turn_limit`` marks.
_run_span: ContextVar[Any] = ContextVar("rollscope_run_span", default=None)
# The name verl's registry knows the loop by, set by the worker hook: trajectories carry it.
agent_name: ContextVar[str | None] = ContextVar("rollscope_agent_name", default=None)


def sample_index_from(kwargs: dict[str, Any]) -> Any:
    extra = kwargs.get("extra_info") or {}
    if isinstance(extra, dict) and extra.get("index") is not None:
        return extra["index"]
    return kwargs.get("index")


def _trajectory_for(name: str, kwargs: dict[str, Any]) -> contextlib.AbstractContextManager:
    """Open a trajectory unless one is open (the runner's, a caller's). Under verl's worker it
    carries verl's step, sample_index, rollout_n and validate, rollscope's sampler decides
    whether it is traced (verl's own choice is switched off: ``verl_run``), and it ends once verl
    has scored the output."""
    if current_frame.get() is not None:
        return contextlib.nullcontext()
    run = current_verl_run()
    if run is not None:
        return VerlTrajectory(run, name)
    allowed, verl_attrs = verl_context()
    if not allowed or verl_attrs is not None:
        return contextlib.nullcontext()  # verl decided: untraced, or its trajectory is joined by the span
    return rollout_trace_attr(
        sample_index=sample_index_from(kwargs),
        step=kwargs.get("step"),
        rollout_n=kwargs.get("rollout_n"),
        validate=bool(kwargs.get("validate", False)),
        name=name,
    )


_REWARD_DETAILS = ("turn_scores", "tool_rewards")


def record_output_reward(output: Any) -> None:
    """Put what the loop's output says about reward on the current trajectory (never raises: an
    odd reward value must not fail the rollout that produced it)."""
    reward = getattr(output, "reward_score", None)
    extra = getattr(output, "extra_fields", None) or {}
    details = {}
    for key in _REWARD_DETAILS:  # (a loop, not a comprehension: no call per rollout)
        if extra.get(key):
            details[key] = extra[key]
    if reward is None and not details:
        return
    try:
        set_reward(reward, **details)
    except (TypeError, ValueError) as exc:
        log.warning("reward %r not recorded: %s", reward, exc)


# AgentLoopOutput fields the run span leaves out: they repeat what the llm spans already hold
# (prompt ids, per-token log-probabilities) or are bulky media.
_REPEATED_FIELDS = (
    "prompt_ids",
    "response_logprobs",
    "routed_experts",
    "multi_modal_data",
    "mm_processor_kwargs",
    "mm_processor_output",
)


class RunOutput:
    """What the run span records of an AgentLoopOutput: the trained-on response (ids and mask),
    reward, turns, metrics and extra fields; the rest is in the llm spans. The view is taken when
    the span is packed or shaped (``instrument.native``), which may be on the exporter's thread
    (token2text) while verl adds to the output's ``extra_fields`` (its postprocessing, its reward):
    that dict is copied here, as it was when ``run`` returned."""

    __slots__ = ("extra_fields", "output")

    def __init__(self, output: Any) -> None:
        self.output = output
        extra = getattr(output, "extra_fields", None)
        self.extra_fields = extra.copy() if type(extra) is dict else extra

    def __trace_view__(self) -> Any:
        output = self.output
        fields = getattr(output, "__dict__", None)
        if fields is None:
            return output
        # (model_dump costs ten times as much; nested models, the metrics, become their fields)
        view = {
            k: native(v) if hasattr(v, "__pydantic_fields_set__") else v
            for k, v in fields.items()
            if k not in _REPEATED_FIELDS
        }
        if "extra_fields" in view:
            view["extra_fields"] = self.extra_fields
        view["prompt_length"] = len(getattr(output, "prompt_ids", None) or [])
        return view


def _traced_run(run: Any, owner: type) -> Any:
    span_name = f"{owner.__name__}.run"
    code = code_location(run)  # where the user's run is (Weave publishes it as the op's code)

    @functools.wraps(run)
    async def traced_run(self: AgentLoopBase, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        if state.tracer is None or running_loop.get() is self:
            return await run(self, sampling_params, **kwargs)
        running = running_loop.set(self)
        tools = self.__dict__.get("tools")
        if type(tools) is dict:  # a loop that built its own tools (verl's older loops did)
            observe_tools(tools.values())
        try:
            name = agent_name.get() or type(self).__name__
            trajectory = _trajectory_for(name, kwargs)
            with trajectory:
                inputs = {"sampling_params": sampling_params, **kwargs}
                span = begin_span(
                    span_name,
                    SpanKind.AGENT,
                    inputs,
                    {REPLAY: self._rollscope_replay.copy(), **code},
                    trajectory_name=name,
                )
                # verl's own decorators (its LLM client, BaseTool, tool parser) record nothing in
                # here (verl's switch for that, a ContextVar): rollscope records the same calls, in
                # this trajectory's tree.
                verl_silenced = _VERL_TRACE.set(False)
                try:
                    if span is None:  # tracing disabled here (trace=False, or not sampled)
                        return await run(self, sampling_params, **kwargs)
                    marks = _run_span.set(span)
                    try:
                        output = await run(self, sampling_params, **kwargs)
                    except BaseException as exc:
                        end_span(span, None, exc)
                        raise
                    finally:
                        _run_span.reset(marks)
                    record_output_reward(output)
                    await self._check_retokenization(span)
                    end_span(span, RunOutput(output))
                    if type(trajectory) is VerlTrajectory:
                        trajectory.scored_later(output)  # verl's reward, then the trajectory's end
                    return output
                finally:
                    _VERL_TRACE.reset(verl_silenced)
        finally:
            running_loop.reset(running)

    traced_run.__rollscope_traced__ = True  # type: ignore[attr-defined]
    return traced_run


def _without_verl_trace(fn: Any) -> Any:
    """verl's own ``@rollout_trace_op`` on an inherited ``run`` would record it a second time in
    verl's backend; rollscope's wrapper replaces it."""
    wrapped = _verl.verl_trace_wrapper(fn)
    return fn if wrapped is None else wrapped


class ToolCallError(ValueError):
    """A tool call the loop refused; its message is what the model is told."""


class TracedAgentLoop(AgentLoopBase):
    """verl's ``AgentLoopBase`` with tracing built in; see the module docstring."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # The class's own run, or one inherited from a class outside rollscope (a verl loop
        # mixed in after TracedAgentLoop): either way wrapped once, here.
        run = cls.__dict__.get("run", getattr(cls, "run", None))
        if run is None or getattr(run, "__rollscope_traced__", False) or getattr(run, "__isabstractmethod__", False):
            return
        cls.run = _traced_run(_without_verl_trace(run), cls)

    def __new__(cls, *args: Any, **kwargs: Any) -> TracedAgentLoop:
        # Every tool a loop is given (verl's ``tools=ToolListWrap``) is traced, whatever its class;
        # here, before a subclass's ``__init__`` takes the argument and keeps the tools its own way.
        # They are kept too: their schemas are what ``constrain_tool_calls`` holds replies to.
        given = kwargs.get("tools")
        tools = getattr(given, "tools", given) if given is not None else None
        observe_tools(tools)
        loop = super().__new__(cls)
        with contextlib.suppress(AttributeError, TypeError):  # (a class that refuses attributes: no schemas kept)
            object.__setattr__(loop, "_rollscope_given_tools", list(tools or ()))
        return loop

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        start_from_trainer_config(self.config)  # verl's plain worker: its trace.* keys start tracing
        self.server_manager = traced_client(self.server_manager, self.tokenizer)
        self._rollscope_replay = replay_record(type(self), self.config, self.tokenizer)

    def record_tool_error(self, name: str, arguments: Any, problem: str, kind: str = "malformed_call") -> str:
        """Record a tool call the loop could not run (JSON that does not parse, an unknown tool,
        bad arguments) as an error tool span with its kind, as the bundled loop records its own:
        insights count it among tool errors by kind. Returns what to tell the model
        (``"Error: <problem>"``). ``kind``: ``malformed_call``, ``unknown_tool``, ``bad_arguments``
        or one of the loop's own."""
        with trace_span(
            f"{TOOL_ERROR_PREFIX}{name}",
            SpanKind.TOOL,
            inputs={"name": name, "arguments": arguments},
            **{ERROR_KIND: kind},
        ) as span:
            span.fail(ToolCallError(problem))
            span.outputs = problem
        return f"Error: {problem}"

    def record_turn_limit(self) -> None:
        """Say that this run stopped because it used every turn it was allowed (insights count
        such trajectories: ``turn_limit``). Call it from ``run``; outside a traced run it does nothing."""
        span = _run_span.get()
        if span is not None:
            span.attributes[STOP] = TURN_LIMIT

    async def _check_retokenization(self, span: Any) -> None:
        conversation = self.traced_conversation()
        if conversation is None:
            return
        kwargs = _plain_kwargs(getattr(self, "apply_chat_template_kwargs", None))
        deferred = retokenization.request(self.tokenizer, *conversation, kwargs)
        if deferred is not None:  # checked where the span is shaped, off the rollout's thread
            span.attributes[RETOKENIZATION_REQUEST] = deferred
            return
        drift = await retokenization.check(self.tokenizer, *conversation, kwargs)
        if drift is not None:
            span.attributes[RETOKENIZATION] = drift

    def traced_conversation(self) -> tuple[list[dict[str, Any]], Any, list[int]] | None:
        """The messages of the run that just ended, the tool schemas and the token sequence the
        loop built from them (prompt and response): the run span then records whether the chat
        template renders the messages to the same tokens (``retokenization``). None: the loop
        keeps no messages (the default)."""
        return None


def _plain_kwargs(kwargs: Any) -> dict[str, Any] | None:
    """verl's ``apply_chat_template_kwargs`` (an OmegaConf node, most often empty) as a plain dict,
    or None: the check's request crosses to the sidecar, where the wire converted a node at every
    trajectory on the rollout's thread (17 us each)."""
    return _verl.plain_config(kwargs) if kwargs else None


# (loop class, trainer config, tokenizer) ids -> what a replay needs to rebuild such a loop
_replay_records: dict[tuple[int, int, int], dict[str, Any]] = {}


def replay_record(cls: type, config: Any, tokenizer: Any) -> dict[str, Any]:
    """What ``rollscope replay`` needs to rebuild this loop, recorded on its run span: the class,
    the rollout lengths and multi-turn settings (the tool config path among them), the
    tokenizer's directory and its vocabulary's fingerprint. Worked out once per class and config:
    a loop is built per trajectory."""
    key = (id(cls), id(config), id(tokenizer))
    record = _replay_records.get(key)
    if record is None:
        rollout = config.actor_rollout_ref.rollout
        multi_turn = _verl.plain_config(rollout.get("multi_turn"))
        plain = {k: v for k, v in multi_turn.items() if v is None or isinstance(v, str | int | float | bool)}
        record = _replay_records[key] = {
            "loop": f"{cls.__module__}.{cls.__qualname__}",
            "prompt_length": rollout.get("prompt_length"),
            "response_length": rollout.get("response_length"),
            "multi_turn": plain,
            "tokenizer": getattr(tokenizer, "name_or_path", None) or None,
            "vocab": fingerprint(tokenizer) if tokenizer is not None else None,  # (a reader checks it: ``decoders``)
        }
    return record
