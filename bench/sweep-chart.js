// The chart of a concurrency sweep (http-load.js --sweep): plain SVG written
// by hand, no libraries, that renders alike in a browser and in GitHub's
// README view (attributes only, no script, no style sheet, no web font).
// Two panels against concurrent clients (log scale): total generated
// tokens/s, and inter-token latency p50 (solid) and p95 (dashed); one colour
// per build (before, after). The caption names the CPU, the kernel level,
// the threads, the model and the load.
//
// http-load.js calls sweepSvg(summary) for --svg FILE. From the command line
// it redraws a chart from a saved `--json` run:
//   node bench/sweep-chart.js SWEEP.jsonl OUT.svg
'use strict';
const fs = require('fs');

const W = 960, H = 500;
const PANEL = { top: 70, height: 300, width: 380, gap: 110, left: 80 };
const COLORS = { before: '#d95f02', after: '#1b6ac9', qwen3d: '#1b6ac9' };

const esc = (s) => String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
const num = (x) => (Number.isInteger(x) ? String(x) : x.toFixed(2).replace(/\.?0+$/, ''));

// A step of 1, 2 or 5 times a power of ten that puts about five ticks under MAX.
function tickStep(max) {
  const raw = max / 5;
  const p = 10 ** Math.floor(Math.log10(raw));
  return [1, 2, 5, 10].map((m) => m * p).find((s) => s >= raw);
}

// One panel: axes, ticks, grid, and SERIES ([{ color, dash, points: [[clients, value]], labels }]).
function panel(x0, title, yLabel, levels, series) {
  const { top, height, width } = PANEL;
  const values = series.flatMap((s) => s.points.map((p) => p[1])).filter(Number.isFinite);
  const step = tickStep(Math.max(...values, 1e-9) * 1.1);
  const yMax = step * Math.ceil((Math.max(...values, 1e-9) * 1.1) / step);
  const lo = Math.log2(Math.min(...levels)), hi = Math.log2(Math.max(...levels));
  const px = (c) => x0 + (hi > lo ? ((Math.log2(c) - lo) / (hi - lo)) * (width - 40) + 20 : width / 2);
  const py = (v) => top + height - (v / yMax) * height;
  const out = [];
  out.push(`<text x="${x0 + width / 2}" y="${top - 12}" text-anchor="middle" font-size="15" font-weight="bold">` +
    `${esc(title)}</text>`);
  for (let v = 0; v <= yMax + step / 2; v += step) {
    const y = py(v).toFixed(1);
    out.push(`<line x1="${x0}" y1="${y}" x2="${x0 + width}" y2="${y}" stroke="#e3e3e3" stroke-width="1"/>`);
    out.push(`<text x="${x0 - 8}" y="${y}" dy="4" text-anchor="end" font-size="12">${num(v)}</text>`);
  }
  out.push(`<line x1="${x0}" y1="${top}" x2="${x0}" y2="${top + height}" stroke="#333" stroke-width="1"/>`);
  out.push(`<line x1="${x0}" y1="${top + height}" x2="${x0 + width}" y2="${top + height}" stroke="#333" stroke-width="1"/>`);
  for (const c of levels) {
    const x = px(c).toFixed(1);
    out.push(`<line x1="${x}" y1="${top + height}" x2="${x}" y2="${top + height + 5}" stroke="#333" stroke-width="1"/>`);
    out.push(`<text x="${x}" y="${top + height + 19}" text-anchor="middle" font-size="12">${c}</text>`);
  }
  out.push(`<text x="${x0 + width / 2}" y="${top + height + 40}" text-anchor="middle" font-size="13">` +
    'concurrent clients (log scale)</text>');
  const yMid = top + height / 2;
  out.push(`<text x="${x0 - 50}" y="${yMid}" text-anchor="middle" font-size="13" ` +
    `transform="rotate(-90 ${x0 - 50} ${yMid})">${esc(yLabel)}</text>`);
  for (const s of series) {
    const pts = s.points.filter((p) => Number.isFinite(p[1]));
    if (!pts.length) continue;
    const d = pts.map((p) => `${px(p[0]).toFixed(1)},${py(p[1]).toFixed(1)}`).join(' ');
    out.push(`<polyline points="${d}" fill="none" stroke="${s.color}" stroke-width="2.5"` +
      (s.dash ? ` stroke-dasharray="${s.dash}"` : '') + '/>');
    for (const p of pts) {
      const x = px(p[0]).toFixed(1), y = py(p[1]).toFixed(1);
      out.push(`<circle cx="${x}" cy="${y}" r="4" fill="${s.dash ? '#fff' : s.color}" stroke="${s.color}" ` +
        'stroke-width="2"/>');
      if (s.labels) {
        out.push(`<text x="${x}" y="${y}" dy="-9" text-anchor="middle" font-size="11" fill="${s.color}">` +
          `${p[1].toFixed(1)}</text>`);
      }
    }
  }
  return out.join('\n');
}

