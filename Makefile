# The two commands of the README: `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
DEMO ?= demo

.PHONY: demo test setup setup-test clean

setup:
	bash .ci/setup.sh bench

setup-test:
	bash .ci/setup.sh dali,test

# Build a realistic sample folder from the shipped photos, pack it, show it,
# load it and train on it for a moment.
demo: setup
	$(PY) -m feedline sample $(DEMO)/images -n 600 --classes 6
	$(PY) -m feedline pack $(DEMO)/images $(DEMO)/train.lmdb --overwrite
	$(PY) -m feedline info $(DEMO)/train.lmdb
	$(PY) -m feedline verify $(DEMO)/train.lmdb

test: setup-test
	$(PY) -m pytest -q -ra

clean:
	rm -rf $(VENV) $(DEMO) .pytest_cache
