# The two commands of the README: `make demo` and `make test`; the rest are for developers.
VENV ?= .venv
PY := $(VENV)/bin/python
DEMO ?= demo

.PHONY: demo test setup setup-test mutants gpu-wheels gpu-rehearsal gpu-check gpu-dry-run clean

# torch: the one already installed (in $(VENV), or the system Python's for a new one), else
# TORCH (pip arguments), e.g. make demo TORCH='torch --index-url https://download.pytorch.org/whl/cpu';
# setup prints what it is about to download and shows pip's progress.
setup:
	TORCH="$(TORCH)" bash .ci/setup.sh bench

setup-test:
	TORCH="$(TORCH)" bash .ci/setup.sh dali,test,turbojpeg

# Build realistic sample folders from the shipped photos, pack them, show and check
# them, then train on them for a moment on the CPU through FeedLoader.
demo: setup
	rm -rf $(DEMO)
	$(PY) -m feedline sample $(DEMO)/train -n 600 --classes 6 --seed 0 --photo-per-class
	$(PY) -m feedline sample $(DEMO)/val -n 120 --classes 6 --seed 1 --photo-per-class
	$(PY) -m feedline pack $(DEMO)/train $(DEMO)/train.lmdb
	$(PY) -m feedline pack $(DEMO)/val $(DEMO)/val.h5
	$(PY) -m feedline info $(DEMO)/train.lmdb
	$(PY) -m feedline verify $(DEMO)/train.lmdb
	$(PY) -m feedline train $(DEMO)/train.lmdb --val $(DEMO)/val.h5 --arch tiny --size 96 \
		--epochs 2 --warmup-epochs 0.4 --batch-size 32 --log-every 5 --synthetic-steps 10 --out $(DEMO)/run

test: setup-test
	$(PY) -m pytest -q -ra

# Mutation testing: slow, never part of `make test`. AREAS="order augment" runs some.
mutants: setup-test
	$(PY) -m pip install -q 'mutmut>=3.8,<4'
	PY=$(PY) bash .ci/mutants.sh $(AREAS)

# Here (needs the package index), from any checkout: the wheels the GPU machine lacks, packed
# into .whl/gpu/bundle-1 (git-ignored) for the core device call; prints what that call
# carries. GPU_WHEELS_ARGS=--dali also makes the optional DALI bundles (see .ci/gpu/README.md).
gpu-wheels:
	bash .ci/gpu/wheels.sh $(GPU_WHEELS_ARGS)

# Here, before any device is used: the exact core device call (and its --only-failed rerun)
# in a fresh clone of HEAD, with the GPU machine's software (Python 3.12, torch 2.11 and
# torchvision 0.26: a cached venv outside the repository, several GB the first time), CUDA
# hidden, no network. Passes only if every stage that needs no GPU ends ok and every one
# that needs one ends "skipped: no CUDA device".
gpu-rehearsal:
	python3 .ci/gpu/rehearsal.py $(GPU_REHEARSAL_ARGS)

# On the lent H100/H200, in ONE device call (.ci/gpu/README.md): install the carried wheels,
# run the stages in order of value under hard caps (smoke, CUDA tests, data, loader,
# prefetch, engine="gpu", ResNet-50, grid splice), results under $OUT after every stage.
# Without CUDA the stages that need it end "skipped: no CUDA device" and it exits with 3.
# GPU_CHECK_ARGS="--budget-s 200" (python .ci/gpu/plan.py --device-left-s N says how much).
gpu-check:
	bash .ci/gpu/check.sh $(GPU_CHECK_ARGS)

# Here: the whole plan of gpu-check with stand-ins that sleep, segfault, hang and find no
# CUDA device, then its --only-failed rerun; fails unless the budget, the crash and hang
# reports, the kill of every process of a stage and the summary after each stage all hold.
gpu-dry-run: setup-test
	$(PY) .ci/gpu/dryrun.py run $(GPU_DRY_RUN_ARGS)

clean:
	rm -rf $(VENV) $(DEMO) .pytest_cache .hypothesis
