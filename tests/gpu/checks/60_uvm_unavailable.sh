#!/usr/bin/env bash
# usage: 60_uvm_unavailable.sh GPUSCOPE_BIN OUT_DIR
# This host has neither kprobes nor fentry: gpuscope uvm must say so in one line, exit 2,
# and leave a running CUDA workload undisturbed.
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
need_prog malloc_loop
"$PROG" 3000 >"$OUT/workload.out" 2>&1 &
W=$!
track "$W"
sleep 0.5
rc=0
"$GPUSCOPE" uvm -d 3 >"$OUT/uvm.out" 2>"$OUT/uvm.err" || rc=$?
wait_exit "$W" 60
lines=$(wc -l <"$OUT/uvm.err")
grep -q "failed=0" "$OUT/workload.out" || fail "workload disturbed: $(cat "$OUT/workload.out")"
[[ $rc == 2 && $lines == 1 ]] || fail "expected exit 2 and one line, got $rc and $lines: $(cat "$OUT/uvm.err")"
pass "exit $rc: $(cat "$OUT/uvm.err"); workload: $(tail -n1 "$OUT/workload.out")"
