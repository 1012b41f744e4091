// Validates Kubernetes manifests against the Kubernetes API schemas, for
// tests/deploy_k8s.sh, with two tools from npm:
//  - kubernetes-models: each object through the validator its package
//    compiled (ajv) from the Kubernetes OpenAPI schemas: types, required
//    fields, formats;
//  - the TypeScript compiler over the same package's type declarations:
//    each object becomes a typed object literal, so a field the API does
//    not have (a misspelled name) is an error, which the OpenAPI schemas
//    alone let through.
// Then, with --qwen3d, the facts the deployment relies on (QoS, probes,
// grace period, read-only model, names that must match).
//
// usage: node k8s-validate.mjs NPM_DIR WORK_DIR [--qwen3d] FILE.yaml...
// Prints one line per object; exits 1 after listing every problem.
import fs from 'fs';
import path from 'path';
import { execFileSync } from 'child_process';
import { pathToFileURL } from 'url';

const [npm, work, ...rest] = process.argv.slice(2);
const qwen3d = rest[0] === '--qwen3d';
const files = qwen3d ? rest.slice(1) : rest;
const mods = path.join(npm, 'node_modules');
const load = (p) => import(pathToFileURL(path.join(mods, p)).href);
const YAML = (await load('yaml/dist/index.js')).default;

const problems = [];
const docs = [];
for (const f of files) {
  for (const d of YAML.parseAllDocuments(fs.readFileSync(f, 'utf8'))) {
    if (d.errors.length) {
      problems.push(`${f}: YAML: ${d.errors[0].message}`);
      continue;
    }
    const obj = d.toJS();
    if (obj) docs.push({ file: path.basename(f), obj });
  }
}

// 1. The OpenAPI schemas.
for (const { file, obj } of docs) {
  const what = `${file}: ${obj.kind} ${obj.metadata && obj.metadata.name}`;
  const modPath = `kubernetes-models/${obj.apiVersion}/${obj.kind}.js`;
  if (!/^[a-z0-9./]+$/.test(String(obj.apiVersion)) || !/^[A-Za-z]+$/.test(String(obj.kind)) ||
      !fs.existsSync(path.join(mods, modPath))) {
    problems.push(`${what}: no such API kind ${obj.apiVersion} ${obj.kind}`);
    continue;
  }
  const Model = (await load(modPath))[obj.kind];
  try {
    new Model(obj).validate();
    console.log(`schema ok: ${what} (${obj.apiVersion})`);
  } catch (e) {
    problems.push(`${what}: ${e.message}`);
  }
}

// 2. No field the API does not have.
const ts = docs.map(({ obj }, i) => `import type { I${obj.kind} as T${i} } from ${JSON.stringify(
  path.join(mods, `kubernetes-models/${obj.apiVersion}/${obj.kind}.js`))};\n` +
  `export const m${i}: T${i} = ${JSON.stringify(obj, null, 2)};\n`).join('');
const tsFile = path.join(work, 'manifests.ts');
fs.writeFileSync(tsFile, ts);
try {
  execFileSync(process.execPath, [path.join(mods, 'typescript/bin/tsc'), '--noEmit', '--strict', '--skipLibCheck',
    '--module', 'esnext', '--moduleResolution', 'bundler', '--target', 'es2022', tsFile], { encoding: 'utf8' });
  console.log(`fields ok: ${docs.length} objects, no field outside the API`);
} catch (e) {
  // "manifests.ts(LINE,COL): error TS2353: Object literal may only specify known properties, and 'x' ..."
  for (const line of String(e.stdout).split('\n').filter((l) => l.includes('error TS'))) {
    const m = /\((\d+),\d+\)/.exec(line);
    const upTo = m ? ts.split('\n').slice(0, Number(m[1])).join('\n') : '';
    const doc = (upTo.match(/export const m(\d+)/g) || []).length - 1;
    const where = doc >= 0 ? `${docs[doc].file}: ${docs[doc].obj.kind} ${docs[doc].obj.metadata.name}` : 'manifests';
    problems.push(`${where}: ${line.replace(/^.*error TS\d+: /, '')}`);
  }
}

