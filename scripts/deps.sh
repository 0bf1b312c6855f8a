#!/usr/bin/env bash
# Installs what gpuscope builds and tests with (Debian 12 packages). Idempotent.
set -euo pipefail
pkgs=(cmake make ninja-build g++ clang libbpf-dev bpftool libelf-dev libdw-dev zlib1g-dev libzstd-dev
      libcli11-dev nlohmann-json3-dev libfmt-dev libmicrohttpd-dev libgtest-dev libbenchmark-dev
      python3 util-linux libcap2-bin
      # the agent's tests: a real Prometheus scrape and promtool check metrics
      prometheus
      # libFuzzer and clang's sanitizer runtimes (tests/fuzz), only "recommended" by clang-14;
      # clang-format for scripts/check-format.sh. ninja-build: the DEPFILE test of cmake/Bpf.cmake.
      libclang-rt-14-dev clang-format)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "deps: the CUDA 13 toolkit (nvcc, libcudart.so.13, cuda.h, cupti.h and libcupti.so.13) is expected in /usr/local/cuda" >&2
  exit 1
fi
