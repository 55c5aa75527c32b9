from tests.agentloops.conftest import model_dir, tokenizer, verl_config  # noqa: F401  (shared fixtures)
