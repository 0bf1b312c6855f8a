#!/usr/bin/env python3
"""Every metric name that a Grafana dashboard or an alert rule of deploy/ uses is one the agent
exports: compared against real scrapes of the agent (files given with --scrape).
Usage: metric_names.py --scrape FILE [--scrape FILE...] DASHBOARD.json... RULES.yml..."""
import argparse
import json
import re
import sys

import yaml

# Names that exist only with a part of gpuscope the agent does not run yet: said, not skipped
# (none now).
PENDING = {}
NAME = re.compile(r"\b((?:gpuscope|process)_[a-zA-Z0-9_]+)\b")


def exprs_of_dashboard(d):
    for p in d.get("panels", []):
        for t in p.get("targets", []):
            if "expr" in t:
                yield t["expr"]
    for v in d.get("templating", {}).get("list", []):
        q = v.get("query")
        if isinstance(q, dict):
            q = q.get("query")
        if v.get("type") == "query" and q:
            yield q


def exprs_of_rules(r):
    for g in r.get("groups", []):
        for rule in g.get("rules", []):
            yield rule["expr"]


def exported(scrape):
    names, hist = set(), set()
    for line in scrape.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split(" ", 3)
            names.add(name)
            if typ.strip() == "histogram":
                hist.add(name)
        elif line and not line.startswith("#"):
            names.add(re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0))
    for h in hist:
        names |= {h + "_bucket", h + "_sum", h + "_count"}
    return names


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scrape", action="append", required=True)
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    have = set()
    for s in a.scrape:
        with open(s) as f:
            have |= exported(f.read())
    used = {}
    for path in a.files:
        with open(path) as f:
            exprs = list(exprs_of_dashboard(json.load(f)) if path.endswith(".json") else exprs_of_rules(yaml.safe_load(f)))
        if not exprs:
            print(f"FAIL {path}: no expressions found")
            return 1
        for e in exprs:
            for n in NAME.findall(e):
                used.setdefault(n, set()).add(path.rsplit("/", 1)[-1])
    bad = 0
    for n in sorted(used):
        where = ", ".join(sorted(used[n]))
        if n in have:
            print(f"ok {n} ({where})")
        elif n in PENDING:
            print(f"PENDING {n} ({where}): not in the scrape: {PENDING[n]}")
        else:
            print(f"FAIL {n} ({where}): not exported by the agent")
            bad += 1
    for n in PENDING:
        if n in have:
            print(f"NOTE {n} is exported now: take it out of PENDING")
    print(f"{len(used)} names used, {bad} not exported")
    return 1 if bad or not used else 0


if __name__ == "__main__":
    sys.exit(main())
