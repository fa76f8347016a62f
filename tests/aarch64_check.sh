#!/usr/bin/env bash
# The aarch64 build's tests under qemu-aarch64 (user-mode emulation), with Debian's arm64 Python
# and numpy: the kernel tests (tests/test_kernels.py, tests/test_quants.py) once per emulated CPU
# — `max` (Neon + dotprod + i8mm: the i8mm level is the best) and `cortex-a53` (armv8.0-a,
# plain Neon) — and SmolLM2's teacher-forced logits against this machine's x86 build, at its
# scalar level and at its best (tests/test_aarch64_logits.py). Prints pass counts and wall time per run.
#
#   scripts/build_aarch64.sh && tests/aarch64_check.sh
#   AARCH64_CPUS=max tests/aarch64_check.sh -k q4_0     # one CPU model, pytest arguments of your own
#
# The x86 logits come from the in-place x86 build (python/localllm, build/dev) run by `python3`.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${LOCALLLM_AARCH64_BUILD:-$REPO/build/aarch64}
SYSROOT=$BUILD/sysroot
HOST_PY=${PYTHON:-python3}
if ! ls "$BUILD"/python/localllm/_harness.cpython-*-aarch64-linux-gnu.so >/dev/null 2>&1; then
  echo "aarch64_check.sh: no aarch64 build in $BUILD (run scripts/build_aarch64.sh)" >&2
  exit 2
fi
cd "$REPO"
ARM_PY=("qemu-aarch64" "-L" "$SYSROOT" "-cpu")
export PYTHONPATH=$BUILD/python:$REPO/cli:$REPO/convert:$BUILD/pydeps:$SYSROOT/usr/lib/python3/dist-packages
export PYTHONDONTWRITEBYTECODE=1

status=0
summary=()
# Runs pytest on the arm64 interpreter emulating CPU model $1 with the remaining arguments.
run() {
  local cpu=$1 label=$2; shift 2
  local start log level
  start=$(date +%s)
  log=$BUILD/check-$label-$cpu.log
  level=$("${ARM_PY[@]}" "$cpu" "$SYSROOT/usr/bin/python3.11" -c \
          "from localllm import _core; print(_core.isa_name(_core.best_isa()))")
  if ! "${ARM_PY[@]}" "$cpu" "$SYSROOT/usr/bin/python3.11" -m pytest -q -p no:cacheprovider "$@" >"$log" 2>&1; then
    status=1
  fi
  tail -n 3 "$log"
  grep -h "logit diff" "$log" || true
  summary+=("$label, qemu -cpu $cpu (best level $level): $(tail -n 1 "$log" | tr -d '=') [wall $(( $(date +%s) - start )) s]")
}

if [ $# -gt 0 ]; then
  for cpu in ${AARCH64_CPUS:-max cortex-a53}; do run "$cpu" custom "$@"; done
else
  for cpu in ${AARCH64_CPUS:-max cortex-a53}; do run "$cpu" kernels tests/test_kernels.py tests/test_quants.py; done
  x86=$BUILD/x86_logits.npy x86_scalar=$BUILD/x86_scalar_logits.npy
  PYTHONPATH=$REPO/python:$REPO/cli:$REPO/convert "$HOST_PY" tests/test_aarch64_logits.py "$x86"
  PYTHONPATH=$REPO/python:$REPO/cli:$REPO/convert LOCALLLM_ISA=scalar "$HOST_PY" tests/test_aarch64_logits.py "$x86_scalar"
  for cpu in ${AARCH64_CPUS:-max cortex-a53}; do
    LOCALLLM_X86_LOGITS=$x86 LOCALLLM_X86_SCALAR_LOGITS=$x86_scalar run "$cpu" logits -s tests/test_aarch64_logits.py
  done
fi
echo "== aarch64_check summary (logs in $BUILD/check-*.log)"
printf '%s\n' "${summary[@]}"
exit $status
