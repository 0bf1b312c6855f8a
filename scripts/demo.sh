#!/usr/bin/env bash
# The demo: build gpuscope, then trace the bundled CUDA program (tests/fixtures/cuda/calls.cu)
# through the real CUDA runtime. Without a GPU every call fails with
# cudaErrorInsufficientDriver, and the trace says so.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
bash scripts/build.sh
demo=build/tests/fixtures/cuda/calls_shared
build/gpuscope trace -c calls_shared -d 6 &
tracer=$!
sleep 2
echo "--- running $demo 3 2 (3 cudaMalloc, 2 launches of alpha_kernel<<<(11,22,33),(4,5,6)>>>)" >&2
"$demo" 3 2 >/dev/null
wait "$tracer"
