#!/usr/bin/env python3
"""usage: analyze_kernels.py KERNELS_JSONL WORKLOAD_OUT PID MODE FIGURES_JSON

Compares `gpuscope kernels --json` with torch.profiler over the workload's measured window
(workloads/torch_train.py). gpuscope's rows are cumulative; the window's launches are the
difference between the last refresh before t0 and the first refresh after t1 (both inside
the workload's quiet periods). Checks:
- gpuscope's launches + graph replays x nodes per replay == the profiler's kernels;
- graph rows: REPLAYS replays;
- every named row's count == the profiler's count for that name (spaces ignored; a name
  shown in part stands for the profiler names it matches), and the profiler kernels no row
  matched add up to the launches gpuscope left unnamed;
- no launch is left unnamed.
Reports the share of window launches left `[unknown ...]`, and the top rows.
Exit 0 when the counts agree, 1 otherwise."""
import collections
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trace_events as te  # noqa: E402


def norm(name):
    return "".join(name.split())


def by_name(d, name):
    return d.get(norm(name))


def main():
    rows_path, wl_path, pid, mode, fig_path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
    result = te.tagged_json(wl_path, "RESULT")
    if not result:
        print("FAIL: no RESULT line from the workload")
        return 1
    blocks = collections.OrderedDict()
    with open(rows_path) as f:
        for line in f:
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r.get("type") != "kernel" or r.get("pid") != pid or r.get("exited"):
                continue
            blocks.setdefault(r["ts_ns"], []).append(r)
    t0, t1, quiet = result["t0_ns"], result["t1_ns"], int(result["quiet_s"] * 1e9)
    before = [ts for ts in blocks if t0 - quiet + 200_000_000 < ts < t0 - 50_000_000]
    after = [ts for ts in blocks if t1 + 200_000_000 < ts < t1 + quiet - 50_000_000]
    if not after:
        print("FAIL: no gpuscope refresh in the quiet period after the window")
        return 1

    def counts(ts):
        c = collections.Counter()
        for r in blocks.get(ts, []):
            c[(r["kernel"], r["module"])] += r["launches"]
        return c

    c0 = counts(before[-1]) if before else collections.Counter()
    c1 = counts(after[0])
    delta = {k: c1[k] - c0.get(k, 0) for k in c1 if c1[k] - c0.get(k, 0) > 0}
    graph_rows = {k: v for k, v in delta.items() if k[0].startswith("[graph")}
    plain_rows = {k: v for k, v in delta.items() if not k[0].startswith("[graph")}
    unknown = sum(v for k, v in plain_rows.items() if k[0].startswith("[unknown"))
    total = sum(plain_rows.values())
    prof_plain, prof_graph = result["profiler_plain"], result["profiler_graph"]
    # CUPTI may or may not mark graph kernels; either way the window's profiler kernels are
    # gpuscope's launches plus replays x (the kernels of one replay, profiled alone).
    prof_all = collections.Counter(prof_plain) + collections.Counter(prof_graph)
    prof_total = sum(prof_all.values())
    replays = sum(graph_rows.values())
    per_replay = result.get("graph_kernel_names") or {}
    nodes = sum(per_replay.values())
    expected = {norm(n): c - result["replays"] * per_replay.get(n, 0) for n, c in prof_all.items()}
    expected = {n: c for n, c in expected.items() if c}
    ok = True
    msgs = []
    if total + replays * nodes != prof_total:
        ok = False
        msgs.append(f"launches + replays x nodes: {total} + {replays} x {nodes} != profiler {prof_total}")
    if replays != result["replays"]:
        ok = False
        msgs.append(f"graph replays: gpuscope {replays} != {result['replays']}")

    # Rows whose name holds NVIDIA lambda wrappers: CUPTI spells those differently from the
    # host-side symbols, and gpuscope shows some only in part (src/core/demangle.h). Such a
    # row stands for every profiler name with the same leading part and wrapped functions.
    def pattern(name):
        head = name.split("__nv_", 1)[0].split("…", 1)[0]
        return [norm(head)] + [norm("&" + f) + "," for f in re.findall(r"&([\w:]+)(?=[,…])", name)]

    named_ok = named_bad = 0
    mismatches = []
    groups = collections.defaultdict(int)
    for (name, module), n in plain_rows.items():
        if name.startswith("[unknown"):
            continue
        if expected.get(norm(name)) == n:
            expected.pop(norm(name))
            named_ok += 1
        elif "__nv_" in name or "…" in name:
            groups[name] += n
        else:
            named_bad += 1
            mismatches.append({"kernel": name, "module": module, "gpuscope": n, "profiler": by_name(expected, name)})
    for name, n in sorted(groups.items(), key=lambda kv: -len(pattern(kv[0])[0]) - 1000 * (len(pattern(kv[0])) - 1)):
        pat = pattern(name)
        hits = [p for p in expected if all(x in p for x in pat)]
        want = sum(expected[p] for p in hits)
        if want == n:
            for p in hits:
                expected.pop(p)
            named_ok += 1
        else:
            named_bad += 1
            mismatches.append({"kernel": name, "gpuscope": n, "profiler": want, "pattern": pat, "profiler_names": hits})
    if named_bad:
        ok = False
        msgs.append(f"{named_bad} named rows disagree with the profiler")
    if unknown:
        ok = False
        msgs.append(f"{unknown} launches left unnamed (every launch must be named)")
    unmatched = sum(expected.values())
    if unmatched != unknown:
        ok = False
        msgs.append(f"profiler kernels left unmatched {unmatched} != unnamed launches {unknown}")
    by_prof = {norm(n): c for n, c in prof_all.items()}
    top = sorted(plain_rows.items(), key=lambda kv: -kv[1])[:12]
    fig = {
        "mode": mode, "window_launches": total, "profiler_kernels": prof_total, "graph_replays": replays,
        "graph_nodes": nodes, "profiler_graph_kernels_marked": sum(prof_graph.values()),
        "unnamed_launches": unknown, "unnamed_share": round(unknown / total, 4) if total else None,
        "named_rows_matching_profiler": named_ok, "mismatches": mismatches,
        "distinct_kernels_profiler": len(prof_plain), "rows_gpuscope": len(plain_rows),
        "profiler_unmatched": expected, "top": [{"launches": v, "kernel": k[0], "module": k[1],
                 "profiler": by_prof.get(norm(k[0]))} for k, v in top],
    }
    with open(fig_path, "w") as f:
        json.dump(fig, f, indent=1)
    print(f"{mode}: window launches {total} + graph {replays} x {nodes} = {total + replays * nodes} "
          f"(profiler {prof_total}), unnamed {unknown}/{total}, named rows matching {named_ok}/{named_ok + named_bad}")
    for k, v in top:
        print(f"  {v:6d}  {k[0][:110]}  [{k[1]}]  profiler={by_prof.get(norm(k[0]))}")
    for m in mismatches[:10]:
        print("  mismatch:", json.dumps(m)[:1500])
    for name, c in expected.items():
        print(f"  profiler kernel not matched by a named row: {c} x {name[:1500]}")
    if not ok:
        print("FAIL:", "; ".join(msgs))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
