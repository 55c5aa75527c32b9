"""What the store's reader returns: plain dataclasses, spans loaded lazily."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rollscope.semconv import WANDB_RUN

if TYPE_CHECKING:
    from rollscope.trajectory.turns import Prompts

TASK_CHARS = 200  # a trajectory's task as listed: the start of its last user message
ERROR_CHARS = 200
# A stored trajectory's columns, in the order the store's table holds them.
TRAJECTORY_COLUMNS = (
    "id",
    "project",
    "experiment",
    "step",
    "sample_index",
    "rollout_n",
    "validate",
    "agent_name",
    "status",
    "reward",
    "start_ns",
    "end_ns",
    "num_spans",
    "num_llm_calls",
    "num_tool_calls",
    "num_errors",
    "num_tokens",
    "num_tool_errors",
    "error_type",
    "error_message",
    "attributes",
    "num_truncated",
    "num_repeated_calls",
    "logprob_sum",
    "logprob_count",
    "answer_chars",
    "turn_limit",
    "replay_of",
)


def last_user_message(raw_prompt: Any) -> str | None:
    """The task a trajectory started from: the last user message of its chat-format prompt."""
    if not isinstance(raw_prompt, list):
        return None
    for message in reversed(raw_prompt):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):  # multi-part content: its text parts
                content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
            return content if isinstance(content, str) else None
    return None


@dataclass
class SpanRecord:
    id: str
    trajectory_id: str
    parent_id: str | None
    name: str
    kind: str
    start_ns: int
    end_ns: int | None
    status: str
    error_type: str | None
    error_message: str | None
    inputs: Any = None
    outputs: Any = None
    attributes: dict[str, Any] = field(default_factory=dict)
    children: list[SpanRecord] = field(default_factory=list)

    @property
    def duration_s(self) -> float | None:
        return None if self.end_ns is None or self.start_ns is None else (self.end_ns - self.start_ns) / 1e9


@dataclass
class TrajectoryRecord:
    id: str
    project: str | None
    experiment: str | None
    step: int | None
    sample_index: Any
    rollout_n: int | None
    validate: bool
    agent_name: str | None
    status: str
    reward: float | None
    start_ns: int
    end_ns: int | None
    num_spans: int
    num_llm_calls: int
    num_tool_calls: int
    num_errors: int
    num_tokens: int  # output tokens of the llm spans
    num_tool_errors: int
    error_type: str | None
    error_message: str | None
    attributes: dict[str, Any]
    num_truncated: int = 0  # llm turns cut at their token limit
    num_repeated_calls: int = 0  # tool calls repeating an earlier call's tool and arguments
    logprob_sum: float = 0.0  # of the sampled tokens' log-probabilities, where recorded
    logprob_count: int = 0
    answer_chars: int = 0  # word characters of the last reply, tags removed
    turn_limit: int = 0  # 1: the loop used every assistant turn it had
    replay_of: str | None = None  # a replay (``rollscope replay``): the trajectory it replayed
    shard: str = ""
    _load_spans: Callable[[], list[SpanRecord]] | None = field(default=None, repr=False, compare=False)
    _spans: list[SpanRecord] | None = field(default=None, repr=False, compare=False)
    _load_training: Callable[[], TrainingRecord | None] | None = field(default=None, repr=False, compare=False)
    _training: Any = field(default=False, repr=False, compare=False)  # False: not read yet
    _prompts: Any = field(default=None, repr=False, compare=False)

    @property
    def duration_s(self) -> float | None:
        return None if self.end_ns is None or self.start_ns is None else (self.end_ns - self.start_ns) / 1e9

    @property
    def wandb_run(self) -> str | None:
        """The W&B run the trajectory belongs to ("entity/project/run_id"), where it has one."""
        found = (self.attributes or {}).get(WANDB_RUN)
        return found if isinstance(found, str) and found else None

    @property
    def spans(self) -> list[SpanRecord]:
        """Every span of the trajectory in start order (read from the store on first access)."""
        if self._spans is None:
            self._spans = self._load_spans() if self._load_spans is not None else []
        return self._spans

    @property
    def prompts(self) -> Prompts:
        """The llm turns' prompts: each turn is read as it was stored, what it adds to the turn it
        continues (``PROMPT_CONTINUES``); ``prompts.ids(span)`` and ``prompts.text(span)`` make one
        whole, ``prompts.added_text(span)`` is what it adds, as text."""
        if self._prompts is None:
            from rollscope.trajectory.turns import Prompts  # (turns reads tokenizers, which read records)

            self._prompts = Prompts(self.spans)
        return self._prompts

    @property
    def training(self) -> TrainingRecord | None:
        """What training did with the trajectory (None: no trainer step used it, or none recorded)."""
        if self._training is False:
            self._training = self._load_training() if self._load_training is not None else None
        return self._training

    def tree(self) -> list[SpanRecord]:
        """Top-level spans, each with ``children`` filled in, in start order."""
        by_id = {s.id: s for s in self.spans}
        roots: list[SpanRecord] = []
        for s in self.spans:
            s.children = []
        for s in self.spans:
            parent = by_id.get(s.parent_id) if s.parent_id else None
            (parent.children if parent is not None else roots).append(s)
        return roots

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "project": self.project,
            "experiment": self.experiment,
            "step": self.step,
            "sample_index": self.sample_index,
            "rollout_n": self.rollout_n,
            "validate": self.validate,
            "agent_name": self.agent_name,
            "status": self.status,
            "reward": self.reward,
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "duration_s": self.duration_s,
            "num_spans": self.num_spans,
            "num_turns": self.num_llm_calls,
            "num_tool_calls": self.num_tool_calls,
            "num_errors": self.num_errors,
            "num_tokens": self.num_tokens,
            "num_tool_errors": self.num_tool_errors,
            "error_type": self.error_type,
            "error_message": self.error_message,
            "attributes": self.attributes,
            "num_truncated": self.num_truncated,
            "num_repeated_calls": self.num_repeated_calls,
            "logprob_sum": self.logprob_sum,
            "logprob_count": self.logprob_count,
            "answer_chars": self.answer_chars,
            "turn_limit": self.turn_limit,
            "replay_of": self.replay_of,
        }


@dataclass
class TrainingRecord:
    """What a trainer step did with one trajectory (``rollscope.trainer.training_record``): the
    indexed columns, and the whole record (per-token arrays too) in ``values``."""

    trajectory_id: str
    project: str | None
    experiment: str | None
    step: int | None  # the trainer step that consumed the trajectory
    uid: str | None  # its GRPO group
    advantage: float | None
    group_size: int | None
    group_mean: float | None
    group_std: float | None
    policy_version: int | None  # the weight version of its first LLM turn
    lag: int | None  # actor updates between those weights and the ones the step updated
    logprob_delta_max: float | None  # max |trainer - rollout| log-prob over the tokens the loss uses
    entropy_mean: float | None = None  # the policy's mean per-token entropy over those tokens
    values: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.values,
            "trajectory_id": self.trajectory_id,
            "project": self.project,
            "experiment": self.experiment,
        }


@dataclass
class StepStats:
    """One training step at a glance: what the viewer's per-step charts plot."""

    step: int | None
    trajectories: int
    rewarded: int
    reward_sum: float
    tool_calls: int
    with_errors: int
    llm_calls: int
    tokens: int
    project: str | None = None
    experiment: str | None = None

    @property
    def mean_reward(self) -> float | None:
        return self.reward_sum / self.rewarded if self.rewarded else None

    @property
    def tool_calls_per_trajectory(self) -> float:
        return self.tool_calls / self.trajectories

    @property
    def error_rate(self) -> float:
        return self.with_errors / self.trajectories

    @property
    def turns_per_trajectory(self) -> float:
        return self.llm_calls / self.trajectories

    @property
    def tokens_per_trajectory(self) -> float:
        return self.tokens / self.trajectories

    def to_dict(self) -> dict[str, Any]:
        return {
            "project": self.project,
            "experiment": self.experiment,
            "step": self.step,
            "trajectories": self.trajectories,
            "mean_reward": self.mean_reward,
            "tool_calls_per_trajectory": self.tool_calls_per_trajectory,
            "error_rate": self.error_rate,
            "turns_per_trajectory": self.turns_per_trajectory,
            "tokens_per_trajectory": self.tokens_per_trajectory,
        }
