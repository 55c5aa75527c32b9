"""verl's trainer, joined to the traces: what every training job verl starts runs, on any hardware.

``verl_hook`` is loaded by verl on its driver (the ``verl.plugins`` entry point): it wraps the
trainer's step so that what training did with each trajectory (``training_record``: its advantage,
log-probs, entropy and loss mask, token by token) is stored beside it, and ties the run's W&B run to
its traces. Running verl without a GPU is apart, in ``rollscope.cpu``.
"""
