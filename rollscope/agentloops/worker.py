"""verl's AgentLoopWorker and AgentLoopManager with rollscope's tracing hooks.

Name the manager in verl's config and nothing else changes:

    +actor_rollout_ref.rollout.agent.agent_loop_manager_class=rollscope.agentloops.TracedAgentLoopManager

The worker then (1) starts rollscope tracing from verl's own trace config, (2) replaces verl's
unseeded per-worker sample choice with rollscope's deterministic one (same samples on every
worker and every run, whole GRPO groups), and (3) attaches the reward verl computes after ``run``
returns to the trajectory that ``run`` recorded.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import ray
from verl.experimental.agent_loop.agent_loop import AgentLoopManager, AgentLoopWorker
from verl.utils.rollout_trace import RolloutTraceConfig

from rollscope.agentloops.traced_loop import agent_name as loop_agent_name
from rollscope.agentloops.traced_loop import last_trajectory
from rollscope.tracing import get_tracer, init_from_verl_config

log = logging.getLogger("rollscope.agentloops")


class TracedAgentLoopWorker(AgentLoopWorker):
    def __init__(self, config: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        init_from_verl_config(config)
        # rollscope samples instead (see _run_agent_loop): verl must not drop samples on its own.
        RolloutTraceConfig.get_instance().max_samples_per_step_per_worker = None

    async def generate_sequences(self, batch: Any) -> Any:
        tracer = get_tracer()
        if tracer is not None and tracer.sampler.k is not None:
            index = batch.non_tensor_batch.get("index")
            indices = index.tolist() if index is not None else np.arange(len(batch)).tolist()
            tracer.sampler.plan(batch.meta_info.get("global_steps", -1), indices)
        return await super().generate_sequences(batch)

    async def _run_agent_loop(self, sampling_params: dict[str, Any], trajectory: dict[str, Any], *,
                              agent_name: str, trace: bool = True, **kwargs: Any) -> Any:  # fmt: skip
        tracer = get_tracer()
        if tracer is not None and trace:
            trace = tracer.sampler.should_trace(trajectory["step"], trajectory["sample_index"])
        token = loop_agent_name.set(agent_name)
        try:
            return await super()._run_agent_loop(sampling_params, trajectory, agent_name=agent_name, trace=trace,
                                                 **kwargs)  # fmt: skip
        finally:
            loop_agent_name.reset(token)

    async def _compute_score(self, outputs: list[Any], kwargs: dict) -> None:
        await super()._compute_score(outputs, kwargs)
        tracer, trajectory, final = get_tracer(), last_trajectory.get(), outputs[-1]
        if tracer is None or trajectory is None or final.reward_score is None:
            return
        extra = final.extra_fields.get("reward_extra_info") or {}
        try:
            tracer.reward(trajectory.id, float(final.reward_score), {"source": "verl_reward", **extra})
        except (TypeError, ValueError) as exc:  # an odd score must not fail the batch
            log.warning("reward %r not recorded: %s", final.reward_score, exc)


class TracedAgentLoopManager(AgentLoopManager):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.agent_loop_workers_class = ray.remote(TracedAgentLoopWorker)
        super().__init__(*args, **kwargs)
