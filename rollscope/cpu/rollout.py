"""The ``hf_cpu`` rollout: verl's token-in/token-out server contract, served on CPU.

verl's agent loops talk to a rollout *server* (``LLMServerClient.generate`` ->
``server.generate.remote``), and the trainer pushes the actor's weights to it after every update.
Three pieces plug into verl for that, each at the point verl itself looks one up by name:

- ``HFCPUServer``, the server: a Ray actor that runs Hugging Face ``generate`` on the requests
  waiting at that moment as one left-padded batch, returning token ids, the log-probabilities of
  the sampled tokens (``log_softmax(logits / temperature)``, what verl's actor computes) and the
  weight version that generated them (``extra_fields["global_steps"]``, as verl's vLLM server);
- ``HFCPUServerAdapter``, the trainer-side ``BaseRollout`` (verl's rollout registry): receives the
  FSDP weights at each sync and loads them into the server;
- ``HFCPUReplica``, the driver-side ``RolloutReplica`` (``RolloutReplicaRegistry``): starts the server.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import ray
import torch
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, TokenOutput

from rollscope.cpu import ROLLOUT_NAME, UnsupportedOnCPU

MAX_BATCH = 64  # requests generated together; more wait for the next batch


def server_name(replica_rank: int) -> str:
    return f"rollscope_hf_cpu_server_{replica_rank}"


def _max_tokens(params: dict[str, Any], prompt_len: int, prompt_length: int, response_length: int) -> int:
    """verl's vLLM server's rule: the request's own limit, else what the configured lengths leave."""
    limit = params.get("max_tokens") or params.get("max_new_tokens")
    if limit is None:
        limit = min(response_length, prompt_length + response_length - prompt_len)
    return max(1, int(limit))


class _Request:
    __slots__ = ("future", "max_tokens", "prompt_ids", "sampling")

    def __init__(
        self, prompt_ids: list[int], sampling: tuple[float, float, int], max_tokens: int, future: asyncio.Future
    ) -> None:
        self.prompt_ids, self.sampling, self.max_tokens, self.future = prompt_ids, sampling, max_tokens, future


class HFCPUServer:
    """verl's rollout-server interface over a Hugging Face causal LM on CPU."""

    def __init__(self, model_path: str, prompt_length: int, response_length: int, dtype: str = "float32") -> None:
        """``dtype``: verl's ``rollout.dtype``, what the server computes in (float32 matches the CPU
        trainer; bfloat16, verl's default for vLLM, gives the rollout-vs-trainer log-prob gap of
        a GPU run)."""
        from transformers import AutoModelForCausalLM

        torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))  # the trainer's workers share the cores
        self.model = AutoModelForCausalLM.from_pretrained(model_path, torch_dtype=getattr(torch, dtype)).eval()
        config = self.model.config
        self.eos_ids = {config.eos_token_id} if isinstance(config.eos_token_id, int) else set(config.eos_token_id or ())
        self.pad_id = config.pad_token_id if config.pad_token_id is not None else min(self.eos_ids, default=0)
        self.prompt_length, self.response_length = prompt_length, response_length
        self.version = 0  # the trainer step whose weights are loaded (0: the initial weights)
        self.pending: list[_Request] = []
        self.batcher: asyncio.Task | None = None
        self.weights_lock: asyncio.Lock | None = None

    # ---- generation ----
    async def generate(
        self,
        request_id: str,
        *,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        image_data: Any = None,
        video_data: Any = None,
        **kwargs: Any,
    ) -> TokenOutput:
        if image_data is not None or video_data is not None or kwargs.get("audio_data") is not None:
            raise UnsupportedOnCPU("the hf_cpu rollout generates from text only (no image, video or audio data)")
        temperature = float(sampling_params.get("temperature", 1.0) or 0.0)
        top_k = int(sampling_params.get("top_k", -1) or -1)
        top_p = float(sampling_params.get("top_p", 1.0) or 1.0)
        max_tokens = _max_tokens(sampling_params, len(prompt_ids), self.prompt_length, self.response_length)
        future = asyncio.get_running_loop().create_future()
        self.pending.append(_Request(list(prompt_ids), (temperature, top_p, top_k), max_tokens, future))
        if self.batcher is None or self.batcher.done():
            self.batcher = asyncio.create_task(self._serve_pending())
        return await future

    async def _serve_pending(self) -> None:
        """Generate for everything waiting, one batch per sampling setting, until nothing waits.
        Generation runs in a thread, so requests arriving meanwhile join the next batch."""
        if self.weights_lock is None:
            self.weights_lock = asyncio.Lock()
        while self.pending:
            await asyncio.sleep(0)  # let the requests of this moment arrive
            sampling = self.pending[0].sampling
            batch = [r for r in self.pending if r.sampling == sampling][:MAX_BATCH]
            taken = set(map(id, batch))
            self.pending = [r for r in self.pending if id(r) not in taken]
            async with self.weights_lock:
                try:
                    results = await asyncio.to_thread(self._generate_batch, batch, sampling)
                except Exception as exc:
                    for r in batch:
                        if not r.future.done():
                            r.future.set_exception(exc)
                    continue
            for r, result in zip(batch, results, strict=True):
                if not r.future.done():
                    r.future.set_result(result)

    @torch.no_grad()
    def _generate_batch(self, batch: list[_Request], sampling: tuple[float, float, int]) -> list[TokenOutput]:
        temperature, top_p, top_k = sampling
        width = max(len(r.prompt_ids) for r in batch)
        ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, r in enumerate(batch):  # left padding: every prompt ends where generation starts
            ids[row, width - len(r.prompt_ids) :] = torch.tensor(r.prompt_ids)
            mask[row, width - len(r.prompt_ids) :] = 1
        sample = temperature > 0
        out = self.model.generate(
            ids,
            attention_mask=mask,
            max_new_tokens=max(r.max_tokens for r in batch),
            do_sample=sample,
            temperature=temperature if sample else None,
            top_p=top_p if sample else None,
            top_k=(top_k if top_k > 0 else 0) if sample else None,
            output_logits=True,
            return_dict_in_generate=True,
            pad_token_id=self.pad_id,
            eos_token_id=sorted(self.eos_ids) or None,
        )
        steps = torch.stack(out.logits, dim=1).float()  # (batch, new tokens, vocab): the model's raw logits
        logprobs = torch.log_softmax(steps / temperature if sample else steps, dim=-1)
        new = out.sequences[:, width:]
        chosen = logprobs.gather(-1, new.unsqueeze(-1)).squeeze(-1)
        results = []
        for row, r in enumerate(batch):
            tokens = new[row, : r.max_tokens].tolist()
            stop = next((i + 1 for i, t in enumerate(tokens) if t in self.eos_ids), None)
            tokens = tokens[:stop] if stop is not None else tokens
            results.append(
                TokenOutput(
                    token_ids=tokens,
                    log_probs=chosen[row, : len(tokens)].tolist(),
                    stop_reason="completed",
                    extra_fields={"global_steps": self.version},
                )
            )
        return results

    # ---- weight sync ----
    async def load_weights(self, state_dict: dict[str, torch.Tensor], version: int | None = None) -> int:
        """The actor's weights after an update; ``version`` the trainer step (verl's global_steps)."""
        if self.weights_lock is None:
            self.weights_lock = asyncio.Lock()
        async with self.weights_lock:
            _missing, unexpected = self.model.load_state_dict(state_dict, strict=False)
            if unexpected:
                raise ValueError(f"hf_cpu rollout: weights not in the model: {sorted(unexpected)[:5]}")
            self.version = int(version) if version is not None else self.version + 1
        return self.version

    # ---- lifecycle calls verl makes on every server; nothing to do on CPU ----
    async def wake_up(self) -> None: ...
    async def sleep(self) -> None: ...
    async def clear_kv_cache(self) -> None: ...
    async def release_kv_cache(self) -> None: ...
    async def resume_kv_cache(self) -> None: ...
    async def abort_all_requests(self, reject_request: bool = False) -> None: ...
    async def resume_generation(self) -> None: ...
    async def start_profile(self, **kwargs: Any) -> None: ...
    async def stop_profile(self) -> None: ...


