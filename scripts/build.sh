#!/usr/bin/env bash
# Configures and builds everything into build/ (the gpuscope binary is build/gpuscope), or only
# the targets named: scripts/build.sh [TARGET...].
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache, where installed, lets worktrees and rebuilds share object files.
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD/..}
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" >/dev/null
cmake --build build -j"$(nproc)" ${1:+--target "$@"}
