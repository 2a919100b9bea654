# Two set-up commands on a fresh machine: `make demo` and `make test`.
# Both create .venv when missing and (re)install only when pyproject.toml changed.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test bench

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m examples.demo

test: $(STAMP)
	$(PY) -m pytest -q

# make bench BENCH_ARGS=--quick for the short run
bench: $(STAMP)
	$(PY) -m bench $(BENCH_ARGS)
