// A bounded soak of a running `qwen3d serve` with injected faults, loopback
// only. A fixed number of client loops send, for a fixed time, a random mix
// of: greedy streamed and plain generations, some with n = 2 choices (each
// compared with the output the same request got alone), streams the client abandons after a few events,
// plain requests abandoned before their answer, slowly read streams,
// malformed and refused requests (bad JSON, wrong fields, wrong method or
// path, bodies and headers over the limits), raw connections that send half
// a request or garbage and stop, and scrapes; the daemon runs with a small
// queue so some requests meet a full one. A warm-up round of the same mix
// comes first.
//
// Then it checks: the daemon is alive, no session is left and nothing
// waits, its anonymous resident memory is within 5% of the level after
// warm-up (see rssBytes), every completed greedy output equals the
// single-request one, no 5xx other than 503 queue_full, no request timed
// out, and qwen3d_requests_total equals, per endpoint and code, what the
// clients counted (see the note on abandoned requests in main). It prints a report and
// exits 0 when all of that holds, 1 otherwise.
//
// usage: node soak.js BASE_URL PID [SECONDS [CLIENTS]]
//   The daemon must run with --max-body 16384 --max-header-bytes 4096
//   (the oversized requests are sized from those) and a --ctx of at least 256.
//   SOAK_SEED seeds the random mix (default 1); SOAK_RSS=0 skips the memory
//   check (sanitizer builds, whose allocator holds on to freed memory).
//   SOAK_PREFIX_BYTES: the daemon's --prefix-cache-bytes; then every scrape
//   must show qwen3d_prefix_cache_bytes within it, and the run must have
//   reused prefixes (the prompts share a preamble of about 20 tokens).
'use strict';
const fs = require('fs');
const http = require('http');
const net = require('net');
const path = require('path');
const { parseMetrics } = require(path.join(__dirname, '..', 'serve', 'metrics-parse.js'));

const [base, pidArg, secArg, clientArg] = process.argv.slice(2);
const PID = Number(pidArg);
const SECONDS = Number(secArg || 60);
const CLIENTS = Number(clientArg || 6);
const MAX_BODY = 16384, MAX_HEADER = 4096, GREEDY_TOKENS = 16, LONG_TOKENS = 200;
const REQUEST_TIMEOUT_MS = 60000;
const url = new URL(base);

// A small deterministic generator (xorshift32), so a failing mix can be rerun.
let seed = Number(process.env.SOAK_SEED || 1) >>> 0 || 1;
function rand() {
  seed ^= seed << 13; seed >>>= 0;
  seed ^= seed >>> 17;
  seed ^= seed << 5; seed >>>= 0;
  return seed / 4294967296;
}
const pick = (a) => a[Math.floor(rand() * a.length)];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The bound of the whole run, whatever happens.
const hardStop = setTimeout(() => {
  console.log('FAIL: the soak did not finish in time');
  process.exit(1);
}, (SECONDS + 180) * 1000);
hardStop.unref();

// ---- counters ---------------------------------------------------------------
const count = {
  sent: 0, completed_greedy: 0, completed_choices: 0, disconnects: 0, abandoned_plain: 0, slow_readers: 0, malformed: 0,
  oversized: 0, raw_connections: 0, queue_full: 0, server_errors: 0, timeouts: 0, mismatched: 0,
  unexpected: 0, scrapes: 0,
};
const expected = new Map(); // "endpoint code" -> requests the server must have counted
const problems = [];
function expect(endpoint, code) {
  const k = `${endpoint} ${code}`;
  expected.set(k, (expected.get(k) || 0) + 1);
}
function problem(msg) {
  if (problems.length < 20) problems.push(msg);
}

// ---- HTTP ---------------------------------------------------------------------
const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity });

