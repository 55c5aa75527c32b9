"""Runs agent loops outside training: the same loop classes, tools and traces as inside verl.

Each trajectory is run as verl's ``AgentLoopWorker`` runs one: a fresh loop instance built with
Hydra from the registry entry (or a dotted class path), a trajectory opened with verl's attributes
(step, sample_index, rollout_n, validate, agent name), ``run(sampling_params, **row)``, then the
reward. Concurrency is bounded by a semaphore; counters are kept for the progress display.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import importlib.util
import inspect
import json
import logging
import os
import sys
import sysconfig
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from rollscope import _verl
from rollscope._imports import import_function
from rollscope.llm.base import LLMServerError
from rollscope.runner.config import RunConfig, RunConfigError
from rollscope.runner.dataset import load_rows, loop_kwargs
from rollscope.runner.trainer_config import trainer_config
from rollscope.semconv import RUN
from rollscope.store.schema import resolve_dir
from rollscope.tracing import SpanKind, rollout_trace_attr, set_reward, trace_span, wandb_run


@dataclass
class Job:
    row: dict[str, Any]
    position: int
    rollout_n: int


SAME_FAILURE_STOP = 4  # the first trajectories of a run, all failed for one reason: the run stops


class RunFailed(RuntimeError):
    """Every trajectory so far failed for the same reason (the run stopped: it would be all failures)."""


@dataclass
class Outcome:
    sample_index: Any
    rollout_n: int
    trajectory_id: str | None = None
    reward: float | None = None
    num_turns: int = 0
    tool_calls: int = 0
    errors: int = 0
    response_tokens: int = 0
    error: str | None = None
    where: str | None = None  # the line of the user's code the error came from (``user_line``)
    reward_failed: bool = False  # the loop finished; its reward function raised or returned no number


@dataclass
class RunStats:
    """Live figures, updated as trajectories finish (read by the progress display)."""

    total: int = 0
    done: int = 0
    failed: int = 0
    reward_failed: int = 0  # of ``failed``: the loop finished, its reward did not
    tool_calls: int = 0
    span_errors: int = 0
    tokens: int = 0
    reward_sum: float = 0.0
    rewarded: int = 0
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None  # when the last trajectory so far ended
    all_stored: bool = True  # tracing stored everything before the run ended (``session.run_traced``)
    first_failure: str | None = None  # the first failed trajectory's error, and where in the user's code
    tool_failures: dict[str, dict[str, int]] = field(default_factory=dict)  # tool -> failure kind -> calls

    def add(self, outcome: Outcome) -> None:
        self.finished = time.monotonic()
        self.done += 1
        if outcome.error is not None:
            self.failed += 1
            self.reward_failed += outcome.reward_failed
            if self.first_failure is None:
                self.first_failure = outcome.error + (f" (at {outcome.where})" if outcome.where else "")
        self.tool_calls += outcome.tool_calls
        self.span_errors += outcome.errors
        self.tokens += outcome.response_tokens
        if outcome.reward is not None:
            self.reward_sum += outcome.reward
            self.rewarded += 1

    def merge(self, other: RunStats) -> None:
        for name in ("total", "done", "failed", "reward_failed", "tool_calls", "span_errors", "tokens", "rewarded"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.reward_sum += other.reward_sum
        self.add_tool_failures(
            (tool, kind, n) for tool, kinds in other.tool_failures.items() for kind, n in kinds.items()
        )
        self.all_stored = self.all_stored and other.all_stored
        self.first_failure = self.first_failure or other.first_failure
        self.finished = time.monotonic()

    def add_tool_failures(self, found: Iterable[tuple[str, str, int]]) -> None:
        for tool, kind, n in found:
            kinds = self.tool_failures.setdefault(tool, {})
            kinds[kind] = kinds.get(kind, 0) + n

    @property
    def mean_reward(self) -> float | None:
        return self.reward_sum / self.rewarded if self.rewarded else None

    @property
    def elapsed(self) -> float:
        """Seconds from the first trajectory's start to the last one's end (to now, before any
        ended): every rate shown, live or in the summary, is over this one span of time, never
        over the tracing shutdown after it."""
        return (self.finished if self.finished is not None else time.monotonic()) - self.started


def user_line(error: BaseException) -> str | None:
    """``file:line, in function`` of the innermost frame of the user's own code that ``error``
    (or what caused it) passed through: not rollscope's, verl's, the standard library's or an
    installed package's; an installed package's when the user's code is one."""
    frames = []
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        frames = traceback.extract_tb(error.__traceback__) + frames
        error = error.__cause__ or error.__context__  # type: ignore[assignment]
    for library in (_LIBRARIES + _INSTALLED, _LIBRARIES):
        for frame in reversed(frames):
            if not frame.filename.startswith(library) and not frame.filename.startswith("<"):
                return f"{_shown(frame.filename)}:{frame.lineno}, in {frame.name}"
    return None


