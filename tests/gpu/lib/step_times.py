"""Step times of workloads/torch_steps.py by arm, for the checks that interleave arms over its
rounds (83, 84, 97)."""
import json
import statistics


def by_mode(steps_path, modes_path):
    """{arm: [step ms, ...]} of the workload's ROUND lines, each round's arm from the "ROUND ARM"
    lines of modes_path; a round without one is left out."""
    modes = dict(l.split() for l in open(modes_path))
    by = {}
    for line in open(steps_path):
        if line.startswith("ROUND "):
            j = json.loads(line[6:])
            m = modes.get(str(j["round"]))
            if m:
                by.setdefault(m, []).extend(j["step_ms"])
    return by


def medians(by):
    return {m: statistics.median(v) for m, v in by.items()}
