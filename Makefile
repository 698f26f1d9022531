# chunkyard: `make run`, `make test`, `make ui` work on a fresh machine with Python 3.11.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.chunkyard-installed
DOCS ?= examples/docs
PORT ?= 3000
# Set it (environment or `make run DAGSTER_HOME=...`) to give a second database its own Dagster
# instance (README, "One folder per database"); made absolute, as Dagster requires.
DAGSTER_HOME ?= .dagster
override export DAGSTER_HOME := $(abspath $(DAGSTER_HOME))
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: run test ui ui-command bench bench-instructions clean venv browser

venv: $(STAMP)

# torch 2.13.0 (CPU) goes in first: with it present, sentence-transformers' torch
# requirement is already met and pip does not fetch the CUDA build.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# Copied once, when the instance has none: an instance's own dagster.yaml (a lake instance's,
# README "Store modes") is never overwritten.
$(DAGSTER_HOME)/dagster.yaml:
	mkdir -p $(DAGSTER_HOME)
	test -f $@ || cp dagster-instance.yaml $@

run: $(STAMP) $(DAGSTER_HOME)/dagster.yaml
	$(PY) -m orchestration.cli run --docs $(DOCS)

test: $(STAMP) browser
	$(PY) -m pytest -q

# The browser test (tests/e2e/test_browser.py) drives Debian's chromium through its
# chromedriver. Installed here when absent and apt-get can run as root; where it cannot
# (not root, no apt, no reachable mirror) the test skips and says why.
browser:
	@if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then :; \
	elif command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium chromium-driver \
		|| echo "browser: apt-get could not install chromium chromium-driver; tests/e2e/test_browser.py will skip"; \
	else \
		echo "browser: /usr/bin/chromium or /usr/bin/chromedriver is missing and apt-get cannot run as root here;" \
		     "install chromium and chromium-driver to run tests/e2e/test_browser.py"; \
	fi

# `dg dev` is what Dagster 1.13 recommends over the superseded `dagster dev` (same
# webserver + daemon). tests/e2e/test_browser.py starts the UI with UI_COMMAND.
UI_COMMAND = $(VENV)/bin/dg dev -h 127.0.0.1 -p $(PORT) -w workspace.yaml
# The UI opens its lineage with every group collapsed (a per-browser setting, no server
# default); this link opens them all (orchestration/cli.py lineage_url).
ui: $(STAMP) $(DAGSTER_HOME)/dagster.yaml
	@$(PY) -c "from orchestration.cli import lineage_url, asset_group_names; from orchestration.definitions import defs; \
		print('chunkyard: the lineage, every group open:', lineage_url('http://127.0.0.1:$(PORT)', asset_group_names(defs)))"
	CHUNKYARD_DOCS=$(DOCS) $(UI_COMMAND)

ui-command:
	@echo $(UI_COMMAND)

# `make bench`: the chunker speed table (x one tiktoken encode, with the peer chunkers)
# and the semantic one (~50k tokens through the model), each printed as it finishes.
# Its own venv, .venv-bench: the project (torch 2.13.0 CPU first, as above) plus the
# peers of bench/requirements-peers.txt, which the project itself does not need.
# Timings: README, "Benchmarks" (the chunker table, 25 repetitions with the peers: ~3-7 min; the semantic
# one ~2, and ~3 more beside two busy loops).
BENCH_VENV := .venv-bench
BENCH_PY := $(BENCH_VENV)/bin/python
BENCH_STAMP := $(BENCH_VENV)/.chunkyard-bench-installed

# --no-compile: no .pyc for the thousands of files of torch and dagster up front
# (minutes on a loaded machine); Python compiles what the benches import, once, and
# writes it even where PYTHONDONTWRITEBYTECODE is set (else every bench process compiles
# torch, transformers and sentence-transformers again: a model load of ~11 s, not ~5).
bench bench-instructions: export PYTHONDONTWRITEBYTECODE :=
$(BENCH_STAMP): pyproject.toml bench/requirements-peers.txt
	test -x $(BENCH_PY) || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_PY) -m pip install --quiet --no-compile --upgrade pip
	$(BENCH_PY) -m pip install --quiet --no-compile torch==2.13.0
	$(BENCH_PY) -m pip install --quiet --no-compile -e . -r bench/requirements-peers.txt
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	@echo "== bench/bench_strategies.py: chunkers and peers, x one encode"
	$(BENCH_PY) bench/bench_strategies.py --repeat 25
	@echo "== bench/bench_semantic.py: semantic on ~50k tokens, the default precision vs int8 and float32"
	$(BENCH_PY) bench/bench_semantic.py --repeat 3
	@echo "== bench/bench_semantic.py --busy 2: the same beside two busy loops (a shared machine)"
	$(BENCH_PY) bench/bench_semantic.py --repeat 3 --busy 2

# `make bench-instructions`: the chunker table again by instruction count (valgrind's callgrind,
# which must be installed): the same ratios without the machine's load in them; ~17 min.
bench-instructions: $(BENCH_STAMP)
	$(BENCH_PY) bench/bench_strategies.py --instructions

clean:
	rm -rf data .dagster
