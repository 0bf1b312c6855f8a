#!/usr/bin/env python3
"""The overhead governor against a real launch storm, on the stand-in libraries.

usage: sudo bench/governor_storm.py BUILD_DIR [--limit PERCENT] [--storm-s SECONDS]

The CPU figures behind docs/deploy.md#overhead-governor, which the tests no longer measure
(Deploy.GovernorStepsDownUnderStormAndBackUp drives the real agent's governor with a CPU source
of its own, so that it holds on a shared machine):
1. the governor off: the agent's idle CPU (the least of windows 2-4) and a storm's (10 stand-in
   processes at a time, each launching and exiting), in cores;
2. --max-cpu-percent LIMIT (default 2.5 times idle, at least 6): each governor window's level and
   CPU during the storm and after it, until level 0 (or 60 s): the windows over the limit after
   the first step down, the deepest level, and how long after the storm it is back at 0.
Figures depend on the machine and what else runs on it: run it on a quiet one (docs/bench.md).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request


def metric(text, name):
    m = re.search(r"^" + re.escape(name) + r" (\S+)$", text, re.M)
    return float(m.group(1)) if m else -1.0


class Agent:
    def __init__(self, build, d, limit):
        lib = f"{build}/tests/fixtures/standin/lib"
        self.err = open(f"{d}/agent-{limit}.err", "w")
        self.p = subprocess.Popen(
            [f"{build}/gpuscope", "agent", "--json", "--listen", "127.0.0.1:0", "-c", "govstorm", "--lib",
             f"{lib}/libcuda.so.1", "--lib", f"{lib}/libcudart.so.13", "--interval", "0.1", "--bridge-pin-dir",
             f"{d}/no-bridge", "--nvml", f"{d}/no-libnvidia-ml.so.1", "--max-cpu-percent", str(limit)],
            stdout=subprocess.PIPE, stderr=self.err, text=True)
        self.port = json.loads(self.p.stdout.readline())["port"]

    def metrics(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as r:
            return r.read().decode()

    def window(self):
        t = self.metrics()
        return (int(metric(t, "gpuscope_governor_windows_total")), metric(t, "gpuscope_governor_level"),
                metric(t, "gpuscope_governor_cpu_ratio"))

    def stop(self):
        self.p.send_signal(2)
        self.p.wait(30)


def storm_batch(app):
    procs = [subprocess.Popen([app, "driver", "0"], stdout=subprocess.DEVNULL) for _ in range(10)]
    for p in procs:
        p.wait()
    return len(procs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--limit", type=float, default=0)
    ap.add_argument("--storm-s", type=float, default=30)
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    d = tempfile.mkdtemp(prefix="gs-governor-storm.")
    app = f"{d}/govstorm"
    os.symlink(f"{build}/tests/fixtures/standin/standin_app", app)

    off = Agent(build, d, 10000)
    seen, idle = 1, []
    while len(idle) < 3:
        time.sleep(0.5)
        n, _, cpu = off.window()
        if n > seen:
            seen = n
            idle.append(cpu)
    idle = min(idle)
    start = off.window()[0]
    storm = -1
    while storm < 0:
        storm_batch(app)
        n, _, cpu = off.window()
        if n >= start + 2:
            storm = cpu
    off.stop()
    limit = a.limit or max(6.0, round(250 * idle, 1))
    print(f"idle_cpu_ratio {idle:.4f} storm_cpu_ratio_governor_off {storm:.4f} limit_ratio {limit / 100:.4f}")

    on = Agent(build, d, limit)
    time.sleep(4.5)
    windows, procs = {}, 0
    t0 = time.monotonic()
    while time.monotonic() - t0 < a.storm_s:
        procs += storm_batch(app)
        n, level, cpu = on.window()
        windows.setdefault(n, (level, cpu, "storm"))
    storm_end = time.monotonic()
    back = None
    while time.monotonic() - storm_end < 60:
        time.sleep(0.2)
        n, level, cpu = on.window()
        windows.setdefault(n, (level, cpu, "after"))
        if level == 0:
            back = time.monotonic() - storm_end
            break
    on.stop()
    first_down = min((n for n, w in windows.items() if w[0] > 0), default=0)
    over = [n for n, w in windows.items() if first_down and n > first_down and w[2] == "storm" and w[1] > limit / 100]
    deepest = max(w[0] for w in windows.values())
    for n in sorted(windows):
        level, cpu, phase = windows[n]
        print(f"window {n} {phase} level {level:.0f} cpu_ratio {cpu:.4f}")
    storm_windows = sum(1 for n, w in windows.items() if n > first_down and w[2] == "storm")
    print(f"storm_processes {procs} storm_windows_after_first_step {storm_windows} over_limit {len(over)} "
          f"deepest_level {deepest:.0f} back_to_level_0_s {back if back is None else round(back, 1)}")
    subprocess.run(["rm", "-rf", d])
    return 0 if first_down and back is not None else 1


if __name__ == "__main__":
    sys.exit(main())
