# Two commands matter: `make run` and `make test`. Both set themselves up on a fresh machine.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.ddtctl-installed
# CPU torch first (a local file here), so the `kernels` extra never pulls a CUDA build.
TORCH_PIN := torch==2.13.0

.PHONY: setup run test lint typecheck format system-deps clean sglang-env fidelity fidelity-fuzz fuzz kernels-compile rehearse-tune

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH_PIN)
	$(BIN)/pip install -q -e '.[dev,kernels]'
	touch $@

setup: $(STAMP)

# Debian packages the real-component tests need (OpenSSH server for the SSH suite, git for pre-commit, xz for the
# device call's JIT-cache archive in tests/bench/test_one_gpu_call.py).
system-deps:
	@command -v sshd >/dev/null 2>&1 || test -x /usr/sbin/sshd || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server openssh-client >/dev/null)
	@command -v xz >/dev/null 2>&1 || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq xz-utils >/dev/null)

run: setup
	$(BIN)/ddtctl validate profiles/

# The managed SGLang env dry-run and the fidelity suite use (cached under ~/.cache/ddtctl; a no-op when up to date).
sglang-env: setup
	$(BIN)/ddtctl env create

# The suite runs in parallel (pytest-xdist): most slow tests wait on processes (sshd, stand-in servers, SGLang's
# resolver), so TEST_WORKERS may exceed the cores. loadgroup keeps tests that share an expensive fixture on one
# worker (tests/conftest.py marks them); no reorder, so the slow tests tests/conftest.py lists first start first.
# TEST_WORKERS=0 runs it in one process. The 15 slowest tests are listed at the end: CI's budget is 40 minutes,
# and this says where its time goes.
TEST_WORKERS ?= 3
PYTEST_PARALLEL = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder)
# The managed SGLang env (mostly downloads and unpacking) builds beside lint and mypy (CPU): ~1 minute less on a
# fresh machine.
test: setup system-deps
	$(MAKE) --no-print-directory -j3 --output-sync=target sglang-env lint typecheck
	$(BIN)/python -m pytest -q $(PYTEST_PARALLEL) --durations=15

# ruff (pyflakes, pycodestyle, import order, bugbear, complexity; config: pyproject.toml), ruff format, and
# the size limits (modules <= 600 lines, functions <= 80) over ddtctl/.
lint: setup
	$(BIN)/ruff check ddtctl
	$(BIN)/ruff format --check ddtctl
	$(BIN)/python tools/size_limits.py

# mypy over ddtctl/ (config: pyproject.toml [tool.mypy]; the payload and the completion snapshot excluded).
typecheck: setup
	$(BIN)/mypy

# Rewrites ddtctl/ in the house style (ruff format, line length 110); the pre-commit hook does the same per commit.
format: setup
	$(BIN)/ruff format ddtctl

# Static verdicts vs SGLang's own resolver over tests/fidelity/: prints the agreement table.
fidelity: setup sglang-env
	$(BIN)/python tests/fidelity/report.py

# Differential fuzzing of the static validator against SGLang's resolver: N sampled launches (a fresh seed unless
# SEED is given; printed), the agreement table and the disagreement classes. DDTREE=1 fuzzes DDTREE launches through
# the resolver with the built DDTREE payload view first on sys.path. CI runs a fixed-seed sample
# (tests/fidelity/test_fuzz.py).
N ?= 2000
SEED ?=
DDTREE ?=
# It first runs the whole pairwise covering array over the catalog (tests/fidelity/cover.py: every pair of flag
# settings in some case, per model family and GPU generation; ~7000 cases, an hour here), then the random sampler.
# PRESCREEN=1 re-derives which settings SGLang rejects alone (cover_alone.json) first.
fidelity-fuzz: setup sglang-env
	$(BIN)/python tests/fidelity/cover.py $(if $(PRESCREEN),--prescreen) $(if $(SEED),--seed $(SEED)); \
	  $(BIN)/python tests/fidelity/fuzz.py --n $(N) $(if $(SEED),--seed $(SEED)) $(if $(DDTREE),--ddtree)

# Long random runs of every property test (the kernels', the unified-diff round trip's): a fresh seed each run
# (printed), 20x the examples. CI's `make test` runs the same tests from a fixed, printed seed
# (tests/seeded_hypothesis.py).
fuzz: setup
	DDTCTL_FUZZ=1 $(BIN)/python -m pytest -q tests/kernels tests/overlay/test_udiff.py -m hypothesis

# Every kernel launch the sm_90 compile tests know (17 GDN tree verify variants instead of `make test`'s 5: the
# tf32x3 precision, each block-2 height, block_v 32), with the real Triton compiler: ~10 minutes here.
kernels-compile: setup
	DDTCTL_FULL_COMPILE=1 $(BIN)/python -m pytest -q tests/kernels/test_kernels_sm90_compile.py

# The CPU rehearsal of the device call's tune phase (bench/deploy_gpu.py --tune: deploy, then `ddtctl tune` with
# SGLang's own benchmark against the stand-in server): ~3 minutes, run before such a device call. `make test`
# proves `ddtctl tune` itself (tests/remote/test_tune.py).
rehearse-tune: setup system-deps sglang-env
	DDTCTL_TUNE_REHEARSAL=1 $(BIN)/python -m pytest -q tests/bench/test_deploy_rehearsal.py -k tune_call

clean:
	rm -rf $(VENV) .pytest_cache
