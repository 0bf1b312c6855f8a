#!/usr/bin/env python3
"""usage: analyze_pytorch.py TRACE_JSONL WORKLOAD_STDOUT PID FIGURES_JSON

Driver-layer launches that gpuscope saw in torch_mix.py's measured window against the
kernels the PyTorch profiler (CUPTI) saw there:
  uncaptured cuLaunchKernel[Ex] enters + graph nodes x cuGraphLaunch enters == profiler kernels.
Prints the figures on stderr, one `PASS|FAIL 10_trace_pytorch: ...` line on stdout; exit 0/1."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trace_events as te  # noqa: E402

NAME = "10_trace_pytorch"


def main(trace_path, wl_path, pid, fig_path):
    res = te.tagged_json(wl_path, "RESULT")
    if res is None:
        return "no RESULT line from the workload"
    events, summary, bad = te.load(trace_path)
    mine = [e for e in events if e.get("pid") == pid]
    enters = [e for e in mine if e.get("layer") == "driver" and e.get("phase") == "enter" and "ts_ns" in e]

    def between(lo, hi, strict=True):
        return [e for e in enters if (lo < e["ts_ns"] < hi if strict else lo <= e["ts_ns"] <= hi)]

    def launches(evs, captured=None):
        return [e for e in evs if e.get("api") in te.LAUNCH_DRV
                and (captured is None or bool(e.get("captured")) == captured)]

    win = between(res["t0"], res["t1"])
    uncaptured = len(launches(win, False))
    graph_launches = sum(1 for e in win if e.get("api") == "cuGraphLaunch")
    nodes, replays = res["graph_nodes"], res["graph_replays"]
    expected = uncaptured + nodes * graph_launches
    cap = between(res["capture_t0"], res["capture_t1"])
    marks, phases = res.get("marks", []), {}
    for i, name in enumerate(res.get("phases", [])[:max(len(marks) - 1, 0)]):
        evs = between(marks[i], marks[i + 1])
        n_launch = len(launches(evs, False))
        n_graph = sum(1 for e in evs if e.get("api") == "cuGraphLaunch")
        phases[name] = {"trace_kernels": n_launch + nodes * n_graph, "launches": n_launch, "cuGraphLaunch": n_graph,
                        "per_op_profile_kernels": res.get("phase_kernels_from_per_op", [None] * 9)[i],
                        "driver_calls": te.histogram(evs)}
    lost = te.lost(summary)
    info = res.get("prof_info", {})
    fig = {
        "trace_uncaptured_launches": uncaptured,
        "trace_captured_launches_in_window": len(launches(win, True)),
        "trace_cuGraphLaunch": graph_launches,
        "graph_nodes": nodes,
        "trace_expected_kernels": expected,
        "profiler_kernels": res["prof_kernels"],
        "profiler_kernels_by_events": info.get("by_events"),
        "profiler_graph_kernels": info.get("graph_kernels"),
        "profiler_runtime_calls": info.get("runtime"),
        "profiler_driver_calls": info.get("driver"),
        "expected_from_per_op_profiles": res.get("expected_from_ops"),
        "per_op_kernels": res.get("per_op_kernels"),
        "one_replay_kernels": res.get("one_replay_kernels"),
        "graph_replays": replays,
        "trace_window_driver_calls": te.histogram(win),
        "phases": phases,
        "trace_launches_in_profiler_before_window": len(launches(between(res["profile_t0"], res["t0"], False))),
        "trace_launches_in_profiler_after_window": len(launches(between(res["t1"], res["profile_t1"], False))),
        "trace_capture_launches_captured": len(launches(cap, True)),
        "trace_capture_launches_uncaptured": len(launches(cap, False)),
        "trace_events_for_pid": len(mine),
        "trace_events_other_pids": len(events) - len(mine),
        "trace_bad_lines": bad,
        "trace_summary": summary,
        "window_ms": (res["t1"] - res["t0"]) / 1e6,
    }
    te.write_figures(fig_path, fig)

    per_phase = ", ".join("%s %s/%s" % (k, v["trace_kernels"], v["per_op_profile_kernels"]) for k, v in phases.items())
    line = ("trace %d uncaptured cuLaunchKernel[Ex] + %d graph nodes x %d cuGraphLaunch = %d, profiler %d kernels"
            " (prof.events(): %s; per-op estimate %s; per phase trace/estimate: %s); graph capture: %d launches"
            " flagged captured, %d not; lost %s"
            % (uncaptured, nodes, graph_launches, expected, res["prof_kernels"], info.get("by_events"),
               res.get("expected_from_ops"), per_phase, fig["trace_capture_launches_captured"],
               fig["trace_capture_launches_uncaptured"], lost))
    problems = te.problems_of(mine, summary, lost, pid)
    if uncaptured == 0:
        problems.append("no uncaptured launches in the window")
    if graph_launches != replays:
        problems.append("%d cuGraphLaunch in the window, expected %d" % (graph_launches, replays))
    if expected != res["prof_kernels"]:
        problems.append("trace count %d != profiler count %d" % (expected, res["prof_kernels"]))
    return te.verdict(NAME, problems, line)


if __name__ == "__main__":
    te.run_main(NAME, lambda: main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]))
