"""Step times of workloads/torch_steps.py by arm, for the checks that interleave arms over its
rounds (83, 84, 97)."""
import json
import statistics


def rounds(steps_path, modes_path):
    """(round, arm, [step ms, ...]) of each of the workload's ROUND lines, its arm from the
    "ROUND ARM" lines of modes_path; a round without one is left out."""
    modes = dict(l.split() for l in open(modes_path))
    for line in open(steps_path):
        if line.startswith("ROUND "):
            j = json.loads(line[6:])
            m = modes.get(str(j["round"]))
            if m:
                yield j["round"], m, j["step_ms"]


def by_mode(steps_path, modes_path):
    """{arm: [step ms, ...]} over every round of each arm."""
    by = {}
    for _, m, ms in rounds(steps_path, modes_path):
        by.setdefault(m, []).extend(ms)
    return by


def medians(by):
    return {m: statistics.median(v) for m, v in by.items()}


def median(v):
    return statistics.median(v)


def round_medians(steps_path, modes_path):
    """{arm: [(round, median step ms of the round), ...]}."""
    out = {}
    for r, m, ms in rounds(steps_path, modes_path):
        if ms:
            out.setdefault(m, []).append((r, statistics.median(ms)))
    return out


def paired_ratios(rounds, arms):
    """{arm: [ratio of its round to the `off` round of the same repetition (rounds r // arms)]}."""
    off = {r // arms: v for r, v in rounds.get("off", [])}
    out = {}
    for m, rv in rounds.items():
        if m == "off":
            continue
        out[m] = [v / off[r // arms] for r, v in rv if r // arms in off]
    return {m: v for m, v in out.items() if v}


def calibrated(steps_path, modes_path):
    """{arm: [(round, median of the round's step ms / its block's calibration ms, median
    calibration ms), ...]} from rounds run with TORCH_STEPS_CAL=1; empty without."""
    modes = dict(l.split() for l in open(modes_path))
    out = {}
    for line in open(steps_path):
        if not line.startswith("ROUND "):
            continue
        j = json.loads(line[6:])
        m = modes.get(str(j["round"]))
        cal = j.get("cal_ms")
        if m and cal and len(cal) == len(j["step_ms"]):
            out.setdefault(m, []).append(
                (j["round"], statistics.median(s / c for s, c in zip(j["step_ms"], cal)), statistics.median(cal)))
    return out
