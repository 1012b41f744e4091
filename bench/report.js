#!/usr/bin/env node
// The kernel figures in one run, as markdown tables: for each model and
// thread count, qwen3d against ONNX Runtime side by side (compare-ort.js:
// alternating runs, medians) for decode (prompt 32, 128 generated) and time
// to first token (prompt 512), the share of the measured memory bandwidth
// that decode streams weights at; decode at long contexts with each KV type
// of qwen3d and ONNX Runtime's, as rates and as shares of the same process's
// short-context rate; load to ready with the prepared-weights cache cold and
// warm; prepared weight bytes over the serialized INT4 weights and scales.
// The machine's CPU, kernel level and bandwidth probe head the tables, the
// command that made them ends the output. Never asserts on speed.
//
// Usage (from a build tree, NODE_PATH reaching onnxruntime-node):
//   node ../bench/report.js --qwen3d ./qwen3d --bw-probe bench/bw_probe \
//       --case m06:1 --case m06:2 --case m4b:2 [--runs 3] [--repeat 3] \
//       [--pairs 5] [--serve-model DIR ...] [--serve-runs 5] [--serve-cold]
//       [--ort-kv contract|share] [--ort-logits all|last]
//       [--contexts 1024,4096|none] [--context-steps 16] [--kv-types f32,f16]
//       [--load-runs 3] [--cache-root DIR]
// A case is MODEL_DIR:THREADS. --serve-model (a folder with a tokenizer;
// repeatable) adds load-to-ready: `qwen3d serve` started and /health polled
// until 200 (ready.js); --serve-cold pairs each start with one after the
// page cache is dropped (needs root).
// --contexts and --kv-types go to the decode comparison (compare-ort.js
// --contexts, --kv-type): every run measures the short-context decode and
// the context cases once per qwen3d KV type and once for ONNX Runtime.
// --load-runs pairs of `qwen3d generate --max-tokens 1` per case, each pair
// on a fresh --prepared-cache folder made under --cache-root (default: the
// system's temporary folder): cold (nothing cached: packed, written,
// fsynced), then warm (the file just written, mapped and verified), the
// load_ms each reports (bench/prepcache-load.sh's method); 0 leaves them out.
// --ort-kv and --ort-logits choose ONNX Runtime's configuration (see
// ort-bench.js); the sentences under the table say what work each runtime
// does in the figures above it.
//
// Bandwidth efficiency = prepared weight bytes per decoded token / median
// decode step / bw_probe's best sequential read rate at the same thread count
// (1 GiB buffer, huge pages requested; the fastest of its seq, seq+pf and
// seq+l2pf patterns, so the share is against the best stream the probe
// finds, prefetching as the GEMV does included). On shared machines that rate drifts
// by tens of percent within minutes, so a probe taken at another time says
// little: the share is measured in --pairs rounds of its own, each a
// `qwen3d bench` decode run (prompt 32, 128 generated) between two probes,
// its step set against the mean of those two probes; the table gives the
// median share over the rounds and their range. The step also reads the KV
// cache and the embedding row, so this slightly understates the weight
// stream's rate.
'use strict';

const { spawnSync } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { ortConditions } = require('./ort-notes.js');
const { readyRows, tableHead: readyHead, readyNote, median, cpuName, kernelLevel } = require('./ready.js');

function fail(msg) {
  process.stderr.write(`report: ${msg}\n`);
  process.exit(1);
}

