// Validates Kubernetes manifests offline against the API schemas of kubernetes-models (the
// Kubernetes OpenAPI) and @kubernetes-models/prometheus-operator (ServiceMonitor, PodMonitor),
// then checks the security context: nothing privileged, only the capabilities docs/deploy.md
// justifies. Usage: node validate_k8s.js FILE.yaml...
'use strict';
const fs = require('fs');
const YAML = require('yaml');

const kinds = {
  'apps/v1/DaemonSet': () => require('kubernetes-models/apps/v1/DaemonSet').DaemonSet,
  'v1/Service': () => require('kubernetes-models/v1/Service').Service,
  'v1/Namespace': () => require('kubernetes-models/v1/Namespace').Namespace,
  'monitoring.coreos.com/v1/ServiceMonitor': () =>
    require('@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor').ServiceMonitor,
  'monitoring.coreos.com/v1/PodMonitor': () =>
    require('@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PodMonitor').PodMonitor,
};
const allowedCaps = new Set(['BPF', 'PERFMON', 'SYS_RESOURCE', 'SYS_PTRACE', 'DAC_READ_SEARCH']);

let failures = 0, objects = 0;
const fail = (where, msg) => { failures++; console.log(`FAIL ${where}: ${msg}`); };

// Any field named privileged set to true, anywhere in the object.
function findPrivileged(o, path, out) {
  if (o && typeof o === 'object') {
    for (const [k, v] of Object.entries(o)) {
      if (k === 'privileged' && v === true) out.push(`${path}.${k}`);
      findPrivileged(v, `${path}.${k}`, out);
    }
  }
  return out;
}

for (const file of process.argv.slice(2)) {
  for (const doc of YAML.parseAllDocuments(fs.readFileSync(file, 'utf8'))) {
    if (doc.errors.length) { fail(file, doc.errors.join('; ')); continue; }
    const o = doc.toJSON();
    if (!o) continue;
    objects++;
    const where = `${file}: ${o.kind}/${o.metadata && o.metadata.name}`;
    const make = kinds[`${o.apiVersion}/${o.kind}`];
    if (!make) { fail(where, `no schema known for ${o.apiVersion} ${o.kind}`); continue; }
    try {
      new (make())(o).validate();
    } catch (e) {
      fail(where, `schema: ${e.message}`);
      continue;
    }
    const priv = findPrivileged(o, o.kind, []);
    if (priv.length) fail(where, `privileged: true at ${priv.join(', ')}`);
    if (o.kind === 'DaemonSet') {
      const spec = o.spec.template.spec;
      if (!spec.hostPID) fail(where, 'hostPID must be true: the agent probes the node\'s processes');
      for (const c of spec.containers) {
        const sc = c.securityContext || {};
        if (sc.allowPrivilegeEscalation !== false) fail(where, `${c.name}: allowPrivilegeEscalation must be false`);
        const caps = sc.capabilities || {};
        if (!(caps.drop || []).includes('ALL')) fail(where, `${c.name}: capabilities must drop ALL`);
        for (const cap of caps.add || [])
          if (!allowedCaps.has(cap)) fail(where, `${c.name}: capability ${cap} is not one the agent needs`);
        if (!c.resources || !c.resources.limits || !c.resources.requests)
          fail(where, `${c.name}: resource requests and limits are required`);
        for (const m of c.volumeMounts || []) {
          const v = spec.volumes.find((x) => x.name === m.name);
          if (!v) fail(where, `${c.name}: mount ${m.name} has no volume`);
          else if (v.hostPath && m.mountPath !== '/sys/fs/bpf' && !m.readOnly)
            fail(where, `${c.name}: host path ${v.hostPath.path} must be mounted read-only`);
        }
      }
    }
  }
}
console.log(`${objects} objects, ${failures} failures`);
process.exit(failures || !objects ? 1 : 0);
