#!/usr/bin/env python3
"""Compares the agent's scraped launch counts with torch.profiler's (checks/97_agent_pytorch.sh).

usage: analyze_agent.py SCRAPES_DIR WORKLOAD_OUT PID FIGURES_JSON

SCRAPES_DIR holds <CLOCK_REALTIME ns>.prom files, one per curl of /metrics. The window's
launches are the process's launches (kernel series plus graph launches x nodes per replay)
in the first scrape 0.5 s after t1 minus the last scrape 0.2 s before t0 (both inside the
workload's quiet periods). Prints one line of figures first, then the top series.
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trace_events as te  # noqa: E402

LINE = re.compile(r'^(\w+)\{(.*)\} (\S+)$')
LAB = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse(path, pid):
    kernels, graphs = {}, 0.0
    with open(path) as f:
        for line in f:
            m = LINE.match(line.strip())
            if not m:
                continue
            labels = dict(LAB.findall(m.group(2)))
            if labels.get("pid") != str(pid):
                continue
            if m.group(1) == "gpuscope_kernel_launches_total":
                kernels[labels["kernel"]] = float(m.group(3))
            elif m.group(1) == "gpuscope_graph_launches_total":
                graphs = float(m.group(3))
    return kernels, graphs


def main():
    d, wl_out, pid, fig = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    res = te.tagged_json(wl_out, "RESULT")
    if not res:
        print("no RESULT line from the workload")
        return 1
    stamps = sorted(int(n[:-5]) for n in os.listdir(d) if n.endswith(".prom"))
    # What a scrape serves was rendered up to one --interval before it: take scrapes well inside
    # the quiet periods (1.5 s each), so that no launch of the window falls on the wrong side.
    before = [s for s in stamps if s < res["t0_ns"] - 200_000_000]
    after = [s for s in stamps if s > res["t1_ns"] + 500_000_000]
    if not before or not after:
        print(f"no scrape before t0 or after t1 ({len(stamps)} scrapes)")
        return 1
    k0, g0 = parse(os.path.join(d, f"{before[-1]}.prom"), pid)
    k1, g1 = parse(os.path.join(d, f"{after[0]}.prom"), pid)
    delta = {k: v - k0.get(k, 0) for k, v in k1.items() if v - k0.get(k, 0) > 0}
    agent = sum(delta.values()) + (g1 - g0) * res["graph_nodes"]
    prof = sum(res["profiler_plain"].values()) + sum(res["profiler_graph"].values())
    named = sum(v for k, v in delta.items() if k != "other" and not k.startswith("[unknown"))
    figures = {"agent_window_launches": agent, "profiler_kernels": prof, "graph_launches": g1 - g0,
               "named_share": named / agent if agent else 0, "scrapes": len(stamps),
               "top": sorted(delta.items(), key=lambda kv: -kv[1])[:10]}
    with open(fig, "w") as f:
        json.dump(figures, f, indent=1)
    ok = agent == prof
    print(f"{'equal' if ok else 'DIFFERENT'}: agent {agent:.0f} launches in the window, torch.profiler {prof} "
          f"kernels; graph launches {g1 - g0:.0f}; named {figures['named_share']:.1%}; {len(stamps)} scrapes")
    for k, v in figures["top"]:
        print(f"  {v:8.0f}  {k[:110]}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
