"""verl's own trainer (``python -m verl.trainer.main_ppo``) without a GPU, and the training demo.

``cpu`` is the plugin verl loads in every process (``VERL_USE_EXTERNAL_MODULES=rollscope.trainer.cpu.plugin``):
a CPU platform and a CPU rollout server behind verl's own plugin points. ``launch`` builds the
environment and overrides that run ``main_ppo`` with it; ``demo`` is ``make demo-train``.
"""
