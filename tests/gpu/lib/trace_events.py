"""Reading `gpuscope trace --json` output: one JSON object a line, a final summary line."""
import json
import sys

LAUNCH_RT = ("cudaLaunchKernel", "cudaLaunchKernelExC")
LAUNCH_DRV = ("cuLaunchKernel", "cuLaunchKernelEx")


def load(path):
    """Returns (events, summary or None, number of lines that are not JSON objects)."""
    events, summary, bad = [], None, 0
    with open(path, errors="replace") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                bad += 1
                continue
            if not isinstance(obj, dict):
                bad += 1
            elif obj.get("type") == "summary":
                summary = obj
            else:
                events.append(obj)
    return events, summary, bad


def tagged_json(path, tag):
    """The JSON after `TAG ` on the last such line of a workload's stdout, or None."""
    found = None
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith(tag + " "):
                try:
                    found = json.loads(line[len(tag) + 1:])
                except ValueError:
                    pass
    return found


def histogram(events):
    h = {}
    for e in events:
        key = "%s/%s" % (e.get("api"), e.get("phase"))
        h[key] = h.get(key, 0) + 1
    return dict(sorted(h.items()))


def lost(summary):
    if not summary:
        return None
    return int(summary.get("lost", 0)) + int(summary.get("untracked_calls_state_full", 0))


def write_figures(path, fig):
    """The figures to `path`, and on stderr."""
    with open(path, "w") as f:
        json.dump(fig, f, indent=1, sort_keys=True)
    print(json.dumps(fig, indent=1, sort_keys=True), file=sys.stderr)


def problems_of(mine, summary, lost, pid):
    """What every trace check fails on first: no events of the workload, no summary, events lost."""
    problems = []
    if not mine:
        problems.append("no events for pid %d (probes not attached? see trace.err)" % pid)
    if summary is None:
        problems.append("no summary line")
    elif lost:
        problems.append("%d events lost" % lost)
    return problems


def verdict(name, problems, line):
    """What failed, or None after printing the PASS line."""
    if problems:
        return "; ".join(problems) + " -- " + line
    print("PASS %s: %s" % (name, line))
    return None


def run_main(name, main):
    """Runs main() (what failed, or None) and exits 1 after one FAIL line when something did."""
    try:
        err = main()
    except Exception as exc:  # a parsing bug must still end in one FAIL line
        err = "analysis error: %r" % (exc,)
    if err:
        print("FAIL %s: %s" % (name, err))
        sys.exit(1)
