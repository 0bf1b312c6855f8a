#!/bin/bash
# deploy/set-runbook-base.sh on a copy of the rules: another base is set everywhere and the unit
# tests pass on the result; bad bases and files are refused with one line and exit 2, changing nothing.
src=$(cd "$(dirname "$0")/../.." && pwd)
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
cp "$src"/deploy/prometheus/rules.yml "$src"/deploy/prometheus/rules_test.yml "$d"/
fail=0
base=https://git.example.com:8443/org/gpuscope/blob/v1.2_rc-3/docs
"$src"/deploy/set-runbook-base.sh "$base/" "$d"/rules.yml "$d"/rules_test.yml || { echo "FAIL set-runbook-base.sh $base/"; fail=1; }
python3 "$src"/tests/deploy/deploy_docs.py --base "$base" --rules-dir "$d" "$src" || fail=1
n=$(grep -c "runbook_url: $base/deploy.md#" "$d"/rules.yml)
[ "$n" = 14 ] && echo "ok 14 runbook_urls on $base" || { echo "FAIL $n of 14 runbook_urls on $base"; fail=1; }
(cd "$d" && promtool test rules rules_test.yml >/dev/null) && echo "ok unit tests on $base" ||
  { echo "FAIL promtool test rules on $base"; fail=1; }
cp "$d"/rules.yml "$d"/before.yml
refuse() {  # WHY EXPECTED-LINE ARGS...
  local why=$1 want=$2
  shift 2
  local err rc
  err=$("$src"/deploy/set-runbook-base.sh "$@" 2>&1 >/dev/null)
  rc=$?
  if [ $rc -eq 2 ] && [ "$err" = "$want" ] && cmp -s "$d"/rules.yml "$d"/before.yml; then
    echo "ok $why"
  else
    echo "FAIL $why: exit $rc, said '$err', want '$want'"
    fail=1
  fi
}
bad="set-runbook-base.sh: BASE must be an absolute http(s) URL without spaces, quotes, '?' or '#':"
refuse relative "$bad docs" docs "$d"/rules.yml
refuse query "$bad https://h/docs?x=1" 'https://h/docs?x=1' "$d"/rules.yml
refuse fragment "$bad https://h/docs#x" 'https://h/docs#x' "$d"/rules.yml
refuse space "$bad https://h/my docs" 'https://h/my docs' "$d"/rules.yml
refuse sed_special "$bad https://h/a&b" 'https://h/a&b' "$d"/rules.yml
long="https://h/$(head -c 100000 /dev/zero | tr '\0' a) x"
refuse long_cut "$bad ${long:0:80}" "$long" "$d"/rules.yml
refuse not_rules "set-runbook-base.sh: /etc/hostname: no runbook_url to set (not a gpuscope rules file, or unreadable)" \
  https://h/docs "$d"/rules.yml /etc/hostname
refuse no_base "usage: set-runbook-base.sh BASE [FILE...] (BASE: the absolute http(s) URL of gpuscope's docs/ folder)"
exit $fail
