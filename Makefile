# Two commands for a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
export WANDB_ERROR_REPORTING := false
export WANDB_SILENT := true

.PHONY: install demo test lint bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch first, pinned, so that verl does not pull a multi-GB CUDA build.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test]'
	touch $@

install: $(VENV)/.installed

demo: install
	$(BIN)/python examples/tracing_demo.py

lint: install
	$(BIN)/ruff check .

test: install lint
	$(BIN)/python -m pytest -q -p no:cacheprovider

# Several minutes; the MLflow extra is the anchor of the store benchmark.
bench: install
	$(BIN)/pip install -q -e '.[test,mlflow]'
	mkdir -p benchmarks/out
	$(BIN)/python benchmarks/bench_trace_op.py --json benchmarks/out/trace_op.json
	$(BIN)/python benchmarks/bench_store.py --json benchmarks/out/store.json
	$(BIN)/python benchmarks/bench_agent_loop.py --json benchmarks/out/agent_loop.json

clean:
	rm -rf $(VENV) rollscope_traces
