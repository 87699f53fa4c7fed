# The two commands of the README: `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
DEMO ?= demo

.PHONY: demo test setup setup-test clean

setup:
	bash .ci/setup.sh bench

setup-test:
	bash .ci/setup.sh dali,test,turbojpeg

# Build realistic sample folders from the shipped photos, pack them, show and check
# them, then train on them for a moment on the CPU through FeedLoader.
demo: setup
	$(PY) -m feedline sample $(DEMO)/train -n 600 --classes 6 --seed 0 --photo-per-class
	$(PY) -m feedline sample $(DEMO)/val -n 120 --classes 6 --seed 1 --photo-per-class
	$(PY) -m feedline pack $(DEMO)/train $(DEMO)/train.lmdb --overwrite
	$(PY) -m feedline pack $(DEMO)/val $(DEMO)/val.h5 --overwrite
	$(PY) -m feedline info $(DEMO)/train.lmdb
	$(PY) -m feedline verify $(DEMO)/train.lmdb
	$(PY) -m feedline train $(DEMO)/train.lmdb --val $(DEMO)/val.h5 --arch tiny --size 96 \
		--epochs 2 --batch-size 32 --log-every 5 --synthetic-steps 10 --out $(DEMO)/run

test: setup-test
	$(PY) -m pytest -q -ra

clean:
	rm -rf $(VENV) $(DEMO) .pytest_cache