def defined_at(fn: Any) -> str | None:
    """``file:line, in name`` where a function of the user's is defined (a reward that returned
    something unusable left no frame of its own in the traceback)."""
    code = getattr(inspect.unwrap(fn), "__code__", None)
    return f"{_shown(code.co_filename)}:{code.co_firstlineno}, in {code.co_name}" if code is not None else None


def _shown(path: str) -> str:
    """A path as the user would type it: relative to where they are, when it is under it."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def _package_dir(name: str) -> tuple[str, ...]:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):  # (not installed, said so by an import hook)
        return ()
    return tuple(p.rstrip(os.sep) + os.sep for p in (spec.submodule_search_locations or ())) if spec else ()


_INSTALLED = tuple({sysconfig.get_paths()[k] + os.sep for k in ("purelib", "platlib")})
_LIBRARIES = (
    *_package_dir("rollscope"),
    *_package_dir("verl"),
    *{
        path
        for path in (sysconfig.get_paths()[k] + os.sep for k in ("stdlib", "platstdlib"))
        if not any(p.startswith(path) for p in _INSTALLED)
    },
)  # (a venv's lib holds its site-packages)


def resolve_agent(name: str) -> dict[str, Any]:
    """The Hydra entry for a loop: verl's registry (rollscope's loops included) or a dotted class path."""
    import rollscope.agentloops  # noqa: F401  (registers rollscope's loops with verl)

    registry = _verl.agent_loop_registry()
    if name in registry:
        return dict(registry[name])
    module, _, attr = name.replace(":", ".").rpartition(".")
    try:
        getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        known = ", ".join(sorted(registry))
        raise RunConfigError(f"agent {name!r}: neither a registered loop ({known}) nor a class ({exc})") from None
    return {"_target_": f"{module}.{attr}"}


@functools.cache
def _loop_class(target: str) -> type:
    from hydra.utils import get_class

    return get_class(target)


def resolve_reward(spec: str | None) -> Callable[..., Any] | None:
    if spec is None:
        return None
    try:
        return import_function(spec, "reward")
    except ValueError as exc:
        raise RunConfigError(str(exc)) from None


class RewardError(TypeError):
    """A reward function returned what is no reward; the message names the function and the row."""


def reward_value(returned: Any, reward: str | None, row: Any) -> float:
    """The score a reward function returned (a number, or verl's dict with ``score``) as a float."""
    score = returned.get("score") if isinstance(returned, dict) else returned
    if not isinstance(score, str | bytes) and score is not None:
        try:
            return float(score)
        except (TypeError, ValueError):
            pass
    shown = repr(returned)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    raise RewardError(
        f"reward {reward} returned {shown} for row {row}: expected a number or a dict with a numeric 'score'"
    )


def _no_builder_warning(record: logging.LogRecord) -> bool:
    """verl warns, for every loop it builds, that it has no token builder for a model type and uses
    the default one; for rollscope's templates (the embedded model's included) the default is right."""
    return "No model-specific Continuous Token builder" not in record.getMessage()


def model_type_of(model_dir: str | None) -> str | None:
    """The ``model_type`` of a model directory's ``config.json`` (what verl's worker reads from the
    model's Hugging Face config), or None where there is none (a tokenizer-only directory)."""
    if not model_dir:
        return None
    try:
        with open(os.path.join(model_dir, "config.json")) as f:
            found = json.load(f).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None
    return found if isinstance(found, str) else None


class Runner:
    """Build once (``setup``), then ``await run()``. ``llm``/``tokenizer`` may be passed in (tests,
    Ray workers that share nothing); otherwise they come from ``config.llm``."""

    def __init__(self, config: RunConfig, *, llm: Any = None, tokenizer: Any = None) -> None:
        self.config = config
        self.llm, self.tokenizer = llm, tokenizer
        self._owns_llm = llm is None  # an LLM passed in is its caller's to close
        self.stats = RunStats()
        self.outcomes: list[Outcome] = []
        self.rows: list[dict[str, Any]] | None = None  # read in setup unless given (already checked)
        self._llm_checked = False

    def setup(self) -> None:
        from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap

        from rollscope.agentloops.llm_client import traced_client
        from rollscope.tools.registry import load_function_tools, load_tools

        cfg = self.config
        wiring_log = logging.getLogger("verl.utils.tokenizer.continuous_token_wiring")
        if _no_builder_warning not in wiring_log.filters:
            wiring_log.addFilter(_no_builder_warning)
        base = getattr(cfg, "_base", None)
        if base and base not in sys.path:
            sys.path.insert(0, base)  # a user's agent or reward module beside the config imports by name
        if self.rows is None:
            if cfg.dataset is None:
                raise RunConfigError(f"{cfg.name}: no dataset (set dataset=PATH)")
            self.rows = load_rows(cfg.resolve(cfg.dataset), cfg.limit)
        self.agent_entry = resolve_agent(cfg.agent)
        self.reward_fn = resolve_reward(cfg.reward)
        if self.llm is None:
            from rollscope.llm.factory import create_llm

            self.llm, self.tokenizer = create_llm(
                cfg.llm,
                model=cfg.resolve(cfg.model) if cfg.model else None,
                chat_template=cfg.resolve(cfg.chat_template),
                max_tokens=cfg.response_length,
                seed=cfg.seed,
            )
        self.trainer_config = trainer_config(cfg, cfg.resolve(cfg.model) if cfg.model else cfg.llm)
        # verl picks how a family's turns are joined from it (Qwen's newline after each turn), as its
        # worker does: from the model's directory (the tokenizer's, where the LLM brought its own)
        self.model_type = model_type_of(
            cfg.resolve(cfg.model) if cfg.model else getattr(self.tokenizer, "name_or_path", None)
        )
        tools = load_tools(cfg.resolve(cfg.tools)) if cfg.tools else []
        function_tool_path = cfg.multi_turn.get("function_tool_path")
        if function_tool_path:  # verl's @function_tool file, as verl's worker reads it
            tools += load_function_tools(cfg.resolve(function_tool_path), taken=[t.name for t in tools])
        self.tools = ToolListWrap(tools)
        self.server = traced_client(self.llm, self.tokenizer)
        self._wraps = (DictConfigWrap(self.trainer_config), DictConfigWrap(self.trainer_config.data))
        self.sampling_params = {"logprobs": True, **cfg.sampling}
        # On every trajectory: what a replay needs that the loop does not know (rollscope.replay).
        self.run_record = {
            "reward": cfg.reward,
            "tools": cfg.resolve(cfg.tools),
            "llm": cfg.llm,
            "model": cfg.resolve(cfg.model) if cfg.model else None,
        }
        # The W&B run its trajectories belong to (``tracing.wandb_run``): the config's, or the environment's.
        found = cfg.wandb_run or wandb_run.current()
        self.run_link = {wandb_run.ATTRIBUTE: found} if found else {}

    def start_tracing(self) -> None:
        """Tracing for this run, into the config's backends (after ``setup``: token2text shaping
        needs the tokenizer)."""
        from rollscope.tracing import init_tracing

        cfg = self.config
        init_tracing(
            backend=cfg.backend,
            project=cfg.project,
            experiment=cfg.experiment or cfg.name,
            token2text=cfg.token2text,
            tokenizer=self.tokenizer,
            trace_dir=cfg.trace_dir,
        )

    def jobs(self) -> list[Job]:
        return [Job(row, i, k) for i, row in enumerate(self.rows) for k in range(self.config.n)]

    def new_loop(self, entry: dict[str, Any]) -> Any:
        """A fresh loop for one trajectory, as verl's worker makes it. Hydra's ``instantiate`` (what
        verl calls) costs ~10 ms a loop here, mostly config handling; an entry with plain keyword
        arguments is constructed directly with the same arguments."""
        from verl.utils.dataset.rl_dataset import RLHFDataset

        trainer, data = self._wraps
        kwargs = dict(
            trainer_config=trainer,
            server_manager=self.server,
            tokenizer=self.tokenizer,
            processor=None,
            dataset_cls=RLHFDataset,
            data_config=data,
            tools=self.tools,
            hf_model_type=self.model_type,
        )
        extra = {k: v for k, v in entry.items() if k != "_target_"}
        if any(isinstance(v, dict) for v in extra.values()):
            from hydra.utils import instantiate

            return instantiate(entry, **kwargs)
        return _loop_class(entry["_target_"])(**extra, **kwargs)

    async def run(
        self, jobs: list[Job] | None = None, on_outcome: Callable[[Outcome], None] | None = None
    ) -> list[Outcome]:
        """Run the jobs; an LLM that cannot answer stops the run (LLMServerError), after what is
        done has been counted and traced, and so do the first ``SAME_FAILURE_STOP`` trajectories
        failing for one reason, with none done (``RunFailed``): a setting no trajectory can run with."""
        jobs = self.jobs() if jobs is None else jobs
        self.stats.total += len(jobs)
        if not self.outcomes:
            self.stats.started = time.monotonic()  # rates count from the first trajectory, not from setup
        limit = asyncio.Semaphore(self.config.concurrency)

        async def bounded(job: Job) -> Outcome:
            async with limit:
                return await self.run_one(job)

        from rollscope.tools.traced_tool import failures as tool_failures  # (verl's, imported by setup)

        await self.check_llm()
        failed_calls = Counter(tool_failures)
        tasks = [asyncio.ensure_future(bounded(job)) for job in jobs]
        why = "cancelled: the run was interrupted"
        try:
            for task in asyncio.as_completed(tasks):
                outcome = await task
                self.outcomes.append(outcome)
                self.stats.add(outcome)
                if on_outcome is not None:
                    on_outcome(outcome)
                self._stop_if_all_fail_alike()
        except Exception as exc:
            said = str(exc).splitlines()[0] if str(exc) else ""
            why = f"cancelled: the run stopped after {type(exc).__name__}: {said}"
            raise
        finally:
            # Trajectories still running end as cancelled, with why (no span of theirs failed).
            for task in tasks:
                task.cancel(why)
            await asyncio.gather(*tasks, return_exceptions=True)
            self.stats.add_tool_failures((t, k, n) for (t, k), n in (tool_failures - failed_calls).items())
        return self.outcomes

    async def check_llm(self) -> None:
        """Ask the LLM whether it can answer (once): a server that cannot stops the run here."""
        if not self._llm_checked and hasattr(self.llm, "check"):
            await self.llm.check()
        self._llm_checked = True

    def _stop_if_all_fail_alike(self) -> None:
        done = self.stats.done
        if self.stats.failed == done >= min(SAME_FAILURE_STOP, self.stats.total):
            reasons = {o.error for o in self.outcomes}
            if len(reasons) == 1:
                which = f"all {done} trajectories" if done == self.stats.total else f"the first {done} trajectories"
                first = self.outcomes[0]
                where = f"\n  at {first.where}" if first.where else ""
                show = ""
                if first.trajectory_id and "local" in self.config.backend.split(","):
                    show = (
                        f"\n  the trajectory and its traceback: rollscope traces show {first.trajectory_id} --full "
                        f"--dir {resolve_dir(self.config.trace_dir)}"
                    )
                raise RunFailed(f"{which} failed the same way, so the run stopped: {reasons.pop()}{where}{show}")

    async def run_one(self, job: Job) -> Outcome:
        kwargs = loop_kwargs(job.row, job.position)
        return await self.run_trajectory(kwargs, self.sampling_params, kwargs["index"], job.rollout_n)

    async def run_trajectory(
        self,
        kwargs: dict[str, Any],
        sampling_params: dict[str, Any],
        sample_index: Any,
        rollout_n: int | None,
        **attributes: Any,
    ) -> Outcome:
        """One trajectory from a loop's keyword arguments (a dataset row's, or a recorded run's)."""
        from rollscope.agentloops.traced_loop import agent_name as loop_agent_name

        name = kwargs.get("agent_name") or self.config.agent
        entry = self.agent_entry if name == self.config.agent else resolve_agent(str(name))
        outcome = Outcome(sample_index=sample_index, rollout_n=rollout_n)
        token = loop_agent_name.set(str(name))
        try:
            with rollout_trace_attr(
                sample_index=sample_index,
                step=self.config.step,
                rollout_n=rollout_n,
                validate=self.config.validate,
                name=str(name),
                **{RUN: self.run_record, **self.run_link, **attributes},
            ) as trajectory:
                try:
                    output = await self.new_loop(entry).run(dict(sampling_params), **kwargs)
                    outcome.num_turns = output.num_turns  # (counted whatever the reward does next)
                    outcome.response_tokens = int(sum(output.response_mask))
                    try:
                        outcome.reward = await self._reward(output, kwargs)
                    except Exception:
                        outcome.reward_failed = True
                        raise
                finally:
                    if trajectory is not None:
                        outcome.trajectory_id = trajectory.id
                        outcome.tool_calls = trajectory.counts.get("tool", 0)
                        outcome.errors = trajectory.counts.get("errors", 0)
        except LLMServerError:
            raise
        except Exception as exc:  # one broken trajectory must not end the run; its trace has the error
            outcome.error = f"{type(exc).__name__}: {exc}"
            outcome.where = defined_at(self.reward_fn) if isinstance(exc, RewardError) else user_line(exc)
        finally:
            loop_agent_name.reset(token)
        return outcome

    async def _reward(self, output: Any, kwargs: dict[str, Any]) -> float | None:
        if self.reward_fn is None:
            return None if output.reward_score is None else float(output.reward_score)
        mask = output.response_mask
        own_ids = [t for t, m in zip(output.response_ids, mask, strict=False) if m]
        solution = self.tokenizer.decode(own_ids, skip_special_tokens=True)
        ground_truth = (kwargs.get("reward_model") or {}).get("ground_truth")
        with trace_span("reward", SpanKind.REWARD, {"solution": solution, "ground_truth": ground_truth}) as span:
            returned = self.reward_fn(kwargs.get("data_source"), solution, ground_truth, kwargs.get("extra_info"))
            if inspect.isawaitable(returned):
                returned = await returned
            value = reward_value(returned, self.config.reward, kwargs.get("index"))
            span.outputs = value
        set_reward(value, source="reward_fn")
        output.reward_score = value
        return value

    async def close(self) -> None:
        close = getattr(self.llm, "close", None) if self._owns_llm else None
        if close is not None:
            result = close()
            if inspect.isawaitable(result):
                await result
