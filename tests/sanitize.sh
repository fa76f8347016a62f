#!/usr/bin/env bash
# The test suite under AddressSanitizer + UndefinedBehaviorSanitizer (clang).
#
#   tests/sanitize.sh                      # build into build/sanitize-suite, run the whole suite
#   tests/sanitize.sh tests/test_gguf.py   # or the given pytest arguments
#   tests/sanitize.sh --fuzz fuzz_gguf.py -runs=100000   # an atheris harness of tests/fuzz instead
#
# _core is built with LOCALLLM_SANITIZE=address,undefined into build/sanitize-suite for the
# tests, and with address,undefined,fuzzer-no-link (the coverage hooks the atheris harnesses in
# tests/fuzz read) into build/sanitize for --fuzz: the hooks (comparison tracing among them) made
# a model forward 3.3x slower again, and the tests do not read them. Each build goes into
# BUILD/python/localllm, a copy of python/localllm, so the normal in-place build is left alone.
# The interpreter itself is not instrumented: the ASan runtime is preloaded, and leak detection is
# off (CPython's allocations at exit are not leaks of ours). Any report aborts the process: the
# test fails. (The build is not repeated when nothing changed: ninja finds it up to date.)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
if [ "${1:-}" = "--fuzz" ]; then
  BUILD=${LOCALLLM_SANITIZE_BUILD:-$REPO/build/sanitize}
  SANITIZERS=${LOCALLLM_SANITIZE:-address,undefined,fuzzer-no-link}
else
  BUILD=${LOCALLLM_SANITIZE_BUILD:-$REPO/build/sanitize-suite}
  SANITIZERS=${LOCALLLM_SANITIZE:-address,undefined}
fi

command -v clang++ >/dev/null || { echo "sanitize.sh: clang++ not found (apt-get install clang)" >&2; exit 2; }
cmake -S "$REPO" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_COMPILER=clang++ -DLOCALLLM_SANITIZE="$SANITIZERS" -DLOCALLLM_CUDA=OFF \
      -Dpybind11_DIR="$(python3 -m pybind11 --cmakedir)" >/dev/null
ninja -C "$BUILD" _core _harness

# A package directory of its own: the sources of python/localllm (subpackages such as
# localllm.server included) plus the sanitized _core and _harness.
PKG=$BUILD/python/localllm
rm -rf "$PKG"
mkdir -p "$PKG"
(cd "$REPO/python/localllm" && find . -type f ! -name '_core*.so' ! -name '_harness*.so' ! -path '*/__pycache__/*' \
    -exec cp --parents {} "$PKG/" \;)
cp "$BUILD"/_core*.so "$BUILD"/_harness*.so "$PKG/"

ASAN_RT=$(clang++ -print-file-name=libclang_rt.asan-x86_64.so)
export LD_PRELOAD=$ASAN_RT
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:halt_on_error=1:allocator_may_return_null=1:detect_odr_violation=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export PYTHONPATH=$BUILD/python:$REPO/cli:$REPO/convert
export PYTHONMALLOC=malloc   # every Python allocation through ASan's malloc, so overruns into them are seen
if [ "${1:-}" = "--fuzz" ]; then   # in the caller's directory: libFuzzer writes crash-* there
  shift
  harness=$1
  shift
  exec python3 "$REPO/tests/fuzz/$harness" "$@"
fi
cd "$REPO"
if [ "$#" -eq 0 ]; then set -- tests; fi
exec python3 -m pytest -q -p no:cacheprovider "$@"
