#!/usr/bin/env bash
# localllm bench (pp512, tg128, 3 repetitions) of each model in $LOCALLLM_CACHE on the GPU at
# -ngl all and at half the layers, printing the machine first (tests/gpu_check.sh runs it on a
# lent GPU machine). No llama.cpp CUDA build is on that machine, so there is no ratio yet: the
# numbers are this runtime's alone.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "CPU: $(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2-), $(nproc) threads"
nvidia-smi --query-gpu=name --format=csv,noheader
for model in "${LOCALLLM_CACHE:?set LOCALLLM_CACHE to the models folder}"/*.gguf; do
  n_layer=$(python3 -c "import sys; from localllm import _core; print(_core.Footprint(sys.argv[1]).n_layer)" "$model")
  for ngl in all $(( n_layer / 2 )); do
    echo "--- $(basename "$model") -ngl $ngl"
    python3 -m localllm_cli bench -m "$model" -p 512 -n 128 -r 3 -ngl "$ngl"
  done
done