// One request. opts: method, headers, body (Buffer|string), onData(res, chunk)
// for streamed reading, abortAfterEvents, abortAfterMs (before any answer),
// slow (pause between reads). Resolves to { status, body, aborted, error }.
function request(p, opts = {}) {
  return new Promise((resolve) => {
    const body = opts.body === undefined ? null : Buffer.from(opts.body);
    const headers = { ...(opts.headers || {}) };
    if (body) {
      headers['Content-Type'] = 'application/json';
      headers['Content-Length'] = body.length;
    }
    const out = { status: 0, body: '', aborted: false, error: null };
    let settled = false, events = 0, timer = null, abortTimer = null;
    const finish = () => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      clearTimeout(abortTimer);
      resolve(out);
    };
    const req = http.request({ host: url.hostname, port: url.port, path: p, method: opts.method || 'POST', headers, agent });
    timer = setTimeout(() => {
      out.error = 'timeout';
      req.destroy();
      finish();
    }, REQUEST_TIMEOUT_MS);
    if (opts.abortAfterMs !== undefined)
      abortTimer = setTimeout(() => {
        if (out.status) return;
        out.aborted = true;
        req.destroy();
        finish();
      }, opts.abortAfterMs);
    req.on('response', (res) => {
      out.status = res.statusCode;
      res.setEncoding('utf8');
      res.on('data', (d) => {
        out.body += d;
        events += (d.match(/\n\n/g) || []).length;
        if (opts.abortAfterEvents && events >= opts.abortAfterEvents && res.statusCode === 200) {
          out.aborted = true;
          req.destroy();
          finish();
          return;
        }
        if (opts.slow) {
          res.pause();
          setTimeout(() => res.resume(), 20 + Math.floor(rand() * 150));
        }
      });
      res.on('end', finish);
      res.on('error', (e) => {
        out.error = out.error || e.code || e.message;
        finish();
      });
      res.on('close', finish);
    });
    req.on('error', (e) => {
      out.error = out.error || e.code || e.message;
      finish();
    });
    if (body) req.end(body);
    else req.end();
  });
}

// Text of a streamed generation: completions' text, or chat's content and
// reasoning; null when the framing is wrong or the stream has no [DONE].
// Each choice's text (by index) of a stream, or null when it is malformed.
function streamText(raw, chat) {
  const events = raw.split('\n\n');
  if (events.pop() !== '') return null;
  if (events[events.length - 1] !== 'data: [DONE]') return null;
  const got = [];
  for (const e of events.slice(0, -1)) {
    if (!e.startsWith('data: ') || e.includes('\n')) return null;
    const j = JSON.parse(e.slice(6));
    if (j.error) return null;
    const c = j.choices && j.choices[0];
    if (!c) continue;
    const g = got[c.index] || (got[c.index] = { content: '', reasoning: '' });
    if (chat) {
      g.content += (c.delta && c.delta.content) || '';
      g.reasoning += (c.delta && c.delta.reasoning_content) || '';
    } else {
      g.content += c.text || '';
    }
  }
  return Array.from(got, (g) => (g ? JSON.stringify([g.content, g.reasoning]) : null));
}

// Each choice's text of a plain body.
function plainText(body, chat) {
  return JSON.parse(body).choices.map((c) =>
    JSON.stringify(chat ? [c.message.content || '', c.message.reasoning_content || ''] : [c.text, '']));
}

// ---- the requests ---------------------------------------------------------------
const subjects = ['the sea', 'a clock', 'winter', 'a library', 'trains', 'bread'];
// A shared preamble: the prompts' common prefix the prefix cache reuses.
const PREAMBLE = 'Answer as a museum guide would, in plain words and in one short paragraph, for a curious visitor.';
const prompts = subjects.map((s, i) => {
  if (i % 2 === 0) return { path: '/v1/completions', chat: false, body: { prompt: `${PREAMBLE} A few words about ${s}:` } };
  return {
    path: '/v1/chat/completions', chat: true,
    body: {
      messages: [{ role: 'system', content: PREAMBLE }, { role: 'user', content: `Tell me about ${s}.` }],
      chat_template_kwargs: { enable_thinking: i % 4 === 1 },
    },
  };
});
const reference = [];