const o = { cases: [], serveModels: [], serveCold: false, runs: '3', repeat: '3', pairs: 5, serveRuns: 5, ortKv: 'contract', ortLogits: 'all',
  contexts: '1024,4096', contextSteps: '16', kvTypes: 'f32,f16', loadRuns: 3, cacheRoot: os.tmpdir() };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  const v = () => (i + 1 < argv.length ? argv[++i] : fail(`${argv[i]} needs a value`));
  switch (argv[i]) {
    case '--qwen3d': o.bin = v(); break;
    case '--bw-probe': o.probe = v(); break;
    case '--case': {
      const c = v(), k = c.lastIndexOf(':');
      if (k < 1 || !/^\d+$/.test(c.slice(k + 1))) fail(`--case wants MODEL_DIR:THREADS, not "${c}"`);
      o.cases.push({ model: c.slice(0, k), threads: c.slice(k + 1) });
      break;
    }
    case '--runs': o.runs = v(); break;
    case '--repeat': o.repeat = v(); break;
    case '--pairs': o.pairs = Number(v()); break;
    case '--serve-model': o.serveModels.push(v()); break;
    case '--serve-cold': o.serveCold = true; break;
    case '--serve-runs': o.serveRuns = Number(v()); break;
    case '--ort-kv': o.ortKv = v(); break;
    case '--ort-logits': o.ortLogits = v(); break;
    case '--contexts': o.contexts = v(); break;
    case '--context-steps': o.contextSteps = v(); break;
    case '--kv-types': o.kvTypes = v(); break;
    case '--load-runs': o.loadRuns = Number(v()); break;
    case '--cache-root': o.cacheRoot = v(); break;
    default: fail(`unknown argument "${argv[i]}"`);
  }
}
if (!o.bin || !o.probe || !o.cases.length) fail('--qwen3d BIN, --bw-probe BIN and at least one --case are required');
if (!Number.isInteger(o.pairs) || o.pairs < 1) fail('--pairs wants a whole number of rounds, at least 1');
if (o.serveCold && !o.serveModels.length) fail('--serve-cold wants a --serve-model');
if (!Number.isInteger(o.serveRuns) || o.serveRuns < 1) fail('--serve-runs wants a whole number, at least 1');
if (!Number.isInteger(o.loadRuns) || o.loadRuns < 0) fail('--load-runs wants a whole number of cold/warm pairs, 0 or more');
if (o.contexts !== 'none' && !/^\d+(,\d+)*$/.test(o.contexts)) fail(`--contexts wants a list of lengths or none, not "${o.contexts}"`);
const kvTypes = o.kvTypes.split(',');
// The short case (prompt 32, 128 generated) decodes at contexts 32 to 160.
const SHORT_MEAN_CONTEXT = 96;

function run(cmd, args) {
  process.stderr.write(`report: ${path.basename(cmd)} ${args.join(' ')}\n`);
  const r = spawnSync(cmd, args, { encoding: 'utf8', maxBuffer: 1 << 26 });
  if (r.status !== 0) fail(`${cmd} ${args.join(' ')} failed: ${(r.stderr || '').trim().split('\n').pop()}`);
  return r.stdout;
}

// bw_probe's best sequential read rate at THREADS threads: the largest of the
// seq, seq+pf and seq+l2pf columns of its "threads seq seq+pf seq+l2pf
// 4streams memset" row.
function probe(threads) {
  const out = run(o.probe, ['--mib', '1024', '--threads', threads, '--huge', '1']);
  for (const line of out.split('\n')) {
    const f = line.trim().split(/\s+/);
    const seq = f.slice(1, 4).map(Number);
    if (f.length >= 6 && f[0] === String(threads) && seq.every((x) => !Number.isNaN(x))) return Math.max(...seq);
  }
  return fail(`bw_probe printed no rate for ${threads} thread(s)`);
}

// compare-ort.js on one prompt case (and the context cases of CONTEXTS, with
// the qwen3d KV types KV): its rows by case name ("prompt 32", "context 4096").
function compare(model, threads, prompt, gen, contexts = 'none', kv = 'f32') {
  const out = run(process.execPath, [path.join(__dirname, 'compare-ort.js'), '--qwen3d', o.bin, '--model', model,
    '--threads', threads, '--runs', o.runs, '--repeat', o.repeat, '--prompt-len', String(prompt), '--gen', String(gen),
    '--contexts', contexts, '--context-steps', o.contextSteps, '--kv-type', kv, '--ort-kv', o.ortKv,
    '--ort-logits', o.ortLogits, '--json']);
  const rows = Object.fromEntries(out.trim().split('\n').filter(Boolean).map((l) => JSON.parse(l)).map((r) => [r.case, r]));
  if (!rows[`prompt ${prompt}`]) fail(`compare-ort.js gave no "prompt ${prompt}" row for ${model}`);
  return rows;
}

