#!/usr/bin/env bash
# Installs what gpuscope builds and tests with (Debian 12 packages). Idempotent.
set -euo pipefail
pkgs=(cmake make ninja-build g++ clang libbpf-dev bpftool libelf-dev libdw-dev zlib1g-dev libzstd-dev
      libcli11-dev nlohmann-json3-dev libfmt-dev libmicrohttpd-dev libgtest-dev libbenchmark-dev
      python3 util-linux libcap2-bin
      # the DRM uapi header the ioctl decoder is tested against
      libdrm-dev
      # the graphics fixtures: Vulkan on lavapipe, OpenGL ES through EGL on llvmpipe (no GPU, no
      # display), OpenGL through GLX on an Xvfb display
      mesa-vulkan-drivers libvulkan-dev libegl-dev libgles-dev libegl-mesa0 libgl1-mesa-dri
      libgl-dev libglx-mesa0 libx11-dev xvfb xauth
      # the agent's tests: a real Prometheus scrape and promtool check metrics
      prometheus
      # deploy/ checks: promtool (above), systemd-analyze; node below
      systemd python3-yaml
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
# node and npm for the offline Kubernetes schema validation (tests/deploy/validate_k8s.js): Debian's,
# unless a node with its own npm is installed already (Debian's npm package would conflict with it).
if ! command -v npm >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
# The Kubernetes and prometheus-operator schemas, pinned by tests/deploy/package-lock.json.
if [ ! -d "$(dirname "$0")/../tests/deploy/node_modules/kubernetes-models" ]; then
  npm ci --prefix "$(dirname "$0")/../tests/deploy" --no-audit --no-fund --loglevel=error >/dev/null
fi
if ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "deps: the CUDA 13 toolkit (nvcc, libcudart.so.13, cuda.h, cupti.h and libcupti.so.13) is expected in /usr/local/cuda" >&2
  exit 1
fi
