"""Reading `gpuscope trace --json` output: one JSON object a line, a final summary line."""
import json

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