function legendEntry(x, y, color, dash, label) {
  return `<line x1="${x}" y1="${y}" x2="${x + 28}" y2="${y}" stroke="${color}" stroke-width="2.5"` +
    (dash ? ` stroke-dasharray="${dash}"` : '') + '/>' +
    `<text x="${x + 34}" y="${y}" dy="4" font-size="13">${esc(label)}</text>`;
}

// The SVG text of a sweep summary (the `mode: "sweep-summary"` object).
function sweepSvg(sum) {
  const m = sum.meta;
  const levels = m.levels;
  const color = (b) => COLORS[b.label] || '#555';
  const name = (b) => (b.label === 'qwen3d' ? 'qwen3d' : `qwen3d ${b.label}`);
  const at = (b, key) => b.rows.map((r) => [r.clients, r[key]]);
  const x1 = PANEL.left, x2 = PANEL.left + PANEL.width + PANEL.gap;
  const tps = sum.builds.map((b) => ({ color: color(b), points: at(b, 'tokens_per_s'), labels: true }));
  const itl = sum.builds.flatMap((b) => [
    { color: color(b), points: at(b, 'itl_p50_ms') },
    { color: color(b), points: at(b, 'itl_p95_ms'), dash: '7 5' },
  ]);
  const legend = [];
  let lx = PANEL.left;
  for (const b of sum.builds) {
    legend.push(legendEntry(lx, 30, color(b), null, name(b)));
    lx += 180;
  }
  legend.push(legendEntry(x2 + 40, 30, '#555', null, 'p50'));
  legend.push(legendEntry(x2 + 140, 30, '#555', '7 5', 'p95'));
  const perLevel = Array.isArray(m.requests_per_level) ? m.requests_per_level.join('/') : m.requests_per_level;
  const load = `distinct prompts of ${m.prompt_len} token ids, ${m.gen} generated tokens, greedy, streaming; ` +
    `${perLevel} requests per level` + (m.rounds > 1 ? `, median of ${m.rounds} rounds` : '');
  const machine = `${m.cpu}${m.cpu_features ? ` (${m.cpu_features})` : ''}, kernels ${m.kernels}, ` +
    `${m.threads} threads; model ${m.model_name}${m.geometry ? ` (${m.geometry})` : ''}`;
  const capY = PANEL.top + PANEL.height + 72;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" ` +
      'font-family="Helvetica, Arial, sans-serif" fill="#222">',
    `<title>qwen3d concurrency sweep: total tokens/s and inter-token latency against clients</title>`,
    `<rect x="0" y="0" width="${W}" height="${H}" fill="#fff"/>`,
    ...legend,
    panel(x1, 'total generated tokens/s', 'tokens/s (all clients)', levels, tps),
    panel(x2, 'inter-token latency', 'ms between tokens', levels, itl),
    `<text x="${W / 2}" y="${capY}" text-anchor="middle" font-size="12">${esc(machine)}</text>`,
    `<text x="${W / 2}" y="${capY + 18}" text-anchor="middle" font-size="12">${esc(load)}</text>`,
    '</svg>',
    '',
  ].join('\n');
}

module.exports = { sweepSvg };

if (require.main === module) {
  const [input, output] = process.argv.slice(2);
  if (!input || !output) {
    console.error('usage: node sweep-chart.js SWEEP.jsonl OUT.svg  (the output of http-load.js --sweep ... --json)');
    process.exit(2);
  }
  const sum = fs.readFileSync(input, 'utf8').split('\n').filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l)).reverse().find((x) => x.mode === 'sweep-summary');
  if (!sum) {
    console.error(`sweep-chart: ${input} holds no sweep-summary line`);
    process.exit(1);
  }
  fs.writeFileSync(output, sweepSvg(sum));
}
