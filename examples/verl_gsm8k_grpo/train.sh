#!/usr/bin/env bash
# GRPO on GSM8K with vLLM and a small Qwen model, traced into Weave: the Weave guide's command for
# verl (trace.backend=weave, async rollout, project/experiment names, the wandb logger) plus
# rollscope's loop and tool YAML. Needs a GPU, WANDB_API_KEY, and GSM8K prepared by verl's own
# preprocessing (see README.md). Extra Hydra overrides go after the script's name.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
DATA="${DATA:-$HOME/data/gsm8k}"

python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    data.train_files="$DATA/train.parquet" \
    data.val_files="$DATA/test.parquet" \
    data.train_batch_size=256 \
    data.max_prompt_length=1024 \
    data.max_response_length=1024 \
    data.return_raw_chat=True \
    actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=64 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8 \
    actor_rollout_ref.actor.use_kl_loss=True \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.mode=async \
    actor_rollout_ref.rollout.n=5 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.6 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8 \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8 \
    actor_rollout_ref.rollout.multi_turn.enable=True \
    actor_rollout_ref.rollout.multi_turn.format=hermes \
    actor_rollout_ref.rollout.multi_turn.max_assistant_turns=4 \
    actor_rollout_ref.rollout.multi_turn.tool_config_path="$HERE/tools.yaml" \
    actor_rollout_ref.rollout.agent.agent_loop_config_path="$HERE/agent_loops.yaml" \
    actor_rollout_ref.rollout.agent.default_agent_loop=rollscope_tool_agent \
    actor_rollout_ref.rollout.trace.backend=weave \
    actor_rollout_ref.rollout.trace.token2text=True \
    actor_rollout_ref.rollout.trace.max_samples_per_step_per_worker=8 \
    trainer.logger="['console','wandb']" \
    trainer.project_name=verl_grpo_gsm8k \
    trainer.experiment_name=qwen2.5_0.5b_rollscope \
    trainer.n_gpus_per_node=1 \
    trainer.nnodes=1 \
    trainer.total_epochs=1 \
    "$@"