const malformedBodies = [
  ['/v1/completions', '{"prompt": "unterminated'],
  ['/v1/completions', ''],
  ['/v1/completions', '[1, 2, 3]'],
  ['/v1/completions', '{"prompt": 42}'],
  ['/v1/completions', '{"prompt": "x", "max_tokens": -5}'],
  ['/v1/completions', '{"prompt": "x", "temperature": "hot"}'],
  ['/v1/completions', '{"prompt": "x", "n": 0}'],
  ['/v1/completions', '{"prompt": [1, -2, 3]}'],
  ['/v1/completions', '{"prompt": "x", "stop": [1]}'],
  ['/v1/completions', '{"prompt": "x", "max_tokens": 100000}'],
  ['/v1/completions', Buffer.from([0x7b, 0x22, 0x70, 0x22, 0x3a, 0x22, 0xff, 0xfe, 0x22, 0x7d])],
  ['/v1/chat/completions', '{"messages": []}'],
  ['/v1/chat/completions', '{"messages": [{"role": "wizard", "content": "x"}]}'],
  ['/v1/chat/completions', '{"messages": [{"role": "user"}]}'],
  ['/v1/chat/completions', '{"messages": "hello"}'],
  ['/v1/chat/completions', '{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}'],
];

function endpointOf(p) {
  return p === '/v1/completions' || p === '/v1/chat/completions' || p === '/v1/models' || p === '/health' ||
    p === '/metrics' ? p : 'other';
}

// Records a generation's answer: a 200 (checked by the caller) or a full queue.
function answered(p, r, what) {
  if (r.error === 'timeout') {
    count.timeouts++;
    problem(`${what}: timed out`);
    return false;
  }
  if (r.status === 503 && r.body.includes('"queue_full"')) {
    count.queue_full++;
    expect(endpointOf(p), 503);
    r.backoff = true;
    return false;
  }
  if (r.status >= 500) {
    count.server_errors++;
    problem(`${what}: status ${r.status}: ${r.body.slice(0, 200)}`);
  } else if (r.status !== 200) {
    count.unexpected++;
    problem(`${what}: status ${r.status} ${r.error || ''}: ${r.body.slice(0, 200)}`);
  }
  if (r.status) expect(endpointOf(p), r.status);
  return r.status === 200;
}

// A greedy request of N choices: every choice must equal the single-request output.
async function greedy(i, stream, slow, n = 1) {
  const pr = prompts[i];
  const body = { ...pr.body, max_tokens: GREEDY_TOKENS, temperature: 0, stream, ...(n > 1 ? { n } : {}) };
  const r = await request(pr.path, { body: JSON.stringify(body), slow });
  count.sent++;
  if (!answered(pr.path, r, `greedy ${i} stream=${stream}`)) return r;
  if (slow) count.slow_readers++;
  const got = stream ? streamText(r.body, pr.chat) : plainText(r.body, pr.chat);
  if (got === null || got.length !== n) {
    count.unexpected++;
    problem(`greedy ${i} n=${n}: a malformed answer: ${r.body.slice(-200)}`);
  } else if (got.some((t) => t !== reference[i])) {
    count.mismatched++;
    problem(`greedy ${i} stream=${stream} n=${n}: ${got.join(' | ')} != ${reference[i]}`);
  } else {
    count.completed_greedy++;
    if (n > 1) count.completed_choices++;
  }
  return r;
}

async function disconnect() {
  const pr = pick(prompts);
  const body = { ...pr.body, max_tokens: LONG_TOKENS, stream: true };
  const r = await request(pr.path, { body: JSON.stringify(body), abortAfterEvents: 1 + Math.floor(rand() * 4) });
  count.sent++;
  if (r.aborted && r.status === 200) {
    count.disconnects++;
    expect(endpointOf(pr.path), 200);
    return r;
  }
  answered(pr.path, r, 'disconnecting stream');
  return r;
}

async function abandonPlain() {
  const pr = pick(prompts);
  const body = { ...pr.body, max_tokens: LONG_TOKENS };
  const r = await request(pr.path, { body: JSON.stringify(body), abortAfterMs: 30 + Math.floor(rand() * 200) });
  count.sent++;
  if (r.aborted) {
    count.abandoned_plain++;
    expect(endpointOf(pr.path), 499);
    return r;
  }
  answered(pr.path, r, 'abandoned request');
  return r;
}

async function malformed() {
  count.sent++;
  count.malformed++;
  const k = rand();
  if (k < 0.7) {
    const [p, b] = pick(malformedBodies);
    const r = await request(p, { body: b });
    if (r.status !== 400) problem(`malformed ${JSON.stringify(String(b))}: status ${r.status} ${r.error || ''}`);
    if (r.status) expect(endpointOf(p), r.status);
    else count.unexpected++;
    return;
  }
  const [p, method, want] = pick([
    ['/v1/completions', 'GET', 405], ['/v1/chat/completions', 'PUT', 405], ['/v1/nothing', 'POST', 404],
    ['/health', 'DELETE', 405],
  ]);
  const r = await request(p, { method, body: method === 'POST' || method === 'PUT' ? '{}' : undefined });
  if (r.status !== want) problem(`${method} ${p}: status ${r.status}, expected ${want}`);
  if (r.status) expect(endpointOf(p), r.status);
  else count.unexpected++;
}

