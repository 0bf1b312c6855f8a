#!/usr/bin/env bash
# Checks (or with --fix, applies) clang-format on every C and C++ source of the tree.
#   scripts/check-format.sh [--fix] [--list] [DIR|FILE...]     (default: src tests bench tools)
# BPF-side C follows .clang-format-bpf: *.bpf.c, *.bpf.h, everything under src/common/, and every
# header that a *.bpf.c or *.bpf.h includes by a quoted path (the layouts shared with userspace,
# e.g. src/memleak/memleak.h). Everything else (*.cpp, *.cc, *.h, *.hpp, and plain *.c such as
# the test fixtures) follows .clang-format. Files are found anew on every run, so added or
# renamed files need no change here.
# Exit status: 0 clean, 1 files would change, 77 no clang-format (ctest: skip).
set -euo pipefail
cd "$(dirname "$0")/.."
fix=0 list=0 paths=()
for a in "$@"; do
  case $a in
    --fix) fix=1 ;;
    --list) list=1 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) paths+=("$a") ;;
  esac
done
((${#paths[@]})) || paths=(src tests bench tools)

cf=${CLANG_FORMAT:-}
if [ -z "$cf" ]; then
  for c in clang-format clang-format-19 clang-format-18 clang-format-17 clang-format-16 clang-format-15 clang-format-14; do
    if command -v "$c" >/dev/null; then cf=$c; break; fi
  done
fi
if [ -z "$cf" ]; then
  echo "check-format: no clang-format (Debian: apt-get install clang-format); skipped" >&2
  exit 77
fi

# Headers shared with BPF programs: what every .bpf.c/.bpf.h under src/ includes with "...",
# resolved against src/ (the include root) and the including file's own folder.
declare -A shared=()
while IFS= read -r -d '' f; do
  while IFS= read -r inc; do
    for cand in "src/$inc" "$(dirname "$f")/$inc"; do
      [ -f "$cand" ] && shared[$(realpath --relative-to=. "$cand")]=1
    done
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
done < <(find src tests -type f \( -name '*.bpf.c' -o -name '*.bpf.h' \) -print0)

is_bpf_side() {
  case $1 in *.bpf.c | *.bpf.h | src/common/*) return 0 ;; esac
  [ -n "${shared[$1]:-}" ]
}

cxx=() bpfc=()
while IFS= read -r -d '' f; do
  f=$(realpath --relative-to=. "$f")
  if is_bpf_side "$f"; then
    bpfc+=("$f")
  else
    cxx+=("$f")
  fi
done < <(find "${paths[@]}" -type f \( -name '*.cpp' -o -name '*.cc' -o -name '*.h' -o -name '*.hpp' -o -name '*.c' \) -print0 | sort -z)

if ((list)); then
  printf 'c++ %s\n' "${cxx[@]}"
  printf 'bpf %s\n' "${bpfc[@]}"
  exit 0
fi

rc=0
run() {  # run STYLE FILES...
  local style=$1; shift
  (($#)) || return 0
  if ((fix)); then
    "$cf" -i --style="$style" "$@"
    return 0
  fi
  local bad=() f
  for f in "$@"; do
    "$cf" --dry-run --Werror --style="$style" "$f" >/dev/null 2>&1 || bad+=("$f")
  done
  if ((${#bad[@]})); then
    # The diagnostics of the first few, then the full list.
    for f in "${bad[@]:0:3}"; do "$cf" --dry-run --style="$style" "$f" 2>&1 | head -20 || true; done
    printf 'check-format: would reformat %s\n' "${bad[@]}" >&2
    rc=1
  fi
  echo "check-format: ${#bad[@]} of $# files need formatting ($style)" >&2
}
run file:.clang-format "${cxx[@]}"
run file:.clang-format-bpf "${bpfc[@]}"
if ((rc)); then
  echo "check-format: run scripts/check-format.sh --fix ${paths[*]} to apply" >&2
fi
exit $rc
