# The two commands: `make run` (the service on its embedded default) and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# This machine's environment sets PYTHONDONTWRITEBYTECODE=1, so every Python process would compile
# every module it imports from source: about half of a worker's start-up CPU (2.6 -> 1.1 s) and of
# pytest's collection (21 -> 10 s), paid again by each of the suite's ~100 service processes and each
# xdist worker. Here Python caches bytecode (in __pycache__/, ignored by git) as it normally does.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: run test machine-setup test-fast test-acceptance lint bench fuzz clean docker-engine

# The product and, beside it, the simulated clouds (a distribution of their own: fakeclouds/pyproject.toml).
# uv installs what pip would, from the same registry, several times faster (the suite's budget
# counts the venv: about 25 s with uv from a cold cache here, about 2 minutes with pip).
$(STAMP): pyproject.toml fakeclouds/pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q uv
	$(BIN)/uv pip install -q --python $(BIN)/python -e '.[test]' -e ./fakeclouds
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/gpuprov dev

# The Docker cloud's engine, ahead of time (`make run` and the tests do this themselves when no engine
# answers): Debian's podman, runc and mmdebstrap (about 45 s), and the sshd image's root file system
# built into ~/.cache/gpuprov/engine (about 40 s). providers/docker_engine.py.
docker-engine: $(STAMP)
	$(BIN)/python -m providers.docker_engine

# The whole suite, on pytest-xdist workers: a test file is one unit of work (tests/tiers.py), the
# files with process stacks first. More workers than cores: most of a stack's time is waiting (on a
# quiet 2-core box the suite's tests used 1.4 cores with three workers). Two of them run the two
# process lanes; the others the in-process tests, which spend about two thirds of their time waiting
# on Temporal and the simulations. Measured side by side on one clone here: 383 s with three, 350 s
# with four; on a busy box (fresh clones beside two CPU-bound loops, 2026-12-05) 588 s with four,
# 975 s with three (300 s of it a hung teardown, tests/conftest.py says why; 675 s without).
# TEST_WORKERS=0 runs it in this one process.
TEST_WORKERS ?= 4
test: machine-setup $(STAMP)
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadscope $(PYTEST_ARGS)

# What the process lanes need from the machine (podman, the engine's image, chromium), installed in
# the background from the first second of `make test`, beside the venv's build and the first tests,
# when missing (as root): tests/machine_setup.py. With the system's python3: the venv may not exist yet.
machine-setup:
	@$(PY) -m tests.machine_setup --background

# The inner loop: the pure and simulation tiers, no Temporal server and no process stacks. Three
# workers on two cores: its tests wait often enough (simulated boots, rate limits) that a third fills
# the gaps (measured here: 129 s with two, 119 s with three, 130 s with four).
FAST_WORKERS ?= 3
test-fast: $(STAMP)
	$(BIN)/pytest -q -n $(FAST_WORKERS) --dist loadscope -m "pure or simulation" $(PYTEST_ARGS)

# The acceptance suite against every simulated cloud (tests/acceptance/), alone.
test-acceptance: $(STAMP)
	$(BIN)/pytest -q -n 0 -m acceptance $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy providers messages activities workflows api store fakeclouds cli bench worker.py settings.py logsafe.py

bench: $(STAMP)
	$(BIN)/python -m bench

# schemathesis against a running `make run` (README, Testing).
FUZZ_ARGS ?= --max-examples 300
fuzz: $(STAMP)
	$(BIN)/python -m bench.fuzz $(FUZZ_ARGS)

clean:
	rm -rf $(VENV)
