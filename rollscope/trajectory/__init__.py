"""A trajectory as recorded: what producers write and readers read, beyond the names in ``semconv``.

``records`` (a stored trajectory and span), ``summary`` (a trajectory's counts and signals, summed
from its spans as they end or as they are read), ``tokens`` and ``text`` (token ids, redacted ones
too, read as text with the tokenizer the trace names), ``turns`` (an LLM turn recorded as what it
adds, made whole again), ``chat`` (a turn as OpenAI-style messages) and ``retokenization`` (the
chat-template check). Tracing, the store, the backends and the viewer share these; this package
imports nothing of rollscope but ``semconv``.
"""
