#!/usr/bin/env python3
"""usage: analyze_known_launch.py TRACE_JSONL PID N M FIGURES_JSON

calls_shared N M made N cudaMalloc and M launches of grid (11,22,33) block (4,5,6).
Requires: exactly M runtime launch enters and M driver launch enters with those
dimensions, N cudaMalloc exits with cudaSuccess and a non-zero ptr, no lost events.
Reports (without failing) whether the runtime's func handles equal the driver's.
Prints the figures on stderr, one `PASS|FAIL 20_trace_known_launch: ...` line; exit 0/1."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trace_events as te  # noqa: E402

NAME = "20_trace_known_launch"
GRID, BLOCK = [11, 22, 33], [4, 5, 6]


def main(trace_path, pid, n, m, fig_path):
    events, summary, bad = te.load(trace_path)
    mine = [e for e in events if e.get("pid") == pid]

    def launches(layer, apis):
        return [e for e in mine if e.get("layer") == layer and e.get("phase") == "enter" and e.get("api") in apis]

    rt_all, drv_all = launches("runtime", te.LAUNCH_RT), launches("driver", te.LAUNCH_DRV)
    rt = [e for e in rt_all if e.get("grid") == GRID and e.get("block") == BLOCK]
    drv = [e for e in drv_all if e.get("grid") == GRID and e.get("block") == BLOCK]
    mallocs = [e for e in mine if e.get("api") == "cudaMalloc" and e.get("phase") == "exit"]
    ok_mallocs = [e for e in mallocs if e.get("ret_name") == "cudaSuccess" and int(str(e.get("ptr", "0")), 16) != 0]
    rt_funcs = sorted({e.get("func") for e in rt})
    drv_funcs = sorted({e.get("func") for e in drv})
    lost = te.lost(summary)
    fig = {
        "runtime_launches_11_22_33": len(rt), "runtime_launches_all": len(rt_all),
        "runtime_launch_apis": te.histogram(rt),
        "driver_launches_11_22_33": len(drv), "driver_launches_all": len(drv_all),
        "driver_launch_apis": te.histogram(drv),
        "cudaMalloc_exits": len(mallocs), "cudaMalloc_ok": len(ok_mallocs),
        "cudaMalloc_rets": sorted({str(e.get("ret_name")) for e in mallocs}),
        "cudaMalloc_ptrs": [e.get("ptr") for e in mallocs],
        "runtime_funcs": rt_funcs, "driver_funcs": drv_funcs, "funcs_equal": bool(rt_funcs) and rt_funcs == drv_funcs,
        "events_for_pid": len(mine), "events_other_pids": len(events) - len(mine),
        "all_calls": te.histogram(mine), "bad_lines": bad, "summary": summary,
    }
    te.write_figures(fig_path, fig)

    funcs = ("runtime func == driver func (%s)" % ",".join(rt_funcs) if fig["funcs_equal"] else
             "NOTE runtime func %s != driver func %s" % (",".join(rt_funcs) or "-", ",".join(drv_funcs) or "-"))
    line = ("%d/%d runtime and %d/%d driver launches of (11,22,33)x(4,5,6) [%s | %s], %d/%d cudaMalloc ok; %s; lost %s"
            % (len(rt), m, len(drv), m, ",".join(sorted({e["api"] for e in rt})) or "-",
               ",".join(sorted({e["api"] for e in drv})) or "-", len(ok_mallocs), n, funcs, lost))
    problems = te.problems_of(mine, summary, lost, pid)
    if len(rt) != m:
        problems.append("%d runtime launches, expected %d" % (len(rt), m))
    if len(drv) != m:
        problems.append("%d driver launches, expected %d" % (len(drv), m))
    if len(mallocs) != n or len(ok_mallocs) != n:
        problems.append("%d cudaMalloc exits, %d with cudaSuccess and ptr != 0, expected %d"
                        % (len(mallocs), len(ok_mallocs), n))
    return te.verdict(NAME, problems, line)


if __name__ == "__main__":
    te.run_main(NAME, lambda: main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]))
