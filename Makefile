# Two set-up commands on a fresh machine: `make demo` and `make test`.
# Both create .venv when missing and (re)install only when pyproject.toml changed.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-long chaos stress bench docs

# -qq: pip prints errors only (a failed build still shows in full). At -q it also relays
# setuptools' warnings about pyproject.toml (ext-modules "experimental", the license
# table "deprecated"), which a user of `make demo` has nothing to do about.
# editable_mode=compat: the checkout on the path, where PySpark's lookup of pyspark_*
# modules finds pyspark_sluice (format("sluice") with no register call).
$(STAMP): pyproject.toml setup.py Makefile
	@echo "Installing Sluice and its dependencies into $(VENV) (again only when its install files change)"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -qq --disable-pip-version-check --upgrade pip
	@$(PY) -m pip install -qq --disable-pip-version-check --config-settings editable_mode=compat -e '.[test]'
	@touch $(STAMP)

demo: $(STAMP)
	@$(PY) -m examples.demo

test: $(STAMP)
	$(PY) -m pytest -q -m "not chaos and not long"

# The long cluster failure runs (rolling restarts, a ZooKeeper outage, an offline
# partition): -s shows each run's anomaly counts and seed.
chaos: $(STAMP)
	$(PY) -m pytest -q -s -m chaos

# The long runs kept out of `make test` (run before resolving): the exactly-once sink
# where transactions time out, fail half way or are fenced, over 1,000 micro-batches with
# its transactional ids still bounded, and through SIGKILLs of its driver at every point;
# the source across a driver SIGKILL; the sink across a broker and a driver kill on a
# cluster; the source and sink on a Spark standalone cluster (an executor killed,
# speculative attempts); `pip install 'sluice[spark]'` into a fresh environment; and the
# broker, sink and comparison benchmarks run end to end at tiny sizes.
test-long: $(STAMP)
	SLUICE_SINK_BATCHES=1000 $(PY) -m pytest -q -s -m long

# Tests that once failed on a loaded machine, each run STRESS_RUNS times in a row (a fresh
# pytest each time) while one busy process per core takes the CPU: a race shows here
# before it shows in CI. `make stress STRESS_TESTS=tests/x.py::test_y` runs others.
STRESS_RUNS ?= 20
STRESS_TESTS ?= \
	tests/test_broker_limits.py::test_idle_connections_are_closed_but_not_long_polls \
	tests/test_cluster_cli.py::test_start_status_use_stop_and_start_again \
	'tests/test_broker_failures.py::test_sigkill_during_idempotent_produce_loses_and_duplicates_nothing[small-batches]' \
	'tests/test_broker_failures.py::test_sigkill_during_idempotent_produce_loses_and_duplicates_nothing[large-batches]' \
	tests/test_retention.py::test_broker_retention_by_size_and_consumer_resets \
	tests/test_zookeeper_layout.py::test_a_paused_zookeeper_answers_again_once_resumed \
	tests/test_cluster_reassignment.py::test_a_new_controller_completes_the_reassignment_of_one_killed_midway
# A cluster's start-up, with registrations landing around the controller's election (issue 38).
STRESS_STARTUP_RUNS ?= 50
STRESS_STARTUP ?= tests/test_cluster.py::test_registrations_just_before_during_and_after_an_election_are_all_known
stress: $(STAMP)
	$(PY) tools/stress.py --runs $(STRESS_RUNS) $(STRESS_TESTS)
	$(PY) tools/stress.py --runs $(STRESS_STARTUP_RUNS) $(STRESS_STARTUP)

# The documentation site (docs/, mkdocs.yml) into site/; --strict as `make test` builds it.
docs: $(STAMP)
	$(PY) -m mkdocs build --strict

# make bench BENCH_ARGS=--quick for the short run
bench: $(STAMP)
	$(PY) -m bench $(BENCH_ARGS)
