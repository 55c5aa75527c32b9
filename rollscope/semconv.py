"""The trace's vocabulary: every name a producer writes and a reader reads, defined once.

A loop, a tool or a client that records something and the store, a backend or the viewer that
reads it back agree only through these names, so they live here, below everything else, and
import nothing. OpenTelemetry's GenAI conventions are used where they have a name for the thing
(``gen_ai.*``); what they do not cover is ``rollscope.*``. Where a backend maps a name into its
destination's own conventions (OpenInference's ``llm.*`` in ``backends/otel.py``) that mapping
stays with the backend.
"""

# ---- a span's status (``Span.status``, ``SpanRecord.status``, a trajectory's status) ----
STATUS_RUNNING = "running"
STATUS_OK = "ok"
STATUS_ERROR = "error"
# Ended by ``asyncio``'s cancellation (a run that stopped, a caller that gave up): nothing in it
# failed, so it is not an error and blames no span; its message says why, where the canceller did.
STATUS_CANCELLED = "cancelled"

# ---- span names ----
LLM_SPAN_NAME = "llm.generate"  # every LLM turn a traced loop makes
# A tool call that never reached a tool (malformed, unknown, bad arguments): the span's name is
# this prefix and the name the model wrote.
TOOL_ERROR_PREFIX = "tool_call_error."

# ---- an llm span's attributes ----
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
FINISH_REASONS = "gen_ai.response.finish_reasons"
REQUEST_MODEL = "gen_ai.request.model"
LATENCY_S = "latency_s"
CONSTRAINED = "rollscope.constrained"  # the reply was sampled with its tool calls held to their schemas
REDACTED_TOKENS = "rollscope.redacted_tokens"  # how many of the span's token ids are ``REDACTED_ID``
# On an llm span whose prompt was made whole again: the turn it continues, how many of its tokens
# (and characters of its text) come from there; a reader shows what follows them as what the turn added.
PROMPT_CONTINUES = "rollscope.prompt_continues"
# On an llm span whose prompt could not be made whole (the turn it continues is not in the trace).
PROMPT_UNRESOLVED = "rollscope.prompt_unresolved"

# ---- an llm span's inputs: a prompt recorded whole, or as what it adds (``trajectory.turns``) ----
PROMPT_IDS = "prompt_ids"
PROMPT_TEXT = "prompt_text"
PROMPT_BASE = "prompt_base"  # {"span", "tokens", "reply", ...}: where the prompt continues from
PROMPT_IDS_ADDED = "prompt_ids_added"
PROMPT_TEXT_ADDED = "prompt_text_added"

# ---- token ids ----
REDACTED_ID = -1  # a token that carried a secret (no tokenizer has a negative id)
REDACTED_TEXT = "[REDACTED]"  # what a secret's text, and a run of redacted tokens, reads as

# ---- a tool span's attributes ----
TOOL_NAME = "tool.name"
ERROR_KIND = "tool.error_kind"  # why a tool call failed: malformed_call, unknown_tool, bad_arguments, ...

# ---- a run span's attributes ----
STOP = "rollscope.stop"  # why the loop stopped (``TURN_LIMIT``: ``record_turn_limit``)
TURN_LIMIT = "max_assistant_turns"  # that reason, also verl's ``extra_fields["stop"]``, when every turn was used
REPLAY = "rollscope.replay"  # what a replay rebuilds the loop from (its tokenizer too)
RETOKENIZATION = "rollscope.retokenization"  # the chat-template check's result
RETOKENIZATION_REQUEST = "rollscope.retokenization.request"  # what the check needs, until it has run
SPLIT_ONLY = "split"  # the check's ``cause`` when the text is the template's and only its tokens differ

# ---- a trajectory's attributes ----
RUN = "rollscope.run"  # the reward, tools, LLM and model ``rollscope run`` used
REWARD_DETAILS = "reward_details"  # a reward's components (verl's ``reward_extra_info``)
WANDB_RUN = "wandb.run"  # the W&B run it belongs to, "entity/project/run_id"
REPLAY_OF = "replay_of"  # the trajectory a replay re-ran
# On a trajectory as read (not stored): its recorded tokenizer's path holds another vocabulary now
TOKENIZER_CHANGED = "rollscope.tokenizer_changed"
UNREADABLE = "rollscope.unreadable"  # on a span or trajectory whose stored payload could not be read

# ---- sampling parameters a loop passes to ``generate`` ----
CONSTRAIN = "constrain_tool_calls"  # the run config's key asking for constrained tool calls (the loop's)
TOOL_SCHEMAS = "constrained_tool_schemas"  # the key the turn's tool schemas travel in to the client

# ---- verl's data ----
# The rollout output's extra field holding the trajectory's id: verl carries it into the training
# batch, where the trainer's side joins what training did with it.
TRAJECTORY_KEY = "rollscope_trajectory_id"
