#!/bin/sh
# Points the alert rules' runbook_url annotations at where you serve gpuscope's docs/ folder:
#   deploy/set-runbook-base.sh https://github.com/ORG/gpuscope/blob/main/docs
# makes every runbook_url BASE/deploy.md#ANCHOR, in prometheus/rules.yml and its unit tests
# (or in the FILEs given). Run it again to change the base.
usage="usage: set-runbook-base.sh BASE [FILE...] (BASE: the absolute http(s) URL of gpuscope's docs/ folder)"
if [ $# -lt 1 ]; then
  echo "$usage" >&2
  exit 2
fi
base=${1%/}
shift
# The characters a URL needs, and none that sed's replacement or YAML would read otherwise.
if ! printf '%s' "$base" | grep -Eq '^https?://[A-Za-z0-9.-]+(:[0-9]+)?(/[A-Za-z0-9._~%+=,@:/-]*)?$' ||
  [ "$(printf '%s' "$base" | wc -l)" -ne 0 ]; then
  echo "set-runbook-base.sh: BASE must be an absolute http(s) URL without spaces, quotes, '?' or '#': $(printf '%.80s' "$base" | tr -c '[:print:]' '?')" >&2
  exit 2
fi
if [ $# -eq 0 ]; then
  here=$(dirname "$0")
  set -- "$here/prometheus/rules.yml" "$here/prometheus/rules_test.yml"
fi
for f in "$@"; do
  if ! grep -q 'runbook_url: .*/deploy\.md#' "$f" 2>/dev/null; then
    echo "set-runbook-base.sh: $f: no runbook_url to set (not a gpuscope rules file, or unreadable)" >&2
    exit 2
  fi
done
for f in "$@"; do
  sed -i "s|\(runbook_url: \).*/deploy\.md#|\1$base/deploy.md#|" "$f" || exit 1
done
