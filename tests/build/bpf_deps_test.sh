#!/usr/bin/env bash
# cmake/Bpf.cmake must rebuild a .bpf.o when a header it includes changes, under every generator
# (clang's depfile through add_custom_command(DEPFILE)). A throwaway project calls gpuscope_bpf()
# on a program whose header includes another header, builds it, touches the inner header and
# checks that the object and skeleton are rebuilt, and that touching an unrelated file does not.
# Runs with "Unix Makefiles" and, when ninja is installed, Ninja. Usage: bpf_deps_test.sh SOURCE_DIR
set -euo pipefail
src=$(realpath "$1")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/proj/src/probe"
cat > "$tmp/proj/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.20)
project(bpf_deps_probe LANGUAGES C)
include($src/cmake/Bpf.cmake)
gpuscope_bpf(probe \${PROJECT_SOURCE_DIR}/src/probe/probe.bpf.c)
add_custom_target(all_skel ALL DEPENDS probe_skel)
CMAKE
cat > "$tmp/proj/src/probe/probe.bpf.c" <<'C'
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "probe/outer.h"
char LICENSE[] SEC("license") = "GPL";
__u64 hits = 0;
SEC("uprobe")
int probe_enter(void *ctx)
{
	hits += OUTER_STEP;
	return 0;
}
C
echo '#include "probe/inner.h"' > "$tmp/proj/src/probe/outer.h"
echo '#define OUTER_STEP INNER_STEP' >> "$tmp/proj/src/probe/outer.h"
echo '#define INNER_STEP 1' > "$tmp/proj/src/probe/inner.h"
echo '#define UNRELATED 1' > "$tmp/proj/src/probe/unrelated.h"

gens=("Unix Makefiles")
if command -v ninja >/dev/null; then gens+=(Ninja); else echo "bpf_deps_test: no ninja, Makefiles only" >&2; fi
fail=0
for g in "${gens[@]}"; do
  b="$tmp/build-${g// /_}"
  cmake -S "$tmp/proj" -B "$b" -G "$g" >/dev/null
  cmake --build "$b" >/dev/null
  obj="$b/generated/probe.bpf.o"
  [ -f "$obj" ] || { echo "FAIL [$g]: $obj not built" >&2; fail=1; continue; }
  check() {  # check WHAT FILE EXPECT(rebuilt|kept)
    local before after
    before=$(stat -c %Y.%y "$obj")
    sleep 1.1  # mtime granularity of some filesystems
    touch "$2"
    cmake --build "$b" >/dev/null
    after=$(stat -c %Y.%y "$obj")
    if [ "$3" = rebuilt ] && [ "$before" = "$after" ]; then echo "FAIL [$g]: touching $1 did not rebuild probe.bpf.o" >&2; fail=1
    elif [ "$3" = kept ] && [ "$before" != "$after" ]; then echo "FAIL [$g]: touching $1 rebuilt probe.bpf.o" >&2; fail=1
    else echo "ok [$g]: touching $1: $3"; fi
  }
  check "an unrelated header" "$tmp/proj/src/probe/unrelated.h" kept
  check "a header included through another" "$tmp/proj/src/probe/inner.h" rebuilt
  check "a header the program includes" "$tmp/proj/src/probe/outer.h" rebuilt
  [ "$(stat -c %Y "$b/generated/probe.skel.h")" -ge "$(stat -c %Y "$obj")" ] || { echo "FAIL [$g]: skeleton older than object" >&2; fail=1; }
done
exit $fail
