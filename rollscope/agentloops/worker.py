"""verl's AgentLoopManager with the one thing rollscope's loops cannot do alone: verl's reward.

Optional. verl's plain worker already traces rollscope loops completely from verl's ``trace.*``
keys (``verl_run``): every trajectory with its run, LLM turns, tool calls, verl's attributes, the
seeded sample choice, and the reward the loop itself knows. What the manager adds is the reward
verl computes *after* ``run`` returns (its reward-loop workers): the worker keeps the trajectory
open until verl has scored it, so the reward is on the trajectory in every backend, Weave's root
call included.

    +actor_rollout_ref.rollout.agent.agent_loop_manager_class=rollscope.agentloops.TracedAgentLoopManager
"""

from __future__ import annotations

import logging
from typing import Any

import ray
from verl.experimental.agent_loop.agent_loop import AgentLoopManager, AgentLoopWorker

from rollscope.agentloops.verl_run import VerlRun, open_verl_trajectory, start_from_trainer_config
from rollscope.tracing import current_trajectory, get_tracer, set_reward

log = logging.getLogger("rollscope.agentloops")


class TracedAgentLoopWorker(AgentLoopWorker):
    def __init__(self, config: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        start_from_trainer_config(config)  # before the first trajectory (a loop would do it in it)

    async def _run_agent_loop(self, sampling_params: dict[str, Any], trajectory: dict[str, Any], *,
                              agent_name: str, **kwargs: Any) -> Any:  # fmt: skip
        if get_tracer() is None:
            return await super()._run_agent_loop(sampling_params, trajectory, agent_name=agent_name, **kwargs)
        with open_verl_trajectory(VerlRun(trajectory, agent_name), agent_name):  # the loop's run joins it
            return await super()._run_agent_loop(sampling_params, trajectory, agent_name=agent_name, **kwargs)

    async def _compute_score(self, outputs: list[Any], kwargs: dict) -> None:
        await super()._compute_score(outputs, kwargs)
        final = outputs[-1]
        if current_trajectory() is None or final.reward_score is None:
            return
        extra = final.extra_fields.get("reward_extra_info") or {}
        try:
            set_reward(final.reward_score, source="verl_reward", **extra)
        except (TypeError, ValueError) as exc:  # an odd score must not fail the batch
            log.warning("reward %r not recorded: %s", final.reward_score, exc)


class TracedAgentLoopManager(AgentLoopManager):
    def __init__(self, config: Any, *args: Any, **kwargs: Any) -> None:
        refuse_transfer_queue(config)
        self.agent_loop_workers_class = ray.remote(TracedAgentLoopWorker)
        super().__init__(config, *args, **kwargs)


def refuse_transfer_queue(config: Any) -> None:
    """With ``transfer_queue.enable=True`` verl's trainer expects the manager to put every output
    into the TransferQueue (``AgentLoopManagerTQ`` does); this manager returns them instead, so
    training would stall. rollscope's loops trace themselves under verl's TQ manager."""
    tq = config.get("transfer_queue") if hasattr(config, "get") else None
    if tq is not None and tq.get("enable", False):
        raise ValueError(
            "rollscope.agentloops.TracedAgentLoopManager does not work with transfer_queue.enable=True: "
            "remove actor_rollout_ref.rollout.agent.agent_loop_manager_class (rollscope loops are traced under "
            "verl's AgentLoopManagerTQ from trace.backend alone; only verl's reward is then not on the trace)"
        )
