"""Two fixes for SGLang on a CPU, run at interpreter start-up in every process of the venv (a
``.pth`` line of the wheel ``make sglang`` installs, where this module is ``_rollscope_sglang_cpu``;
see ``rollscope.cpu.sglang``). Each is applied only when its module is imported, and only
acts on the CPU case; installing them costs a finder on ``sys.meta_path``.

- ``torchvision._meta_registrations`` is skipped where torchvision's operators did not load. PyPI's
  torchvision for Linux is a CUDA build; beside torch's CPU build its ``_C`` extension does not
  load, and that module (fake-tensor kernels for ``torchvision::nms``, ``roi_align``...) then
  raises, failing ``import torchvision`` and all that imports it (SGLang's utilities, transformers'
  image processing). Its registrations describe only the absent operators.
- SGLang's xgrammar backend masks logits on CUDA, NPU, XPU and MUSA and raises "Unsupported device:
  cpu" otherwise, which kills the scheduler at the first request with a grammar (a structural tag:
  tool calls held to their schemas). On CPU logits it applies SGLang's own torch implementation of
  the mask (``apply_token_bitmask_inplace_torch``, its NPU path).
"""

TORCHVISION_META = "torchvision._meta_registrations"
XGRAMMAR_BACKEND = "sglang.srt.constrained.xgrammar_backend"


def _torchvision_meta(module, execute):
    from torchvision.extension import _has_ops

    if _has_ops():
        execute(module)


def _xgrammar_backend(module, execute):
    execute(module)
    from sglang.srt.constrained.torch_ops.bitmask_ops import apply_token_bitmask_inplace_torch

    grammar, backend = module.XGrammarGrammar, module.XGrammarGrammarBackend
    per_grammar, per_backend = grammar.apply_vocab_mask, backend.apply_vocab_mask

    def grammar_mask(self, logits, vocab_mask):
        if logits.device.type == "cpu":
            return apply_token_bitmask_inplace_torch(logits, vocab_mask)
        return per_grammar(self, logits, vocab_mask)

    def backend_mask(logits, vocab_mask):
        if logits.device.type == "cpu":
            return apply_token_bitmask_inplace_torch(logits, vocab_mask)
        return per_backend(logits, vocab_mask)

    grammar.apply_vocab_mask, backend.apply_vocab_mask = grammar_mask, staticmethod(backend_mask)


FIXES = {TORCHVISION_META: _torchvision_meta, XGRAMMAR_BACKEND: _xgrammar_backend}


def install():
    from _rollscope_import_hooks import wrap_import  # (rollscope._import_hooks, shipped beside this module)

    for name, fix in FIXES.items():
        wrap_import(name, fix)
