# chunkyard: `make run`, `make test`, `make ui` work on a fresh machine with Python 3.11.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.chunkyard-installed
DOCS ?= examples/docs
PORT ?= 3000
export DAGSTER_HOME := $(CURDIR)/.dagster
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: run test ui bench clean venv

venv: $(STAMP)

# torch 2.13.0 (CPU) goes in first: with it present, sentence-transformers' torch
# requirement is already met and pip does not fetch the CUDA build.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

$(DAGSTER_HOME)/dagster.yaml: dagster.yaml
	mkdir -p $(DAGSTER_HOME)
	cp dagster.yaml $@

run: $(STAMP) $(DAGSTER_HOME)/dagster.yaml
	$(PY) -m orchestration.cli run --docs $(DOCS)

test: $(STAMP)
	$(PY) -m pytest -q

ui: $(STAMP) $(DAGSTER_HOME)/dagster.yaml
	CHUNKYARD_DOCS=$(DOCS) $(VENV)/bin/dagster dev -h 127.0.0.1 -p $(PORT) -w workspace.yaml

bench: $(STAMP)
	for script in bench/*.py; do $(PY) $$script || exit 1; done

clean:
	rm -rf data .dagster
