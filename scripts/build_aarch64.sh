#!/usr/bin/env bash
# The aarch64 (arm64) cross build, on an x86-64 Debian 12 machine: the core and the test harness
# compiled by Debian's g++-aarch64-linux-gnu into build/aarch64, plus what tests/aarch64_check.sh
# runs them with under qemu-aarch64 — Debian's arm64 Python and numpy unpacked into a folder of
# their own (build/aarch64/sysroot), the pure-Python test dependencies taken from this machine's
# Python, and llguidance's aarch64 wheel from PyPI. Idempotent: each step is skipped when its
# result is there (the build itself is ninja's, incremental).
#
#   scripts/build_aarch64.sh          # needs root (apt-get) the first time; python3 = the venv's
#
# Nothing is installed into the host's arm64 Python (there is none): Debian's python3:arm64 would
# replace the host's python3, so its packages are downloaded and unpacked (dpkg -x) instead.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${LOCALLLM_AARCH64_BUILD:-$REPO/build/aarch64}
SYSROOT=$BUILD/sysroot
PYDEPS=$BUILD/pydeps
HOST_PY=${PYTHON:-python3}
JOBS=${JOBS:-2}

# Debian 12's arm64 Python 3.11 with numpy, and the shared libraries they (and our modules) load.
ARM64_PACKAGES="libc6 libgcc-s1 libstdc++6 gcc-12-base zlib1g libexpat1 libffi8 libssl3 libbz2-1.0 liblzma5
  libsqlite3-0 libncursesw6 libtinfo6 libreadline8 libuuid1 libcrypt1 libnsl2 libtirpc3 libdb5.3
  libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libkeyutils1 libcom-err2
  python3.11-minimal libpython3.11-minimal libpython3.11-stdlib libpython3.11 libpython3.11-dev
  python3-numpy libblas3 liblapack3 libgfortran5"
# Pure-Python packages the kernel tests import (pytest, gguf and what localllm imports), linked
# from the host Python's site-packages: they run on any interpreter of the same minor version.
PURE_PYTHON="pytest _pytest pluggy iniconfig packaging py.py gguf jinja2 markupsafe yaml pygments tqdm"

step() { echo "== build_aarch64: $*"; }

# ---- host tools: the cross compiler and qemu's user-mode emulator ----
missing=""
command -v aarch64-linux-gnu-g++ >/dev/null || missing+=" g++-aarch64-linux-gnu"
command -v qemu-aarch64 >/dev/null || missing+=" qemu-user"
if [ -n "$missing" ]; then
  step "installing$missing"
  apt-get update -qq && apt-get install -y -qq $missing
fi

# ---- Debian's arm64 packages, unpacked (not installed) into the sysroot ----
stamp=$SYSROOT/.packages
if [ "$(cat "$stamp" 2>/dev/null)" != "$ARM64_PACKAGES" ]; then
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    step "adding Debian's arm64 architecture"
    dpkg --add-architecture arm64
  fi
  if [ -z "$(apt-cache policy python3.11-minimal:arm64 | awk '/Candidate:/ {print $2}' | grep -v none)" ]; then
    apt-get update -qq
  fi
  step "downloading and unpacking arm64 Python into $SYSROOT"
  rm -rf "$SYSROOT" "$BUILD/debs"
  mkdir -p "$SYSROOT" "$BUILD/debs"
  (cd "$BUILD/debs" && apt-get download -qq $(for p in $ARM64_PACKAGES; do echo "$p:arm64"; done))
  for deb in "$BUILD"/debs/*.deb; do dpkg -x "$deb" "$SYSROOT"; done
  # What update-alternatives would have made when installing libblas3 / liblapack3 (numpy links them).
  for lib in blas lapack; do
    ln -sf "$lib/lib$lib.so.3" "$SYSROOT/usr/lib/aarch64-linux-gnu/lib$lib.so.3"
  done
  echo "$ARM64_PACKAGES" > "$stamp"
fi

# ---- the test dependencies for the arm64 interpreter ----
if [ ! -e "$PYDEPS/.done" ]; then
  step "test dependencies into $PYDEPS"
  rm -rf "$PYDEPS" && mkdir -p "$PYDEPS"
  SITE=$("$HOST_PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  for m in $PURE_PYTHON; do
    if [ -e "$SITE/$m" ]; then ln -s "$SITE/$m" "$PYDEPS/$m"; fi
  done
  # llguidance (constrained decoding, imported by localllm) is compiled (Rust, abi3): the newest
  # aarch64 wheel the package index has within pyproject's requirement (the host's may be newer).
  rm -rf "$BUILD/wheels"
  "$HOST_PY" -m pip download -q --no-deps --only-binary=:all: --platform manylinux2014_aarch64 \
      --python-version 3.11 -d "$BUILD/wheels" "llguidance>=1.0"
  "$HOST_PY" -m zipfile -e "$BUILD"/wheels/llguidance-*aarch64*.whl "$PYDEPS"
  touch "$PYDEPS/.done"
fi

# ---- the cross build: _core and _harness for aarch64 ----
step "cross-compiling into $BUILD"
cmake -S "$REPO" -B "$BUILD" -G Ninja -DCMAKE_TOOLCHAIN_FILE="$REPO/cmake/aarch64-linux-gnu.cmake" \
      -DLOCALLLM_ARM64_SYSROOT="$SYSROOT" -DPython_EXECUTABLE="$(command -v "$HOST_PY")" \
      -DCMAKE_INTERPROCEDURAL_OPTIMIZATION=OFF -DLOCALLLM_INPLACE=OFF \
      $(command -v ccache >/dev/null && echo -DCMAKE_CXX_COMPILER_LAUNCHER=ccache) \
      -Dpybind11_DIR="$("$HOST_PY" -m pybind11 --cmakedir)" >/dev/null
cmake --build "$BUILD" -j "$JOBS" --target _core _harness

# A package folder of its own (as tests/sanitize.sh makes): python/localllm's sources plus the
# aarch64 modules, so the in-place x86 modules in python/localllm are left alone.
PKG=$BUILD/python/localllm
rm -rf "$PKG" && mkdir -p "$PKG"
(cd "$REPO/python/localllm" && find . -type f ! -name '*.so' ! -path '*/__pycache__/*' ! -path './_variants/*' \
    -exec cp --parents {} "$PKG/" \;)
cp "$BUILD"/_core.cpython-*-aarch64-linux-gnu.so "$BUILD"/_harness.cpython-*-aarch64-linux-gnu.so "$PKG/"
step "done: $(ls "$PKG"/*.so | xargs -n1 basename | tr '\n' ' ')"