class HFCPUServerAdapter(BaseRollout):
    """In verl's ActorRolloutRefWorker: hands the FSDP weights to the server at every sync."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, model_config, device_mesh)
        self.replica_rank = int(os.environ.get("RANK", "0")) // max(1, self.config.tensor_model_parallel_size)

    async def resume(self, tags: list[str]) -> None:
        pass

    async def release(self) -> None:
        pass

    async def update_weights(self, weights: Any, wire_format: str = "named_tensors", **kwargs: Any) -> None:
        if wire_format != "named_tensors":
            raise UnsupportedOnCPU(
                f"the hf_cpu rollout takes full weights (wire_format={wire_format!r}); "
                "leave actor_rollout_ref.rollout.checkpoint_engine at its default"
            )
        state_dict = {name: tensor.detach().to("cpu").clone() for name, tensor in weights}
        if torch.distributed.get_rank() % max(1, self.config.tensor_model_parallel_size) == 0:
            server = ray.get_actor(server_name(self.replica_rank))
            await server.load_weights.remote(state_dict, kwargs.get("global_steps"))


class HFCPUReplica(RolloutReplica):
    """Starts one ``HFCPUServer`` per replica; refuses parallel layouts a CPU cannot provide."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.world_size != 1:
            raise UnsupportedOnCPU(
                "the hf_cpu rollout runs one process per replica: set actor_rollout_ref.rollout."
                f"tensor_model_parallel_size, data_parallel_size and pipeline_model_parallel_size to 1 "
                f"(their product is {self.world_size})"
            )

    def rollout_worker_use_gpu(self) -> bool:
        return False

    async def launch_servers(self) -> None:
        actor = ray.remote(num_cpus=0)(HFCPUServer)
        handle = actor.options(name=server_name(self.replica_rank), max_concurrency=self.max_concurrency).remote(
            self.model_config.path,
            self.config.prompt_length,
            self.config.response_length,
            str(self.config.get("dtype") or "float32"),
        )
        self.servers = [handle]
        self._server_handle = handle
        self._server_address = f"{ROLLOUT_NAME}://replica{self.replica_rank}"
