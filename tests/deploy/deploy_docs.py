#!/usr/bin/env python3
"""deploy/ and docs/deploy.md agree: every file of deploy/ is in the page's file table, every
dashboard has its paragraph, and every alert's runbook_url is an absolute URL ending in
/deploy.md#ANCHOR whose anchor the page has (the same in the rules' unit tests).
Usage: deploy_docs.py [--base BASE] [--rules-dir DIR] SOURCE_DIR
(--base: every runbook_url must be BASE/deploy.md#ANCHOR; --rules-dir: where rules.yml and
rules_test.yml are, default SOURCE_DIR/deploy/prometheus)."""
import argparse
import glob
import json
import os
import re
import sys
from urllib.parse import urlsplit

import yaml


def braces(path):
    """`a/{b,c}.json` -> a/b.json, a/c.json"""
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    return [x for alt in m.group(1).split(",") for x in braces(path[:m.start()] + alt + path[m.end():])]


def table_files(page):
    """The paths in the first column of the page's file table; a name without a folder is in the
    folder of the row's first path (`deploy/prometheus/rules.yml`, `rules_test.yml`)."""
    out = set()
    for line in page.splitlines():
        if line.startswith("| `deploy/"):
            cells = re.findall(r"`([^`]+)`", line.split("|")[1])
            d = os.path.dirname(cells[0])
            for c in cells:
                out.update(braces(c if "/" in c else os.path.join(d, c)))
    return out


def check_files(src, page, fail):
    listed = table_files(page)
    have = set()
    for f in glob.glob(os.path.join(src, "deploy", "**", "*"), recursive=True):
        if os.path.isfile(f) and "node_modules" not in f and "__pycache__" not in f:
            have.add(os.path.relpath(f, src))
    for f in sorted(have - listed):
        fail(f"{f} is not in docs/deploy.md's file table")
    for f in sorted(listed - have):
        fail(f"docs/deploy.md's file table names {f}, which is not there")
    for f in sorted(glob.glob(os.path.join(src, "deploy", "grafana", "*.json"))):
        with open(f) as fh:
            title = json.load(fh)["title"]
        name = title.split(" / ", 1)[-1]
        if f"**{name}**" not in page:
            fail(f"dashboard {os.path.basename(f)} ({title}): no **{name}** paragraph in docs/deploy.md")
    return len(have)


def check_runbooks(rules_dir, page, base, fail):
    anchors = set(re.findall(r'<a id="([^"]+)"></a>', page))
    with open(os.path.join(rules_dir, "rules.yml")) as fh:
        rules = yaml.safe_load(fh)
    urls = {}
    for g in rules["groups"]:
        for r in g["rules"]:
            if "alert" not in r:
                continue
            url = r.get("annotations", {}).get("runbook_url", "")
            urls[r["alert"]] = url
            u = urlsplit(url)
            if u.scheme not in ("http", "https") or not u.netloc:
                fail(f"{r['alert']}: runbook_url {url!r} is not an absolute http(s) URL")
            elif not u.path.endswith("/deploy.md") or not u.fragment:
                fail(f"{r['alert']}: runbook_url {url!r} is not BASE/deploy.md#ANCHOR")
            elif u.fragment not in anchors:
                fail(f"{r['alert']}: runbook_url {url!r}: docs/deploy.md has no <a id=\"{u.fragment}\">")
            elif base is not None and url != f"{base.rstrip('/')}/deploy.md#{u.fragment}":
                fail(f"{r['alert']}: runbook_url {url!r} is not on base {base}")
    bases = {u.split("/deploy.md#")[0] for u in urls.values()}
    if len(bases) > 1:
        fail(f"the runbook_urls have {len(bases)} bases: {sorted(bases)}")
    with open(os.path.join(rules_dir, "rules_test.yml")) as fh:
        tests = yaml.safe_load(fh)
    seen = set()
    for t in tests["tests"]:
        for a in t.get("alert_rule_test", []):
            for e in a.get("exp_alerts", []):
                got = e.get("exp_annotations", {}).get("runbook_url")
                seen.add(a["alertname"])
                if got != urls.get(a["alertname"]):
                    fail(f"rules_test.yml: {a['alertname']} expects runbook_url {got!r}, rules.yml has "
                         f"{urls.get(a['alertname'])!r}")
    for a in sorted(set(urls) - seen):
        fail(f"rules_test.yml: no firing case of {a}")
    return urls


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base")
    ap.add_argument("--rules-dir")
    ap.add_argument("src")
    a = ap.parse_args()
    with open(os.path.join(a.src, "docs", "deploy.md")) as fh:
        page = fh.read()
    bad = []

    def fail(msg):
        print("FAIL " + msg)
        bad.append(msg)

    n = check_files(a.src, page, fail)
    urls = check_runbooks(a.rules_dir or os.path.join(a.src, "deploy", "prometheus"), page, a.base, fail)
    print(f"{n} files of deploy/, {len(urls)} runbook_urls, {len(bad)} failures")
    return 1 if bad or not urls or not n else 0


if __name__ == "__main__":
    sys.exit(main())
