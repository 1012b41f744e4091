// What the HTTP benchmark drivers (http-load.js, prefix-bench.js) share, on
// Node's built-in modules alone: option parsing, starting and stopping a
// `qwen3d serve`, one streamed request with client-side timings, prompt ids,
// percentiles, and the machine and model facts that go beside every figure.
'use strict';
const http = require('http');
const fs = require('fs');
const { spawn, execFileSync } = require('child_process');

// ---- options ------------------------------------------------------------------

// The usage function of script NAME: prints MSG (if any) and TEXT, exits 2.
function makeUsage(name, text) {
  return (msg) => {
    if (msg) console.error(`${name}: ${msg}`);
    console.error(text);
    process.exit(2);
  };
}

// Parses ARGV by SPEC: { ints: {'--flag': key} (integers >= 0), pos: {...} (integers >= 1),
// strs: {...}, lists: {...} (comma-separated integers >= 1), flags: {...} (booleans) } into
// a copy of DEFAULTS; USAGE(msg) exits.
function parseOptions(argv, spec, defaults, usage) {
  const o = { ...defaults };
  const { pos = {}, strs = {}, lists = {}, flags = {} } = spec;
  const ints = { ...spec.ints, ...pos };
  const positive = /^[1-9]\d*$/;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--help') usage();
    if (flags[a]) {
      o[flags[a]] = true;
      continue;
    }
    if (!ints[a] && !strs[a] && !lists[a]) usage(`unknown argument '${a}'`);
    const v = argv[++i];
    if (v === undefined) usage(`${a} needs a value`);
    if (pos[a]) {
      if (!positive.test(v)) usage(`${a} must be a positive integer, not '${v}'`);
      o[pos[a]] = Number(v);
    } else if (ints[a]) {
      if (!/^\d+$/.test(v)) usage(`${a} must be a non-negative integer, not '${v}'`);
      o[ints[a]] = Number(v);
    } else if (lists[a]) {
      const parts = v.split(',');
      if (!parts.every((p) => positive.test(p))) usage(`${a} must be positive integers separated by commas, not '${v}'`);
      o[lists[a]] = parts.map(Number);
    } else {
      o[strs[a]] = v;
    }
  }
  return o;
}

// ---- statistics -------------------------------------------------------------------

// Nearest-rank percentile of a sorted array, as `qwen3d bench` computes it.
function pct(sorted, p) {
  if (!sorted.length) return NaN;
  const i = Math.floor(p * (sorted.length - 1) + 0.5);
  return sorted[Math.min(i, sorted.length - 1)];
}
const sorted = (a) => a.filter((x) => Number.isFinite(x)).sort((x, y) => x - y);
const median = (a) => pct(sorted(a), 0.5);
const fmt = (x, d = 2) => (Number.isFinite(x) ? x.toFixed(d) : '-');

// ---- prompts ------------------------------------------------------------------------

const XS_MASK = (1n << 64n) - 1n;
const ID_SPAN = 151643; // ids below the first special token of Qwen3's vocabulary

function xorshiftIds(n, seed, vocab) {
  let x = seed;
  const span = BigInt(vocab > ID_SPAN ? ID_SPAN : vocab);
  const ids = [];
  for (let i = 0; i < n; i++) {
    x ^= (x << 13n) & XS_MASK;
    x ^= x >> 7n;
    x ^= (x << 17n) & XS_MASK;
    ids.push(Number(x % span));
  }
  return ids;
}

// The prompt ids of `qwen3d bench` (server/cli/cmd_bench.c, prompt_ids()).
function benchPromptIds(n, vocab = 151936) {
  return xorshiftIds(n, 88172645463325252n, vocab);
}

// Prompt number INDEX of a run: N ids from a generator seeded by the index, its
// first id the index itself, so no two prompts of a run share even one
// leading token and a prefix cache finds nothing to reuse between them. The
// prefill work equals that of any other N ids.
function distinctPromptIds(n, index, vocab = 151936) {
  if (index >= ID_SPAN) throw new Error(`prompt index ${index} out of range`);
  const seed = (88172645463325252n ^ (BigInt(index + 1) * 0x9e3779b97f4a7c15n)) & XS_MASK;
  const ids = xorshiftIds(n, seed || 1n, vocab);
  if (n) ids[0] = index;
  return ids;
}

// ---- the daemon ---------------------------------------------------------------------

