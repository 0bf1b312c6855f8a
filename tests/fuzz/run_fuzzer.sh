#!/usr/bin/env bash
# Runs one libFuzzer target for a fixed time: run_fuzzer.sh BINARY SECONDS WORK_DIR ARTIFACT_DIR SEED_DIR...
# WORK_DIR collects the inputs it finds (kept between runs: the next run starts from them);
# the committed seeds are only read. Exit status: libFuzzer's, nonzero on any crash, sanitizer
# report, leak, timeout (10 s per input) or RSS over 2 GiB; the input is saved in ARTIFACT_DIR,
# and the report's key lines in ARTIFACT_DIR/NAME.failure.txt (scripts/test.sh prints those last,
# where a log shortened in the middle still shows them).
set -euo pipefail
bin=$1 secs=$2 work=$3 artifacts=$4
shift 4
mkdir -p "$work" "$artifacts"
name=$(basename "$bin")
seeds=()
for d in "$@"; do [ -d "$d" ] && seeds+=("$d"); done
log=$artifacts/$name.log
rm -f "$artifacts/$name.failure.txt"
rc=0
"$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$artifacts/$name-" "$work" "${seeds[@]}" 2>&1 | tee "$log" || rc=$?
if ((rc)); then
  {
    echo "$name failed (exit $rc):"
    grep -E '==ERROR|^SUMMARY|deadly signal|ALARM|timeout after|out-of-memory|Test unit written|^Base64' "$log" | head -8
    grep -E '^ +#[0-9]+ ' "$log" | head -12
  } >"$artifacts/$name.failure.txt"
  cat "$artifacts/$name.failure.txt" >&2
fi
exit $rc
