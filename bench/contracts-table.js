// The table of bench/contracts.sh: per form, the medians over its rounds of
// `qwen3d bench --json` (decode after a 32-token prompt, TTFT of a 512-token
// prompt), the prepared weight bytes, the bench process's RSS and the
// daemon's RSS after one request; then int4-qdq over ort-int4, as the ratio
// of the medians and as the median (and range) of each round's own ratio:
// a round runs the two forms back to back, so its ratio is free of the
// machine's slower drifts (memory bandwidth moves by tens of percent here).
//   node bench/contracts-table.js RESULTS.jsonl PRESET THREADS KERNELS
'use strict';
const fs = require('fs');
const [file, preset, threads, kernels] = process.argv.slice(2);
const rows = fs.readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const n = s.length;
  return n ? (n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2) : NaN;
};
const forms = ['ort-int4', 'int4-qdq'];
const fig = {};
for (const f of forms) {
  const mine = rows.filter((r) => r.form === f);
  const p32 = mine.filter((r) => r.case === 'prompt' && r.prompt_len === 32);
  const p512 = mine.filter((r) => r.case === 'prompt' && r.prompt_len === 512);
  const serve = mine.find((r) => r.serve_rss);
  fig[f] = {
    rounds: p32.length,
    decode_ms: median(p32.map((r) => r.decode_ms_median)),
    ttft512_ms: median(p512.map((r) => r.ttft_ms)),
    prepared: p32.length ? p32[0].prepared_bytes : NaN,
    bench_rss: median(p512.map((r) => r.rss_bytes)),
    serve_rss: serve ? serve.serve_rss : [NaN, NaN, NaN],
  };
}
const mb = (b) => (b / 1e6).toFixed(1);
console.log(`preset ${preset}, ${threads} threads, kernels ${kernels}; medians of ${fig['ort-int4'].rounds} alternating rounds`);
console.log('');
console.log('| form | decode ms/token | TTFT-512 ms | prepared MB | bench RSS MB | serve RSS MB (anon + file) |');
console.log('| --- | ---: | ---: | ---: | ---: | ---: |');
for (const f of forms) {
  const x = fig[f];
  console.log(`| ${f} | ${x.decode_ms.toFixed(2)} | ${x.ttft512_ms.toFixed(1)} | ${mb(x.prepared)} | ${mb(x.bench_rss)} | ` +
    `${mb(x.serve_rss[0])} (${mb(x.serve_rss[1])} + ${mb(x.serve_rss[2])}) |`);
}
const a = fig['int4-qdq'], b = fig['ort-int4'];
console.log(`| int4-qdq / ort-int4 | ${(a.decode_ms / b.decode_ms).toFixed(3)} | ${(a.ttft512_ms / b.ttft512_ms).toFixed(3)} | ` +
  `${(a.prepared / b.prepared).toFixed(3)} | ${(a.bench_rss / b.bench_rss).toFixed(3)} | ${(a.serve_rss[0] / b.serve_rss[0]).toFixed(3)} |`);
const perRound = (key, len) => {
  const out = [];
  for (const r of new Set(rows.filter((x) => x.round).map((x) => x.round))) {
    const pick = (f) => rows.find((x) => x.form === f && x.round === r && x.case === 'prompt' && x.prompt_len === len);
    const q = pick('int4-qdq'), o = pick('ort-int4');
    if (q && o) out.push(q[key] / o[key]);
  }
  return out;
};
const dec = perRound('decode_ms_median', 32), ttft = perRound('ttft_ms', 512);
const span = (xs) => `${Math.min(...xs).toFixed(3)}-${Math.max(...xs).toFixed(3)}`;
console.log(`| int4-qdq / ort-int4, median of the ${dec.length} rounds' own ratios | ${median(dec).toFixed(3)} | ` +
  `${median(ttft).toFixed(3)} | | | |`);
console.log('');
console.log(`per-round ratios int4-qdq / ort-int4: decode ${span(dec)}, TTFT-512 ${span(ttft)}`);
