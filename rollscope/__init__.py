"""rollscope: agent loops with trace instrumentation built in, for RL post-training on verl."""

__version__ = "0.1.0"
