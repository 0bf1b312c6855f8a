#!/usr/bin/env bash
# The whole test suite, as root: unit tests, real-BPF integration tests, benchmark smoke runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
bash scripts/build.sh
cd build
ctest --output-on-failure --timeout 300