// Starts `BIN serve --model DIR` on a free port with EXTRA arguments; resolves
// once it has loaded, to { child, url, name, threads }.
function startDaemon(bin, model, extra) {
  const args = ['serve', '--model', model, '--host', '127.0.0.1', '--port', '0', ...extra];
  const child = spawn(bin, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  const kill = () => { try { child.kill('SIGKILL'); } catch (_) { /* gone */ } };
  process.on('exit', kill);
  return new Promise((resolve, reject) => {
    let log = '', port = 0;
    const timer = setTimeout(() => reject(new Error(`${bin} did not load within 300 s:\n${log.slice(-800)}`)), 300000);
    child.stderr.on('data', (d) => {
      log += d;
      if (log.length > 65536) log = log.slice(-32768);
      const m = /event=listening host=\S+ port=(\d+)/.exec(log);
      if (m) port = Number(m[1]);
      const loaded = /event=model_loaded .*?name=(\S+).*?threads=(\d+)/.exec(log);
      if (port && loaded) {
        clearTimeout(timer);
        child.stderr.removeAllListeners('data');
        child.stderr.resume();
        resolve({ child, url: `http://127.0.0.1:${port}`, name: loaded[1], threads: Number(loaded[2]), bin });
      }
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${bin} exited (${code}) while starting:\n${log.slice(-800)}`));
    });
  });
}

function stopDaemon(d) {
  if (!d) return Promise.resolve();
  return new Promise((resolve) => {
    d.child.removeAllListeners('exit');
    if (d.child.exitCode !== null || d.child.signalCode !== null) return resolve();
    d.child.on('exit', () => resolve());
    d.child.kill('SIGTERM');
  });
}

// True when `BIN serve --help` lists OPTION (older builds lack some).
function serveHasOption(bin, option) {
  let text = '';
  try {
    text = execFileSync(bin, ['serve', '--help'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (e) {
    text = `${e.stdout || ''}${e.stderr || ''}`;
  }
  return text.includes(option);
}

// ---- one streamed request -------------------------------------------------------------

const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity });

// Sends one streaming request to PATH (/v1/completions or /v1/chat/completions)
// and resolves to the client-side view: ttft_ms (send to first text event),
// gaps (ms between text events), events, text (all text received; chat's
// reasoning_content apart), usage and timings from the final chunk, and the
// decode rate over the span the daemon's decode_tokens_per_s covers.
function streamRequest(base, path, body) {
  const url = new URL(path, base);
  const payload = Buffer.from(JSON.stringify(body));
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const times = [];
    let buf = '', usage = null, timings = null, finish = null, err = null, tEnd = 0, text = '', reasoning = '';
    const req = http.request({ host: url.hostname, port: url.port, path: url.pathname, method: 'POST', agent,
      headers: { 'Content-Type': 'application/json', 'Content-Length': payload.length } }, (res) => {
      if (res.statusCode !== 200) {
        let t = '';
        res.on('data', (d) => { t += d; });
        res.on('end', () => reject(new Error(`status ${res.statusCode}: ${t.slice(0, 300)}`)));
        return;
      }
      res.setEncoding('utf8');
      res.on('data', (s) => {
        const now = performance.now();
        buf += s;
        let k;
        while ((k = buf.indexOf('\n\n')) >= 0) {
          const ev = buf.slice(0, k);
          buf = buf.slice(k + 2);
          if (ev === 'data: [DONE]') continue;
          const j = JSON.parse(ev.slice(6));
          if (j.error) { err = j.error; continue; }
          if (j.usage) usage = j.usage;
          if (j.timings) timings = j.timings;
          const c = j.choices && j.choices[0];
          if (!c) continue;
          const piece = c.delta ? (c.delta.content || '') : (c.text || '');
          const thought = (c.delta && c.delta.reasoning_content) || '';
          if (piece || thought) {
            times.push(now);
            text += piece;
            reasoning += thought;
          }
          if (c.finish_reason) {
            finish = c.finish_reason;
            tEnd = now;
          }
        }
      });
      res.on('end', () => {
        if (err) return reject(new Error(`error event: ${JSON.stringify(err)}`));
        if (!usage) return reject(new Error('the stream ended without usage'));
        const gaps = [];
        for (let i = 1; i < times.length; i++) gaps.push(times[i] - times[i - 1]);
        const span = (tEnd - times[0]) / 1000;
        resolve({ ttft_ms: times.length ? times[0] - t0 : NaN, gaps, events: times.length, text, reasoning,
          usage, timings, finish, total_ms: performance.now() - t0,
          decode_tokens_per_s: usage.completion_tokens > 1 && span > 0 ? (usage.completion_tokens - 1) / span : NaN });
      });
    });
    req.on('error', reject);
    req.setTimeout(600000, () => req.destroy(new Error('timed out')));
    req.end(payload);
  });
}

// usage.prompt_tokens_details.cached_tokens, or null where the daemon does not report it.
function cachedTokens(usage) {
  const d = usage && usage.prompt_tokens_details;
  return d && Number.isFinite(d.cached_tokens) ? d.cached_tokens : null;
}

// ---- the machine and the model ------------------------------------------------------------

// The facts every figure needs beside it: CPU model, the kernel level BIN runs
// (from `BIN inspect`, which honours QWEN3D_KERNELS as the daemon does), the
// CPU's vector features, and the model's geometry.
function machineInfo(bin, model) {
  const info = { cpu: 'unknown CPU', kernels: 'unknown', cpu_features: '', geometry: '' };
  try {
    const m = /^model name\s*:\s*(.+)$/m.exec(fs.readFileSync('/proc/cpuinfo', 'utf8'));
    if (m) info.cpu = m[1].trim();
  } catch (_) { /* not Linux */ }
  if (!bin || !model) return info;
  try {
    const text = execFileSync(bin, ['inspect', '--model', model], { encoding: 'utf8', maxBuffer: 16 << 20,
      stdio: ['ignore', 'pipe', 'pipe'] });
    const k = /^kernels (\S+)(?: \(cpu: ([^)]*)\))?/m.exec(text);
    if (k) {
      info.kernels = k[1];
      info.cpu_features = k[2] || '';
    }
    const g = /^geometry\s+layers (\d+), hidden (\d+)/m.exec(text);
    if (g) info.geometry = `${g[1]} layers, hidden ${g[2]}`;
  } catch (e) {
    info.kernels = `unknown (${bin} inspect failed)`;
  }
  return info;
}

module.exports = {
  makeUsage, parseOptions, pct, sorted, median, fmt, benchPromptIds, distinctPromptIds, startDaemon, stopDaemon, serveHasOption,
  streamRequest, cachedTokens, machineInfo,
};