// The share of the probed bandwidth that decode streams weights at, in
// o.pairs rounds of probe / decode run / probe: per round, prepared bytes /
// median step / mean of the two probes around it (each probe serves the
// rounds on both sides of it).
function efficiency(model, threads) {
  const probes = [probe(threads)], rounds = [];
  for (let i = 0; i < o.pairs; i++) {
    const out = run(o.bin, ['bench', '--json', '--model', model, '--threads', threads, '--prompt-len', '32', '--gen', '128',
      '--contexts', 'none', '--repeat', o.repeat]);
    const c = out.trim().split('\n').filter(Boolean).map((l) => JSON.parse(l)).find((r) => r.case === 'prompt');
    if (!c || !(c.decode_ms_median > 0) || !(c.prepared_bytes > 0)) fail(`qwen3d bench gave no decode step for ${model}`);
    probes.push(probe(threads));
    const gbs = c.prepared_bytes / (c.decode_ms_median / 1000) / 1e9;
    rounds.push({ gbs, share: gbs / ((probes[i] + probes[i + 1]) / 2) });
  }
  const shares = rounds.map((r) => r.share);
  return { share: median(shares), lo: Math.min(...shares), hi: Math.max(...shares), gbs: median(rounds.map((r) => r.gbs)),
    probe: median(probes), probes, all: shares };
}

// Load to ready with the prepared-weights cache cold and warm: o.loadRuns
// pairs of `qwen3d generate --max-tokens 1` on a fresh cache folder, the
// first packing and writing the file, the second mapping it. Medians of the
// load_ms each reports, and the cache states they report (written, hit).
function coldWarm(model, threads) {
  const cold = [], warm = [], states = new Set();
  const once = (dir, into) => {
    const j = JSON.parse(run(o.bin, ['generate', '--model', model, '--prompt-ids', '1,2,3', '--max-tokens', '1',
      '--threads', threads, '--json', '--prepared-cache', dir]));
    into.push(j.timings.load_ms);
    return j.prepared_cache;
  };
  for (let i = 0; i < o.loadRuns; i++) {
    // removed also when a failed run ends the script (fail() exits)
    const dir = fs.mkdtempSync(path.join(o.cacheRoot, 'qwen3d-report-cache-'));
    const remove = () => fs.rmSync(dir, { recursive: true, force: true });
    process.on('exit', remove);
    states.add(`cold ${once(dir, cold)}`);
    states.add(`warm ${once(dir, warm)}`);
    remove();
    process.off('exit', remove);
  }
  return { cold: median(cold), warm: median(warm), states: [...states] };
}

// The machine beside the figures: CPU model, the kernel level `inspect`
// names (it honours QWEN3D_KERNELS as the other commands do) and the
// kernel names of the MatMulNBits nodes.
// INFO: the model's `inspect --json`.
function machine(model, info) {
  const cpu = cpuName();
  const level = kernelLevel(run(o.bin, ['inspect', '--model', model]));
  const nodes = info.nodes || [];
  const mm = [...new Set(nodes.filter((n) => n.op === 'MatMulNBits').flatMap((n) => n.kernel.match(/mmnb[\w.]*/g) || [n.kernel]))];
  return [`Machine: ${cpu}, ${os.cpus().length} logical CPUs, Linux ${os.release()}; load average ` +
    `${os.loadavg().map((x) => x.toFixed(1)).join(' / ')} (1 / 5 / 15 min) when the runs ended.`,
    // inspect names a QWEN3D_KERNELS override itself; older builds did not.
    `Kernel level (qwen3d inspect): ${level}${process.env.QWEN3D_KERNELS && !level.includes('QWEN3D_KERNELS')
      ? ` (QWEN3D_KERNELS=${process.env.QWEN3D_KERNELS})` : ''}.`,
    `MatMulNBits kernels: ${mm.join('; ') || '-'}.`];
}

// The command line that produced the output, to run again as it stands.
function commandLine() {
  const q = (a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : `'${a.replace(/'/g, "'\\''")}'`);
  const env = process.env.NODE_PATH ? `NODE_PATH=${q(process.env.NODE_PATH)} ` : '';
  const kernels = process.env.QWEN3D_KERNELS ? `QWEN3D_KERNELS=${q(process.env.QWEN3D_KERNELS)} ` : '';
  return `${kernels}${env}node ${[path.relative(process.cwd(), process.argv[1]), ...argv].map(q).join(' ')}`;
}

