// A strict reader of the Prometheus text exposition format 0.0.4, for the
// serve tests: every sample must belong to a family declared by # TYPE (with
// # HELP), names and labels must be well formed, counters must end in
// _total, each series of a histogram (one per label set) must have
// cumulative buckets ending in le="+Inf" equal to _count, plus _sum, and
// every qwen3d_ sample must carry the one model_name label of the daemon's
// served model. Throws on the first violation.
'use strict';

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

function parseLabels(s, line) {
  const labels = {};
  let i = 0;
  while (i < s.length) {
    const eq = s.indexOf('=', i);
    if (eq < 0) throw new Error(`bad labels in: ${line}`);
    const key = s.slice(i, eq);
    if (!LABEL.test(key)) throw new Error(`bad label name '${key}' in: ${line}`);
    if (s[eq + 1] !== '"') throw new Error(`unquoted label value in: ${line}`);
    let j = eq + 2, v = '';
    for (; j < s.length && s[j] !== '"'; j++) {
      if (s[j] === '\\') { j++; v += s[j] === 'n' ? '\n' : s[j]; } else v += s[j];
    }
    if (j >= s.length) throw new Error(`unterminated label value in: ${line}`);
    if (key in labels) throw new Error(`duplicate label '${key}' in: ${line}`);
    labels[key] = v;
    i = j + 1;
    if (s[i] === ',') i++;
  }
  return labels;
}

function parseMetrics(text) {
  if (!text.endsWith('\n')) throw new Error('the exposition must end with a newline');
  const families = new Map();
  const samples = [];
  let modelName;
  for (const line of text.split('\n')) {
    if (line === '') continue;
    if (line.startsWith('#')) {
      const m = /^# (HELP|TYPE) (\S+) (.*)$/.exec(line);
      if (!m) continue;
      const [, kind, name, rest] = m;
      if (!NAME.test(name)) throw new Error(`bad metric name: ${line}`);
      const f = families.get(name) || { name, samples: [] };
      if (kind === 'TYPE') {
        if (f.type) throw new Error(`second TYPE for ${name}`);
        if (!['counter', 'gauge', 'histogram', 'summary', 'untyped'].includes(rest)) throw new Error(`bad type: ${line}`);
        if (f.samples.length) throw new Error(`TYPE after samples of ${name}`);
        f.type = rest;
      } else {
        if (f.help !== undefined) throw new Error(`second HELP for ${name}`);
        f.help = rest;
      }
      families.set(name, f);
      continue;
    }
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) throw new Error(`bad sample line: ${line}`);
    const [, name, labelText, valueText] = m;
    const value = valueText === '+Inf' ? Infinity : valueText === '-Inf' ? -Infinity : Number(valueText);
    if (Number.isNaN(value) && valueText !== 'NaN') throw new Error(`bad value: ${line}`);
    const labels = labelText ? parseLabels(labelText, line) : {};
    let fam = families.get(name);
    if (!fam) {
      const base = name.replace(/_(bucket|sum|count)$/, '');
      const f = families.get(base);
      if (f && f.type === 'histogram') fam = f;
    }
    if (!fam || !fam.type) throw new Error(`sample of an undeclared family: ${line}`);
    if (fam.help === undefined) throw new Error(`family without HELP: ${fam.name}`);
    if (fam.type === 'counter' && !name.endsWith('_total')) throw new Error(`counter not ending in _total: ${name}`);
    if (fam.type !== 'histogram' && name !== fam.name) throw new Error(`sample name ${name} in family ${fam.name}`);
    if (name.startsWith('qwen3d_')) {
      if (labels.model_name === undefined) throw new Error(`no model_name label: ${line}`);
      if (modelName !== undefined && labels.model_name !== modelName)
        throw new Error(`model_name "${labels.model_name}" where other samples have "${modelName}": ${line}`);
      modelName = labels.model_name;
    }
    const s = { name, labels, value };
    fam.samples.push(s);
    samples.push(s);
  }
  // A histogram family may hold several series, one per label set (le aside): each is checked alone.
  const seriesKey = (labels) => JSON.stringify(Object.entries(labels).filter(([k]) => k !== 'le').sort());
  for (const f of families.values()) {
    if (f.type !== 'histogram') continue;
    const series = new Map();
    for (const s of f.samples) {
      const k = seriesKey(s.labels);
      if (!series.has(k)) series.set(k, []);
      series.get(k).push(s);
    }
    if (!series.size) throw new Error(`histogram ${f.name} lacks buckets, _sum or _count`);
    for (const [k, ss] of series) {
      const what = k === '[]' ? f.name : `${f.name} ${k}`;
      const buckets = ss.filter((s) => s.name === f.name + '_bucket');
      const count = ss.find((s) => s.name === f.name + '_count');
      const sum = ss.find((s) => s.name === f.name + '_sum');
      if (!buckets.length || !count || !sum) throw new Error(`histogram ${what} lacks buckets, _sum or _count`);
      if (ss.filter((s) => s.name !== f.name + '_bucket').length !== 2)
        throw new Error(`histogram ${what}: more than one _sum or _count`);
      let prevLe = -Infinity, prev = 0;
      for (const b of buckets) {
        const le = b.labels.le === '+Inf' ? Infinity : Number(b.labels.le);
        if (!(le > prevLe)) throw new Error(`histogram ${what}: le not increasing at ${b.labels.le}`);
        if (b.value < prev) throw new Error(`histogram ${what}: buckets not cumulative at le=${b.labels.le}`);
        prevLe = le;
        prev = b.value;
      }
      if (prevLe !== Infinity) throw new Error(`histogram ${what}: no le="+Inf" bucket`);
      if (prev !== count.value) throw new Error(`histogram ${what}: +Inf bucket ${prev} != _count ${count.value}`);
    }
  }
  // Labels equal, model_name (on every qwen3d_ sample) set aside.
  const same = (a, b) => {
    const ka = Object.keys(a).filter((k) => k !== 'model_name'), kb = Object.keys(b).filter((k) => k !== 'model_name');
    return ka.length === kb.length && ka.every((k) => a[k] === b[k]);
  };
  return {
    families,
    samples,
    // The value of NAME with exactly LABELS (none when null; model_name aside); with ANY, of its first sample.
    // Absent = 0.
    value(name, labels = null, any = false) {
      const s = samples.find((x) => x.name === name && (any || same(x.labels, labels || {})));
      return s ? s.value : 0;
    },
  };
}

module.exports = { parseMetrics };
