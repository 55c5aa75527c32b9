"""What a store's trajectories say, read through the store's public query API (``TraceStore``,
``store.reader.where_clause``, ``store.groups``): ``insights`` (a run's signals per step: errors,
truncations, reward and entropy trends; ``signal``: one signal at one step), ``hacking`` (when the
reward starts lying: onset, strength, examples), ``metric_changes`` (a W&B run's metric jumps),
``history`` (a prompt across steps), ``live`` (what is running, what stalled) and ``grpo`` (a
group's advantages as GRPO computes them)."""