async function oversized() {
  count.sent++;
  count.oversized++;
  if (rand() < 0.5) {
    // The server answers 413 as soon as it sees Content-Length and may close
    // before the body is read, so the client can see a reset instead: the
    // server counts the 413 either way.
    const r = await request('/v1/completions', { body: '{"prompt":"' + 'a'.repeat(MAX_BODY + 100) + '"}' });
    if (r.status && r.status !== 413) problem(`oversized body: status ${r.status}`);
    expect('/v1/completions', 413);
    return;
  }
  const r = await request('/v1/completions', { body: '{"prompt":"x"}', headers: { 'X-Pad': 'p'.repeat(MAX_HEADER + 200) } });
  if (r.status !== 431) problem(`oversized headers: status ${r.status} ${r.error || ''}`);
  if (r.status) expect('/v1/completions', r.status);
  else count.unexpected++;
}

// A connection that never completes a request: it sends half a request or
// garbage, then waits a little or not at all, and closes.
function raw() {
  count.raw_connections++;
  return new Promise((resolve) => {
    const s = net.connect(Number(url.port), url.hostname);
    const t = setTimeout(() => s.destroy(), 50 + Math.floor(rand() * 800));
    s.on('connect', () => {
      s.write(pick([
        'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le',
        'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"prompt":',
        'GET /health HT',
        '\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03',
      ]));
    });
    s.on('error', () => {});
    s.on('close', () => {
      clearTimeout(t);
      resolve();
    });
  });
}

// The prefix cache's bytes, from every scrape: never over its budget.
const PREFIX_BUDGET = Number(process.env.SOAK_PREFIX_BYTES || 0);
const prefixSeen = { scrapes: 0, maxBytes: 0 };
function notePrefix(m) {
  const s = m.samples.find((x) => x.name === 'qwen3d_prefix_cache_bytes');
  if (!s) {
    problem('/metrics: no qwen3d_prefix_cache_bytes');
    return;
  }
  prefixSeen.scrapes++;
  prefixSeen.maxBytes = Math.max(prefixSeen.maxBytes, s.value);
  if (PREFIX_BUDGET && s.value > PREFIX_BUDGET)
    problem(`qwen3d_prefix_cache_bytes ${s.value} is over the budget of ${PREFIX_BUDGET}`);
}

async function scrape() {
  const r = await request('/metrics', { method: 'GET' });
  count.scrapes++;
  if (r.status !== 200) problem(`/metrics: status ${r.status}`);
  if (r.status) expect('/metrics', r.status);
  if (r.status === 200) notePrefix(parseMetrics(r.body));
}

const mix = [
  [0.24, () => greedy(Math.floor(rand() * prompts.length), true, false)],
  [0.10, () => greedy(Math.floor(rand() * prompts.length), false, false)],
  [0.06, () => greedy(Math.floor(rand() * prompts.length), rand() < 0.5, false, 2)],
  [0.08, () => greedy(Math.floor(rand() * prompts.length), true, true)],
  [0.14, disconnect],
  [0.08, abandonPlain],
  [0.16, malformed],
  [0.06, oversized],
  [0.05, raw],
  [0.03, scrape],
];

// One client: actions from the mix until UNTIL; after a full queue it waits
// a little, as a client honouring Retry-After would (only shorter).
async function client(until) {
  while (Date.now() < until) {
    let x = rand();
    for (const [w, f] of mix) {
      if ((x -= w) < 0) {
        const r = await f();
        if (r && r.backoff) await sleep(100 + Math.floor(rand() * 300));
        break;
      }
    }
  }
}

