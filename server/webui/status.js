// The status page (GET /status): polls /status.json, the daemon's own view
// of its metrics with a ten-minute history sampled on the server, so the
// charts show the past at once. The charts are plain SVG drawn here.

import { el, api, errorText, setupKeyForm, fmtBytes, fmtNum, fmtDuration, fillList } from './common.js';

const POLL_MS = 5000;
const SVG = 'http://www.w3.org/2000/svg';
const HEIGHT = 120, PAD_L = 44, PAD_R = 8, PAD_T = 8, PAD_B = 18;

const $ = (id) => document.getElementById(id);

function svg(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

// The smallest 1, 2 or 5 times a power of ten at or above X.
function niceMax(x) {
  if (!(x > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(x)));
  for (const m of [1, 2, 5, 10]) if (m * p >= x) return m * p;
  return 10 * p;
}

class Chart {
  // SERIES: [{key, label}] columns of the history.
  constructor(id, series) {
    this.fig = $(id);
    this.series = series;
    this.legend = el('div', { class: 'legend' }, series.map((s, k) =>
      el('span', { class: 'key s' + k }, s.label + ' ', el('b', { 'data-series': s.key }, '–'))));
    this.svg = svg('svg', { class: 'plot', height: HEIGHT, role: 'img', 'aria-label': this.fig.textContent.trim() });
    this.fig.append(this.legend, this.svg);
    this.last = null;
    new ResizeObserver(() => this.last && this.draw(...this.last)).observe(this.fig);
  }

  draw(hist, now) {
    this.last = [hist, now];
    const w = Math.max(200, Math.floor(this.svg.getBoundingClientRect().width)), h = HEIGHT;
    const span = hist.points_max * hist.interval_s, t0 = now - span;
    const t = hist.t || [];
    let max = 0;
    for (const s of this.series) for (const v of hist[s.key] || []) if (v !== null && v > max) max = v;
    const top = niceMax(max * 1.05);
    const x = (ti) => PAD_L + ((ti - t0) / span) * (w - PAD_L - PAD_R);
    const y = (v) => PAD_T + (1 - v / top) * (h - PAD_T - PAD_B);
    const kids = [];
    for (const f of [0, 0.5, 1]) {
      kids.push(svg('line', { class: 'grid', x1: PAD_L, x2: w - PAD_R, y1: y(top * f), y2: y(top * f) }));
      kids.push(svg('text', { class: 'tick', x: PAD_L - 4, y: y(top * f) + 4, 'text-anchor': 'end' }, fmtNum(top * f)));
    }
    kids.push(svg('text', { class: 'tick', x: PAD_L, y: h - 4 }, `−${Math.round(span / 60)} min`));
    kids.push(svg('text', { class: 'tick', x: w - PAD_R, y: h - 4, 'text-anchor': 'end' }, 'now'));
    let points = 0;
    this.series.forEach((s, k) => {
      const vals = hist[s.key] || [];
      let d = '', lastVal = null;
      vals.forEach((v, i) => {
        if (v === null || t[i] < t0) return;
        const px = x(t[i]).toFixed(1), py = y(v).toFixed(1);
        const joined = i > 0 && vals[i - 1] !== null && t[i - 1] >= t0;
        d += `${joined ? 'L' : 'M'}${px} ${py}`;
        // A point with no neighbour gets a dot, so a lone interval shows.
        if (!joined && (i + 1 >= vals.length || vals[i + 1] === null))
          kids.push(svg('circle', { class: 'dot s' + k, cx: px, cy: py, r: 2.5 }));
        if (k === 0) points++;
        lastVal = v;
      });
      kids.push(svg('path', { class: 'line s' + k, d: d || 'M0 0' }));
      const b = this.legend.querySelector(`[data-series="${s.key}"]`);
      b.textContent = fmtNum(lastVal);
      b.dataset.last = lastVal === null ? '' : String(lastVal);
    });
    this.svg.setAttribute('viewBox', `0 0 ${w} ${h}`);
    this.svg.dataset.points = String(points);
    this.svg.replaceChildren(...kids);
  }
}

const charts = [
  new Chart('chart-tps', [{ key: 'tokens_per_s', label: 'generated' }, { key: 'prompt_tokens_per_s', label: 'prompt' }]),
  new Chart('chart-ttft', [{ key: 'ttft_p50_ms', label: 'p50' }, { key: 'ttft_p95_ms', label: 'p95' }]),
  new Chart('chart-itl', [{ key: 'itl_p50_ms', label: 'p50' }, { key: 'itl_p95_ms', label: 'p95' }]),
  new Chart('chart-sessions', [{ key: 'sessions_active', label: 'active' }, { key: 'requests_waiting', label: 'waiting' }]),
];

function showModel(m, server) {
  if (!m) {
    fillList($('model-info'), [['state', 'loading the model…'], ['version', server.version]]);
    return;
  }
  fillList($('model-info'), [
    ['name', m.name],
    ['geometry', `${m.layers} layers · hidden ${m.hidden} · ffn ${m.intermediate}`],
    ['attention', `${m.heads} query / ${m.kv_heads} KV heads × ${m.head_size}`],
    ['vocabulary', m.vocab.toLocaleString('en-US')],
    ['context', `${m.context_length.toLocaleString('en-US')} tokens`],
    ['weights', `${fmtBytes(m.weight_bytes)} prepared, loaded in ${fmtNum(m.load_seconds)} s`],
    ['kernels', el('span', { title: m.kernels }, m.kernel_level)],
    ['threads', String(m.threads)],
    ['KV cache', `${m.kv_mode}, ${m.kv_type}`],
  ]);
}

function showLoad(now, server) {
  fillList($('load-info'), [
    ['sessions active', `${now.sessions_active ?? '–'} of ${server.parallel}`],
    ['requests waiting', `${now.requests_waiting ?? '–'} (queue ${server.queue})`],
    ['KV cache', fmtBytes(now.kv_cache_bytes)],
  ]);
  const budget = server.kv_budget_bytes;
  // Without a budget, the reference is every session at the full context.
  const ref = budget || server.kv_bytes_full_context * server.parallel;
  const meter = $('kv-meter');
  meter.max = ref || 1;
  meter.value = Math.min(now.kv_cache_bytes || 0, ref || 1);
  $('kv-caption').textContent = budget
    ? `${fmtBytes(now.kv_cache_bytes)} of the ${fmtBytes(budget)} budget (${fmtNum(100 * (now.kv_cache_usage_ratio || 0))}%)`
    : `no budget set; ${server.parallel} full-context sessions would take ${fmtBytes(ref)}`;
}

function showPrefix(p) {
  $('prefix-card').hidden = !p;
  if (!p) return;
  const asked = (p.hits_total || 0) + (p.misses_total || 0);
  fillList($('prefix-info'), [
    ['hits', `${p.hits_total ?? '–'}${asked ? ` (${fmtNum((100 * p.hits_total) / asked)}%)` : ''}`],
    ['misses', String(p.misses_total ?? '–')],
    ['tokens reused', String(p.tokens_total ?? '–')],
    ['memory', fmtBytes(p.bytes)],
  ]);
}

function showTotals(now, server) {
  fillList($('totals-info'), [
    ['HTTP requests', String(now.requests_total ?? '–')],
    ['prompt tokens', String(now.prompt_tokens_total ?? '–')],
    ['generated tokens', String(now.generation_tokens_total ?? '–')],
    ['resident memory', fmtBytes(now.resident_bytes)],
    ['uptime', fmtDuration(now.uptime_s)],
    ['version', server.version],
  ]);
}

function problem(text) {
  $('error').hidden = !text;
  $('error').textContent = text || '';
}

let timer = null;
async function poll() {
  clearTimeout(timer);
  try {
    const res = await api('/status.json');
    if (!res.ok) {
      problem(res.status === 401 ? 'This server needs an API key.' : await errorText(res));
    } else {
      const j = await res.json();
      problem('');
      showModel(j.model, j.server);
      showLoad(j.now, j.server);
      showPrefix(j.now.prefix_cache);
      showTotals(j.now, j.server);
      for (const c of charts) c.draw(j.history, j.now.time);
      $('updated').textContent = 'updated ' + new Date(j.now.time * 1000).toLocaleTimeString();
      document.body.dataset.polls = String(Number(document.body.dataset.polls || 0) + 1);
    }
  } catch (e) {
    problem('The server does not answer: ' + (e.message || e));
  }
  timer = setTimeout(poll, POLL_MS);
}

setupKeyForm(poll);
poll();
