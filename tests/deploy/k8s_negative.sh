#!/usr/bin/env bash
# The validator is not a rubber stamp: manifests made wrong on purpose are refused, each for its reason.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ds=$here/../../deploy/k8s/daemonset.yaml
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
expect() {  # NAME SED-EXPRESSION MESSAGE
  sed "$2" "$ds" >"$tmp/$1.yaml"
  out=$(node "$here/validate_k8s.js" "$tmp/$1.yaml" 2>&1)
  if [ $? -eq 0 ] || ! grep -qF -- "$3" <<<"$out"; then
    echo "FAIL $1: wanted '$3', got: $out"
    fails=$((fails + 1))
  else
    echo "ok $1"
  fi
}
expect privileged 's/privileged: false/privileged: true/' 'privileged: true at DaemonSet.spec.template.spec.containers.0.securityContext.privileged'
expect capability 's/- BPF /- NET_ADMIN /' 'capability NET_ADMIN is not one the agent needs'
expect schema_type 's/containerPort: 9400/containerPort: "x"/' 'containerPort must be integer'
expect no_hostpid 's/hostPID: true/hostPID: false/' 'hostPID must be true'
expect writable_host 's/{name: pods-logs, mountPath: \/var\/log\/pods, readOnly: true}/{name: pods-logs, mountPath: \/var\/log\/pods}/' 'host path /var/log/pods must be mounted read-only'
exit $((fails > 0))