// Serialized INT4 weights, scales and zero points of the MatMulNBits nodes, from inspect --json.
function serializedInt4(j) {
  const b = j.weight_bytes || {};
  const q = (b.int4_weights || 0) + (b.scales || 0) + (b.zero_points || 0);
  return q > 0 ? q : null;
}

// The cache bytes one position adds, keys and values of every layer: fp32 or
// fp16 elements, or q8 rows of head_size codes and one fp32 scale.
function kvBytesPerPosition(g, kv) {
  const row = kv === 'q8' ? g.head_size + 4 : g.head_size * (kv === 'f16' ? 2 : 4);
  return 2 * g.layers * g.kv_heads * row;
}

// The share of the short case's rate a decode step at context CTX keeps
// when the weights and the cache stream at one rate: the bytes a short step
// reads (prepared weights, and the cache at its mean context SHORT_CTX) over
// those of a step at CTX. Where the measured share meets it, the cache
// streams as fast as the weights do; no pass that reads the whole cache
// does better.
function streamCeiling(j, kv, ctx, shortCtx) {
  const g = j.geometry || {}, w = (j.weight_bytes || {}).prepared;
  if (!w || !g.layers || !g.kv_heads || !g.head_size) return null;
  const b = kvBytesPerPosition(g, kv);
  return (w + shortCtx * b) / (w + Number(ctx) * b);
}

