"""A test double for an SGLang that refuses a weight sync, without hardware to break: loaded by verl
in each of its processes (``VERL_USE_EXTERNAL_MODULES``, beside rollscope's CPU plugin), it makes
verl's SGLang adapter send ``model.norm.weight`` one element short from the second sync on (the
first is verl's initial one, before step 1), so that SGLang's own weight loader refuses it."""

from types import ModuleType

from rollscope._import_hooks import after_import

NAME = "model.norm.weight"


def _refused_from_the_second_sync(module: ModuleType) -> None:
    adapter = module.ServerAdapter
    update_weights = adapter.update_weights
    syncs = []

    async def short_one(self, weights, *args, **kwargs):
        syncs.append(1)
        if len(syncs) >= 2:
            weights = ((name, tensor[:-1] if name == NAME else tensor) for name, tensor in weights)
        return await update_weights(self, weights, *args, **kwargs)

    adapter.update_weights = short_one


after_import("verl.workers.rollout.sglang_rollout.sglang_rollout", _refused_from_the_second_sync)