// 3. What qwen3d's deployment relies on.
if (qwen3d) {
  const one = (kind) => {
    const found = docs.filter((d) => d.obj.kind === kind);
    if (found.length !== 1) throw new Error(`expected one ${kind}, found ${found.length}`);
    return found[0].obj;
  };
  const check = (cond, what) => { if (!cond) problems.push(`qwen3d: ${what}`); };
  const dep = one('Deployment'), svc = one('Service'), pdb = one('PodDisruptionBudget');
  const hpa = one('HorizontalPodAutoscaler');
  const maps = docs.filter((d) => d.obj.kind === 'ConfigMap').map((d) => d.obj);
  const pod = dep.spec.template.spec, labels = dep.spec.template.metadata.labels;
  const matches = (sel) => Object.entries(sel || {}).every(([k, v]) => labels[k] === v);
  for (const c of pod.containers) {
    const { requests = {}, limits = {} } = c.resources || {};
    check(requests.cpu !== undefined && String(requests.cpu) === String(limits.cpu) && /^[1-9][0-9]*$/.test(String(limits.cpu)),
      `${c.name}: CPU requests must equal limits in whole CPUs (Guaranteed QoS, exclusive CPUs)`);
    check(requests.memory !== undefined && String(requests.memory) === String(limits.memory),
      `${c.name}: memory requests must equal limits (Guaranteed QoS)`);
    const probe = (p) => p && p.httpGet && p.httpGet.path;
    check(probe(c.startupProbe) === '/health/ready', `${c.name}: the startup probe must read /health/ready`);
    check(probe(c.livenessProbe) === '/health/live', `${c.name}: the liveness probe must read /health/live`);
    check(probe(c.readinessProbe) === '/health/ready', `${c.name}: the readiness probe must read /health/ready`);
    const models = (c.volumeMounts || []).find((m) => m.mountPath === '/models');
    const vol = models && pod.volumes.find((v) => v.name === models.name);
    check(models && models.readOnly === true && vol && vol.persistentVolumeClaim && vol.persistentVolumeClaim.readOnly === true,
      `${c.name}: the model volume must be mounted read-only from a read-only claim`);
    // Grace: preStop, then drain-delay (default 5 s), drain-timeout and the
    // 5 s for final events.
    const conf = maps.map((m) => (m.data || {})['qwen3d.conf']).find(Boolean) || '';
    const key = (k, dflt) => Number((new RegExp(`^${k} *= *(\\d+)`, 'm').exec(conf) || [])[1] ?? dflt);
    const drain = key('drain-timeout', NaN), delay = key('drain-delay', 5);
    const pre = c.lifecycle && c.lifecycle.preStop && c.lifecycle.preStop.sleep ? c.lifecycle.preStop.sleep.seconds : 0;
    check(drain > 0, 'the config map sets no drain-timeout');
    check(pod.terminationGracePeriodSeconds > pre + delay + drain + 5,
      `terminationGracePeriodSeconds ${pod.terminationGracePeriodSeconds} must exceed preStop ${pre} s + ` +
      `drain-delay ${delay} s + drain ${drain} s + 5 s`);
  }
  check(matches(dep.spec.selector.matchLabels), 'the Deployment selector does not match its pods');
  check(matches(svc.spec.selector), 'the Service selector does not match the pods');
  check(matches(pdb.spec.selector.matchLabels), 'the PodDisruptionBudget selector does not match the pods');
  check(hpa.spec.scaleTargetRef.kind === 'Deployment' && hpa.spec.scaleTargetRef.name === dep.metadata.name,
    'the HPA does not scale the Deployment');
  const adapter = maps.map((m) => (m.data || {})['config.yaml']).find(Boolean);
  const rules = adapter ? YAML.parse(adapter).rules || [] : [];
  const served = rules.map((r) => r.name && r.name.as);
  for (const m of hpa.spec.metrics)
    check(m.type === 'Pods' && served.includes(m.pods.metric.name),
      `the HPA reads ${m.pods && m.pods.metric.name}, which no adapter rule serves (${served})`);
  for (const r of rules)
    check(r.seriesQuery && r.metricsQuery && r.resources && r.resources.overrides && r.resources.overrides.pod,
      'an adapter rule needs seriesQuery, metricsQuery and a pod resource override');
  if (!problems.length) console.log('qwen3d ok: Guaranteed QoS, probes, grace period, read-only model, selectors, HPA metric');
}

for (const p of problems) console.log(`PROBLEM: ${p}`);
process.exit(problems.length ? 1 : 0);
