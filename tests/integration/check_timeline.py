#!/usr/bin/env python3
"""Checks a `gpuscope timeline` trace (Chrome JSON): tracks, spans, flows and metadata.

Used by tests/integration/gputime_test.cpp and tests/gpu/checks/89_gputime_timeline.sh.
Prints one line, "OK cpu=N gpu=N kernels=N flows=N counters=N" or "FAIL: why"; exit 0 or 1."""
import argparse
import collections
import json
import re
import sys


def fail(why):
    print("FAIL: " + why)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--pid", type=int)
    ap.add_argument("--gpu", action="store_true", help="GPU spans must be present")
    ap.add_argument("--no-gpu", action="store_true", help="GPU spans must be absent, and the metadata say why")
    ap.add_argument("--min-cpu", type=int, default=1)
    ap.add_argument("--min-kernels", type=int, default=0)
    ap.add_argument("--kernel", help="a kernel name that must appear (substring)")
    ap.add_argument("--min-flows", type=int, default=0)
    ap.add_argument("--counters", action="store_true", help="counter tracks must be present")
    a = ap.parse_args()

    try:
        with open(a.file) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        fail("does not parse: %s" % e)
    ev = doc.get("traceEvents")
    meta = doc.get("metadata")
    if not isinstance(ev, list) or not isinstance(meta, dict):
        fail("no traceEvents list or metadata object")

    procs, threads = {}, {}
    spans = collections.defaultdict(list)  # (pid, tid) -> [(ts, end, event)]
    flows_s, flows_f = {}, {}
    counters = 0
    for e in ev:
        ph = e.get("ph")
        if ph == "M" and e.get("name") == "process_name":
            procs[e["pid"]] = e["args"]["name"]
        elif ph == "M" and e.get("name") == "thread_name":
            threads[(e["pid"], e["tid"])] = e["args"]["name"]
        elif ph == "X":
            for k in ("name", "cat", "pid", "tid", "ts", "dur"):
                if k not in e:
                    fail("span without %s: %s" % (k, e))
            if e["dur"] < 0:
                fail("negative duration: %s" % e)
            spans[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"], e))
        elif ph == "s":
            if e["id"] in flows_s:
                fail("flow id %s starts twice" % e["id"])
            flows_s[e["id"]] = e
        elif ph == "f":
            flows_f[e["id"]] = e
        elif ph == "C":
            counters += 1

    for key in spans:
        if key[0] not in procs:
            fail("pid %d has spans but no process_name" % key[0])
        if key not in threads:
            fail("track %s has spans but no thread_name" % (key,))
    if a.pid is not None and a.pid not in procs:
        fail("pid %d has no track" % a.pid)

    def of(cat_prefix):
        return [s for v in spans.values() for s in v if s[2]["cat"].startswith(cat_prefix)
                and (a.pid is None or s[2]["pid"] == a.pid)]

    cpu = of("cuda_api")
    gpu = of("gpu_")
    kernels = [s for s in gpu if s[2]["cat"] == "gpu_kernel"]
    if len(cpu) < a.min_cpu:
        fail("%d CPU spans, expected at least %d" % (len(cpu), a.min_cpu))
    for s in gpu:
        name = threads.get((s[2]["pid"], s[2]["tid"]), "")
        if not re.match(r"GPU \d+ stream \d+$", name):
            fail("GPU span on track %r" % name)
    if a.gpu:
        if meta.get("gpu_spans") != "present":
            fail("metadata gpu_spans is %r" % meta.get("gpu_spans"))
        if len(kernels) < max(1, a.min_kernels):
            fail("%d kernel spans, expected at least %d" % (len(kernels), a.min_kernels))
        if a.kernel and not any(a.kernel in s[2]["name"] for s in kernels):
            fail("no kernel named like %r" % a.kernel)
    if a.no_gpu:
        if gpu:
            fail("%d GPU spans where none were expected" % len(gpu))
        if "libgpuscope-cupti.so" not in str(meta.get("gpu_spans")):
            fail("metadata gpu_spans does not say that GPU spans need the library: %r" % meta.get("gpu_spans"))

    # Each arrow: starts inside a span of its thread, ends at the start of a GPU span.
    for fid, s in flows_s.items():
        f = flows_f.get(fid)
        if f is None:
            fail("flow %s has no end" % fid)
        src = spans.get((s["pid"], s["tid"]), [])
        if not any(b <= s["ts"] <= e for b, e, _ in src):
            fail("flow %s starts outside any span of its thread" % fid)
        dst = spans.get((f["pid"], f["tid"]), [])
        if not any(abs(b - f["ts"]) < 0.002 and x["cat"].startswith("gpu_") for b, _, x in dst):
            fail("flow %s does not end at a GPU span's start" % fid)
    if len(flows_s) < a.min_flows:
        fail("%d flows, expected at least %d" % (len(flows_s), a.min_flows))
    if a.counters and counters == 0:
        fail("no counter samples (metadata counters: %r)" % meta.get("counters"))
    print("OK cpu=%d gpu=%d kernels=%d flows=%d counters=%d" % (len(cpu), len(gpu), len(kernels), len(flows_s),
                                                                 counters))


if __name__ == "__main__":
    main()