async function main() {
  const f = (x, n = 1) => (x === null || x === undefined || Number.isNaN(x) ? '-' : x.toFixed(n));
  const pct = (x) => (x === null || x === undefined || Number.isNaN(x) ? '-' : f(100 * x, 0) + '%');
  const contexts = o.contexts === 'none' ? [] : o.contexts.split(',');
  const speed = ['| model | threads | decode tok/s qwen3d / ORT (x) | decode share of probe, median (range) | weight stream GB/s, median | probe GB/s, median | TTFT 512 ms qwen3d / ORT (ratio) |',
    '| --- | --- | --- | --- | --- | --- | --- |'];
  const head = ['model', 'threads', 'runtime, KV cache', 'short (prompt 32) tok/s', ...contexts.map((c) => `context ${c} tok/s (of short)`)];
  const longctx = [`| ${head.join(' | ')} |`, `|${head.map(() => ' --- |').join('')}`];
  const load = ['| model | threads | load to ready ms, cold / warm (median) | cache states | load ms in the decode runs, qwen3d / ORT | prepared / serialized INT4 |',
    '| --- | --- | --- | --- | --- | --- |'];
  const detail = [], probes = {};
  let firstInfo = null; // the machine line reads the first case's inspect
  for (const c of o.cases) {
    const name = path.basename(c.model);
    const dr = compare(c.model, c.threads, 32, 128, o.contexts, o.kvTypes), d = dr['prompt 32'];
    const e = efficiency(c.model, c.threads);
    const t = compare(c.model, c.threads, 512, 2)['prompt 512'];
    const lw = o.loadRuns ? coldWarm(c.model, c.threads) : null;
    const bytes = d.qwen3d_prepared_bytes;
    const info = JSON.parse(run(o.bin, ['inspect', '--model', c.model, '--json']));
    firstInfo = firstInfo || info;
    const ser = serializedInt4(info);
    (probes[c.threads] = probes[c.threads] || []).push(...e.probes);
    speed.push(`| ${name} | ${c.threads} | ${f(d.qwen3d_decode_tokens_per_s)} / ${f(d.onnxruntime_decode_tokens_per_s)} (${f(d.decode_speedup, 2)}x)` +
      ` | ${pct(e.share)} (${pct(e.lo)}-${pct(e.hi)}) | ${f(e.gbs, 2)} | ${f(e.probe, 2)}` +
      ` | ${f(t.qwen3d_ttft_ms, 0)} / ${f(t.onnxruntime_ttft_ms, 0)} (${f(t.qwen3d_ttft_ms / t.onnxruntime_ttft_ms, 2)}) |`);
    // One row per qwen3d KV type and one for ONNX Runtime, each context's rate
    // beside its share of the same processes' short-context rate.
    const runtimes = [...kvTypes.map((k, i) => ({ label: `qwen3d, ${k}`, key: i ? `qwen3d_${k}` : 'qwen3d', kv: k })),
      { label: `ONNX Runtime, ${o.ortKv}`, key: 'onnxruntime' }];
    for (const r of runtimes) {
      const short = d[`${r.key}_decode_tokens_per_s`];
      const cells = contexts.map((ctx) => {
        const x = (dr[`context ${ctx}`] || {})[`${r.key}_decode_tokens_per_s`];
        const cap = r.kv ? streamCeiling(info, r.kv, ctx, SHORT_MEAN_CONTEXT) : null;
        return `${f(x)} (${pct(x / short)}${cap === null ? '' : ` of ${pct(cap)}`})`;
      });
      longctx.push(`| ${name} | ${c.threads} | ${r.label} | ${f(short)} |${cells.map((x) => ` ${x} |`).join('')}`);
    }
    load.push(`| ${name} | ${c.threads} | ${lw ? `${f(lw.cold, 0)} / ${f(lw.warm, 0)}` : '-'} | ${lw ? lw.states.join(', ') : '-'}` +
      ` | ${f(d.qwen3d_load_ms, 0)} / ${f(d.onnxruntime_load_ms, 0)}` +
      ` | ${bytes && ser ? (bytes / ser).toFixed(3) : '-'} (${bytes || '-'} / ${ser || '-'}) |`);
    detail.push(`${name} at ${c.threads} thread(s), share per round: ${e.all.map(pct).join(', ')}`);
  }
  const lines = machine(o.cases[0].model, firstInfo);
  lines.push('Bandwidth probe (bw_probe, the best of its sequential reads of 1 GiB, huge pages requested), median (range) of the ' +
    'probes taken in this run: ' + Object.entries(probes).map(([th, p]) =>
    `${th} thread(s) ${f(median(p), 2)} GB/s (${f(Math.min(...p), 2)}-${f(Math.max(...p), 2)}, ${p.length} probes)`).join('; ') + '.');
  lines.push('', '### Decode and time to first token', '', ...speed, '');
  lines.push('### Decode at long contexts', '', ...longctx, '');
  lines.push(`Short: the decode rate of the prompt-32 case (128 generated) in the same processes; context C: the median of ${o.contextSteps} ` +
    'decode steps after a synthetic context of C positions. Percentages: the context rate over the short rate of the same runtime and KV cache ' +
    '(the goal: at least 50% at context 4096, 2 threads). "Of N%": the share if the cache streamed at the rate the weights ' +
    `do, the ceiling of a cache read in full: the bytes a short step reads (prepared weights, the cache at its mean context of ${SHORT_MEAN_CONTEXT}) over those ` +
    'of a step at context C, from the model geometry `inspect` reports.', '');
  lines.push('### Load', '', ...load, '');
  lines.push(o.loadRuns ? `Load to ready: the load_ms of \`qwen3d generate --max-tokens 1\` (graph, plan, and packing or the cache's checks), ` +
    `${o.loadRuns} pair(s) per case on a fresh --prepared-cache folder under ${o.cacheRoot}: cold = the folder empty (packed, ` +
    'written and fsynced), warm = the next start on the file just written (mapped, checksums verified). The page cache was ' +
    'not dropped: the model files are in it from the runs before (a restart, not a boot), and the cache file is in it for warm. ' +
    'Load ms in the decode runs: qwen3d bench with its default prepared cache, and ONNX Runtime\'s session creation.'
    : 'Load to ready cold and warm not measured (--load-runs 0).', '');
  lines.push(...ortConditions(o.ortKv, o.ortLogits));
  lines.push('');
  lines.push(...detail);
  if (o.serveModels.length) {
    const rows = await readyRows(o.bin, o.serveModels, o.serveRuns, '2', o.serveCold, 18700);
    lines.push('', '### Serve load to ready', '', ...readyHead, ...rows, '', readyNote(o.serveRuns, '2', o.serveCold));
  }
  lines.push('');
  lines.push(`runs ${o.runs} alternating x ${o.repeat} repeats per case (compare-ort.js), medians; ` +
    `bandwidth share over ${o.pairs} rounds of probe / decode / probe`);
  lines.push('', 'Command:', '', '    ' + commandLine());
  process.stdout.write(lines.join('\n') + '\n');
}

main().catch((e) => fail(e && e.message ? e.message : e));