// ---- the daemon's side -------------------------------------------------------------
// Resident memory: all of it, and the anonymous part. The check is on the
// anonymous part, where a leak would show: the file-backed part grows as
// decoding touches more rows of the memory-mapped weights (the embedding
// table above all), which is page cache, not memory the daemon holds on to.
function rssBytes() {
  const st = fs.readFileSync(`/proc/${PID}/status`, 'utf8');
  const kb = (k) => Number(new RegExp(`${k}:\\s+(\\d+) kB`).exec(st)[1]) * 1024;
  return { total: kb('VmRSS'), anon: kb('RssAnon') };
}

function alive() {
  try {
    const st = fs.readFileSync(`/proc/${PID}/stat`, 'utf8');
    return st.slice(st.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch (e) {
    return false;
  }
}

async function metrics() {
  const r = await request('/metrics', { method: 'GET' });
  if (r.status !== 200) throw new Error(`/metrics: status ${r.status}`);
  expect('/metrics', 200);
  const m = parseMetrics(r.body);
  notePrefix(m);
  const one = (name) => {
    const s = m.samples.find((x) => x.name === name);
    return s ? s.value : NaN;
  };
  return { m, one };
}

// Waits (bounded) until no session runs and nothing waits.
async function settle() {
  for (let i = 0; i < 300; i++) {
    const { one } = await metrics();
    if (one('qwen3d_sessions_active') === 0 && one('qwen3d_requests_waiting') === 0) return true;
    await sleep(100);
  }
  return false;
}

async function main() {
  // Single-request references, each request alone.
  for (let i = 0; i < prompts.length; i++) {
    const pr = prompts[i];
    const r = await request(pr.path, { body: JSON.stringify({ ...pr.body, max_tokens: GREEDY_TOKENS, temperature: 0 }) });
    if (r.status !== 200) throw new Error(`reference ${i}: status ${r.status}: ${r.body}`);
    expect(endpointOf(pr.path), 200);
    reference.push(plainText(r.body, pr.chat)[0]);
  }

  const warm = Math.max(5, Math.round(SECONDS / 4));
  await Promise.all(Array.from({ length: CLIENTS }, () => client(Date.now() + warm * 1000)));
  if (!(await settle())) problem('sessions were still active after the warm-up');
  await sleep(300);
  const rssWarm = rssBytes();

  await Promise.all(Array.from({ length: CLIENTS }, () => client(Date.now() + (SECONDS - warm) * 1000)));
  const settled = await settle();
  await sleep(300);
  const rssEnd = rssBytes();
  const { m, one } = await metrics();

  // requests_total against the clients' counts. The scrape just made is
  // counted by the server only once it has been answered.
  const last = '/metrics 200';
  expected.set(last, expected.get(last) - 1);
  const server = new Map();
  for (const s of m.samples)
    if (s.name === 'qwen3d_requests_total') server.set(`${s.labels.endpoint} ${s.labels.code}`, s.value);
  // A plain request the client abandons may have been answered an instant
  // before the client gave up: 503 (full queue), or 200 when its generation
  // had just ended. The client counts a 499 either way. Or it may never have
  // reached the server's handler: the client can give up before the server
  // read the whole request (the HTTP layer does not dispatch a request whose
  // client it saw leave first), and the server counts nothing for it. So per
  // endpoint the codes 200, 499 and 503 are compared as a sum that the
  // server's may fall short of the clients' by at most the requests the
  // clients abandoned, never exceed; the server may not have counted more
  // 499s than the clients abandoned, nor more 200s than the clients saw
  // plus those they abandoned. Every other endpoint and code is exact.
  const ANSWERED = ['200', '499', '503'];
  const SUM = ANSWERED.join('+');
  const merged = (m) => {
    const out = new Map();
    for (const [k, v] of m) {
      const [ep, code] = k.split(' ');
      const key = ANSWERED.includes(code) ? `${ep} ${SUM}` : k;
      out.set(key, (out.get(key) || 0) + v);
    }
    return out;
  };
  const ms = merged(server), me = merged(expected);
  const keys = new Set([...ms.keys(), ...me.keys()]);
  const metricMismatches = [];
  for (const k of [...keys].sort()) {
    const a = ms.get(k) || 0, b = me.get(k) || 0;
    const gaveUp = k.endsWith(` ${SUM}`) ? expected.get(`${k.slice(0, -SUM.length - 1)} 499`) || 0 : 0;
    if (a > b || a < b - gaveUp)
      metricMismatches.push(`${k}: server ${a}, clients ${b}` + (gaveUp ? ` (${gaveUp} of them abandoned)` : ''));
  }
  for (const [k, v] of server) {
    if (k.endsWith(' 499') && v > (expected.get(k) || 0))
      metricMismatches.push(`${k}: server ${v}, more than the clients abandoned (${expected.get(k) || 0})`);
    if (k.endsWith(' 200')) {
      const ep = k.slice(0, -4), saw = expected.get(k) || 0, gaveUp = expected.get(`${ep} 499`) || 0;
      if (v < saw || v > saw + gaveUp)
        metricMismatches.push(`${k}: server ${v}, clients saw ${saw} and abandoned ${gaveUp}`);
    }
  }

  const sessions = one('qwen3d_sessions_active'), waiting = one('qwen3d_requests_waiting');
  const growth = (rssEnd.anon - rssWarm.anon) / rssWarm.anon;
  const checkRss = process.env.SOAK_RSS !== '0';
  const report = {
    seconds: SECONDS, clients: CLIENTS, requests_sent: count.sent, completed_greedy: count.completed_greedy,
    completed_n2: count.completed_choices,
    disconnects_injected: count.disconnects, abandoned_before_answer: count.abandoned_plain,
    slow_readers: count.slow_readers, malformed_requests: count.malformed, oversized_requests: count.oversized,
    raw_connections: count.raw_connections, queue_full_503: count.queue_full, other_5xx: count.server_errors,
    timeouts: count.timeouts, unexpected: count.unexpected, leaked_sessions: sessions, waiting_at_end: waiting,
    kv_cache_bytes_at_end: one('qwen3d_kv_cache_bytes'), rss_after_warmup: rssWarm.total, rss_at_end: rssEnd.total,
    rss_anon_after_warmup: rssWarm.anon, rss_anon_at_end: rssEnd.anon,
    rss_anon_growth_pct: Number((growth * 100).toFixed(2)), mismatched_outputs: count.mismatched,
    metric_mismatches: metricMismatches.length, prefix_cache_budget: PREFIX_BUDGET,
    prefix_cache_hits: one('qwen3d_prefix_cache_hits_total'), prefix_cache_misses: one('qwen3d_prefix_cache_misses_total'),
    prefix_cache_evictions: one('qwen3d_prefix_cache_evictions_total'),
    prefix_cache_bytes_max: prefixSeen.maxBytes, prefix_cache_scrapes: prefixSeen.scrapes,
  };
  console.log('soak report:');
  for (const [k, v] of Object.entries(report)) console.log(`  ${k.padEnd(24)} ${v}`);
  console.log(`soak report json: ${JSON.stringify(report)}`);

  const fails = [];
  if (!alive()) fails.push('the daemon is not alive');
  if (!settled || sessions !== 0 || waiting !== 0) fails.push(`sessions_active ${sessions}, requests_waiting ${waiting}`);
  if (one('qwen3d_kv_cache_bytes') !== 0) fails.push('KV cache memory is still held');
  if (checkRss && growth > 0.05)
    fails.push(`anonymous resident memory grew ${(growth * 100).toFixed(1)}% after warm-up`);
  if (count.mismatched) fails.push(`${count.mismatched} greedy outputs differ from their single run`);
  if (count.server_errors) fails.push(`${count.server_errors} 5xx responses other than 503 queue_full`);
  if (count.timeouts) fails.push(`${count.timeouts} requests timed out`);
  if (count.unexpected) fails.push(`${count.unexpected} unexpected answers`);
  if (!count.completed_greedy || !count.completed_choices || !count.disconnects || !count.malformed || !count.queue_full)
    fails.push('the mix did not exercise every fault (too short a run?)');
  if (PREFIX_BUDGET && !(one('qwen3d_prefix_cache_hits_total') > 0 && one('qwen3d_prefix_cache_evictions_total') > 0))
    fails.push('the prefix cache was not exercised: no hit or no eviction');
  for (const x of metricMismatches) fails.push(`requests_total ${x}`);
  for (const p of problems) fails.push(p);
  if (fails.length) {
    for (const f of fails) console.log(`FAIL: ${f}`);
    process.exit(1);
  }
  console.log('soak: all checks passed');
  process.exit(0);
}

main().catch((e) => {
  console.log(`FAIL: ${e.stack || e}`);
  process.exit(1);
});
