// The load driver of tests/deploy_nginx.sh: streaming completions through a
// real nginx running deploy/nginx/qwen3d.conf in front of three replicas,
// a fixed number of requests per phase, a fixed number in flight:
//  1. affinity: requests with the same X-Affinity-Key land on one replica
//     (the X-Qwen3d-Upstream header nginx adds, and the replicas' own
//     qwen3d_requests_total); a key's prompts share a long preamble of
//     their own, so its later requests reuse it from the prefix cache of
//     that replica (usage cached_tokens, and qwen3d_prefix_cache_hits_total
//     grown there only); requests without a key are spread by least_conn
//     over all three;
//  2. kill -9 of replica 1 while streams run on it: the streams it was
//     serving end truncated (counted; each had begun before the kill);
//     every other request completes, and those sent after the kill are
//     served by the others;
//  3. SIGTERM of replica 2 while streams run on it: no request fails, and
//     the streams it was serving complete (it serves on through its
//     not-ready period, then drains).
// Prints the figures (requests, failures by cause, per-replica counts) and
// exits non-zero when a check fails. Each request is bounded by a timeout.
//
// usage: node lb-driver.js NGINX_BASE MODEL NAME:PID:PORT x3
'use strict';
const assert = require('assert');
const fs = require('fs');
const net = require('net');
const { post, parse, summarize } = require('../serve/sse-client.js');
const { parseMetrics } = require('../serve/metrics-parse.js');

const [base, model, ...specs] = process.argv.slice(2);
const replicas = specs.map((s) => {
  const [name, pid, port] = s.split(':');
  return { name, pid: Number(pid), port: Number(port), base: `http://127.0.0.1:${port}` };
});
assert.strictEqual(replicas.length, 3, 'three replicas');

const PER_PHASE = 24, IN_FLIGHT = 6, MAX_TOKENS = 64, KEYS = 6, PER_KEY = 3, TIMEOUT_MS = 120000;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Polls cond (sync or async) every 10 ms for at most ms.
async function until(what, cond, ms = 10000) {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`waited ${ms} ms for ${what}`);
    await sleep(10);
  }
}
// The process exists and is not a zombie.
function alive(pid) {
  try {
    return !/^\S+ \(.*\) Z/.test(fs.readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}
// A connection to the loopback port is refused.
function refused(port) {
  return new Promise((resolve) => {
    const c = net.connect(port, '127.0.0.1');
    c.on('connect', () => { c.destroy(); resolve(false); });
    c.on('error', (e) => resolve(e.code === 'ECONNREFUSED'));
  });
}

// The replica that answered: the last gate nginx tried ("gate-N" -> rN).
function replicaOf(res) {
  const tried = String(res.headers['x-qwen3d-upstream'] || '').split(',').map((s) => s.trim()).filter(Boolean);
  const m = /gate-(\d+)\.sock$/.exec(tried[tried.length - 1] || '');
  return { replica: m ? `r${m[1]}` : null, tries: tried.length };
}

let seq = 0;
// One streaming completion through nginx. opts.key: its X-Affinity-Key;
// opts.track: an object that learns the answering replica and the number of
// events while the stream runs.
// opts.preamble: text the prompt starts with. opts.usage: ask for the usage chunk.
async function one(phase, opts = {}) {
  const i = seq++;
  const body = {
    model, prompt: `${opts.preamble || ''}Request ${i} of the ${phase} phase: a story about the sea.`,
    max_tokens: opts.maxTokens || MAX_TOKENS, temperature: 0, stream: true,
  };
  if (opts.usage) body.stream_options = { include_usage: true };
  const t = opts.track || {};
  const rec = { i, phase, key: opts.key || null, sent: performance.now() };
  const res = await post(base, '/v1/completions', body, {
    timeoutMs: TIMEOUT_MS,
    headers: opts.key ? { 'X-Affinity-Key': opts.key } : {},
    onHeaders: (h) => { t.replica = replicaOf({ headers: h }).replica; },
    onEvent: () => { t.events = (t.events || 0) + 1; },
  });
  rec.res = res;
  Object.assign(rec, replicaOf(res));
  rec.outcome = classify(res);
  if (opts.usage && rec.outcome === 'ok') {
    const u = summarize(parse(res.raw)).usage;
    rec.cached = u ? u.prompt_tokens_details.cached_tokens : null;
  }
  return rec;
}

function classify(res) {
  if (res.status === 0) return `no response (${res.error})`;
  if (res.status !== 200) {
    let code = '';
    try { code = JSON.parse(res.raw).error.code; } catch { /* not JSON */ }
    return `status ${res.status}${code ? ` ${code}` : ''}`;
  }
  if (!res.complete) return 'truncated';
  let s;
  try { s = summarize(parse(res.raw)); } catch (e) { return `bad stream (${e.message})`; }
  if (s.error) return `error event ${s.error.code}`;
  if (!['stop', 'length'].includes(s.finish)) return `finish ${s.finish}`;
  return 'ok';
}

// A replica's completions counted in qwen3d_requests_total, and its prefix-cache hits.
async function counters(r) {
  const res = await fetch(r.base + '/metrics', { signal: AbortSignal.timeout(10000) });
  const m = parseMetrics(await res.text());
  return {
    requests: m.samples.filter((s) => s.name === 'qwen3d_requests_total' && s.labels.endpoint === '/v1/completions')
      .reduce((a, s) => a + s.value, 0),
    hits: m.value('qwen3d_prefix_cache_hits_total'),
  };
}

function tally(recs) {
  const t = { requests: recs.length, outcomes: {}, perReplica: {}, retried: 0 };
  for (const r of recs) {
    t.outcomes[r.outcome] = (t.outcomes[r.outcome] || 0) + 1;
    t.perReplica[r.replica || 'none'] = (t.perReplica[r.replica || 'none'] || 0) + 1;
    if (r.tries > 1) t.retried++;
  }
  return t;
}
const show = (label, t) => console.log(`${label}: ${t.requests} requests; outcomes ${JSON.stringify(t.outcomes)}; ` +
  `per replica ${JSON.stringify(t.perReplica)}; retried on another replica ${t.retried}`);

(async () => {
  // 1. Affinity: KEYS keys, PER_KEY requests each, one after the other.
  const keyed = [];
  const keyHome = {};
  const keyCached = {};
  // A conversation's history: a preamble of its own (it begins with the key,
  // so no two keys share a prefix the cache would reuse), longer than the
  // replicas' --prefix-min-tokens (64 by default).
  const history = (key) => `${key} so far. ` +
    'The user asked about tides, the moon, harbours, lighthouses and the ships that pass them at night. '.repeat(4);
  for (let k = 0; k < KEYS; k++) {
    const key = `conversation-${k}`;
    const before = await Promise.all(replicas.map(counters));
    const recs = [];
    for (let n = 0; n < PER_KEY; n++) recs.push(await one('affinity', { key, maxTokens: 8, preamble: history(key), usage: true }));
    // A replica counts a request once it has finished with it, which may be
    // a moment after the client read the end of the stream; a hit is counted
    // when its request starts, and published after the step that follows.
    let grew, hits;
    await until(`${key}: ${PER_KEY} requests counted`, async () => {
      const after = await Promise.all(replicas.map(counters));
      grew = replicas.map((r, j) => after[j].requests - before[j].requests);
      hits = replicas.map((r, j) => after[j].hits - before[j].hits);
      return grew.reduce((a, b) => a + b, 0) >= PER_KEY && hits.reduce((a, b) => a + b, 0) >= PER_KEY - 1;
    }, 30000);
    const homes = new Set(recs.map((r) => r.replica));
    assert.ok(recs.every((r) => r.outcome === 'ok'), `${key}: ${recs.map((r) => r.outcome)}`);
    assert.strictEqual(homes.size, 1, `${key} went to ${[...homes]}`);
    const home = [...homes][0];
    assert.deepStrictEqual(grew, replicas.map((r) => (r.name === home ? PER_KEY : 0)),
      `${key}: per-replica qwen3d_requests_total grew by ${grew}, want ${PER_KEY} on ${home} only`);
    // The first request of a key finds nothing; the later ones reuse its history on the home replica.
    const cached = recs.map((r) => r.cached);
    assert.strictEqual(cached[0], 0, `${key}: the first request's cached_tokens`);
    assert.ok(cached.slice(1).every((c) => c > 0), `${key}: later requests' cached_tokens ${cached}`);
    assert.deepStrictEqual(hits, replicas.map((r) => (r.name === home ? PER_KEY - 1 : 0)),
      `${key}: per-replica qwen3d_prefix_cache_hits_total grew by ${hits}, want ${PER_KEY - 1} on ${home} only`);
    keyHome[key] = home;
    keyCached[key] = cached;
    keyed.push(...recs);
  }
  console.log(`affinity: ${KEYS} keys x ${PER_KEY} requests, each key on one replica (header and requests_total): ` +
    `${JSON.stringify(keyHome)}; cached_tokens per request: ${JSON.stringify(keyCached)}, ` +
    `prefix-cache hits on the home replica only`);
  const unkeyed = [];
  for (let n = 0; n < 6; n++) unkeyed.push(await one('least_conn', { maxTokens: 8 }));
  assert.ok(unkeyed.every((r) => r.outcome === 'ok'), `unkeyed: ${unkeyed.map((r) => r.outcome)}`);
  const spread = tally(unkeyed).perReplica;
  for (const r of replicas) assert.ok(spread[r.name] > 0, `least_conn never chose ${r.name}: ${JSON.stringify(spread)}`);
  show('least_conn (no key)', tally(unkeyed));

  // 2. kill -9 of r1 with streams running on it, and one non-streaming
  // request, whose answer would only come at its end: it may have run, so
  // nginx must answer 502 rather than run it again elsewhere.
  const victim = replicas[0];
  let key1 = Object.keys(keyHome).find((k) => keyHome[k] === victim.name);
  for (let k = KEYS; !key1 && k < KEYS + 40; k++) {
    const rec = await one('affinity', { key: `conversation-${k}`, maxTokens: 1 });
    if (rec.replica === victim.name) key1 = `conversation-${k}`;
  }
  assert.ok(key1, 'no affinity key of 46 maps to r1');
  const sessions = async (r) => parseMetrics(await (await fetch(r.base + '/metrics')).text()).value('qwen3d_sessions_active', null, true);
  // r1 idle first: the session of the last request may outlive its stream
  // by a moment.
  await until('r1 to be idle', async () => (await sessions(victim)) === 0);
  const whole = post(base, '/v1/completions', { model, prompt: 'A long answer, not streamed.', max_tokens: 4000, temperature: 0 },
    { timeoutMs: TIMEOUT_MS, headers: { 'X-Affinity-Key': key1 } });
  await until('the non-streaming request to run on r1', async () => (await sessions(victim)) > 0, 30000);
  let tKill = null;
  const killRecs = await phaseWithTrigger('kill', victim, () => {
    process.kill(victim.pid, 'SIGKILL');
    // Until it is gone, its listening socket still takes connections that
    // then fail after the request was written: "after the kill" starts here.
    // Its threads outlive the group leader's zombie state by a moment, and
    // so does the listening socket: gone means refusing connections too.
    return until('r1 to exit', async () => !alive(victim.pid) && (await refused(victim.port)))
      .then(() => { tKill = performance.now(); });
  });
  // In flight on r1 at the kill: a stream that had its headers ends
  // truncated; a request r1 had received but not yet answered (still being
  // tokenized) ends 502 from r1's gate, which moves on only when nothing was
  // written. Every other request completes.
  const cut = (r) => r.replica === victim.name && r.tries === 1 && r.sent < tKill &&
    (r.outcome === 'truncated' ? r.res.tHeaders < tKill : r.outcome === 'status 502');
  const truncated = killRecs.filter((r) => r.outcome === 'truncated');
  for (const r of killRecs) {
    if (r.outcome !== 'ok')
      assert.ok(cut(r), `request ${r.i} (sent ${r.sent < tKill ? 'before' : 'after'} the kill, replica ${r.replica}, ` +
        `${r.tries} tries): ${r.outcome}`);
    if (r.sent > tKill) assert.notStrictEqual(r.replica, victim.name, `request ${r.i} sent after the kill went to it`);
  }
  assert.ok(truncated.length >= 1, 'no stream was running on the killed replica');
  const afterKill = killRecs.filter((r) => r.sent > tKill);
  const w = await whole;
  const wr = replicaOf(w);
  assert.ok(w.status === 502 && wr.replica === victim.name && wr.tries === 1,
    `the non-streaming request running on r1 at the kill: status ${w.status} from ${wr.replica} after ${wr.tries} tries`);
  show('kill -9 r1', tally(killRecs));
  const unanswered = killRecs.filter((r) => r.outcome === 'status 502').length;
  console.log(`kill -9 r1: in flight on it: ${truncated.length} streams ended truncated, ${unanswered} requests ` +
    `not yet answered ended 502; ` +
    `${afterKill.length} requests sent after the kill, all served by r2/r3; the non-streaming request running ` +
    `on it answered 502 and was not run again`);

  // 3. SIGTERM of r2 with streams running on it.
  const drainee = replicas[1];
  let tTerm = null, onDrainee = [];
  const termRecs = await phaseWithTrigger('sigterm', drainee, (live) => {
    tTerm = performance.now();
    onDrainee = live.map((p) => p.promise);
    process.kill(drainee.pid, 'SIGTERM');
    // It serves everything for its --drain-delay (5 s), then closes its
    // listener; new requests resume once it has (see the README on that
    // instant). Those sent meanwhile are served by whichever replica.
    return until('r2 to close its listener', () => refused(drainee.port), 30000);
  });
  for (const r of termRecs) assert.strictEqual(r.outcome, 'ok', `request ${r.i} (replica ${r.replica}): ${r.outcome}`);
  const drained = await Promise.all(onDrainee);
  assert.ok(drained.length >= 1 && drained.every((r) => r.replica === drainee.name && r.outcome === 'ok'),
    `the streams running on r2 at SIGTERM: ${drained.map((r) => `${r.replica} ${r.outcome}`)}`);
  show('SIGTERM r2', tally(termRecs));
  console.log(`SIGTERM r2: ${drained.length} streams in flight on it completed; ` +
    `${termRecs.filter((r) => r.sent > tTerm && r.replica === drainee.name).length} requests sent after the signal were served by it`);

  const all = tally([...keyed, ...unkeyed, ...killRecs, ...termRecs]);
  const failures = Object.entries(all.outcomes).filter(([k]) => k !== 'ok');
  show('total', all);
  console.log(`failures by cause: ${failures.length ? failures.map(([k, v]) => `${k} ${v}`).join(', ') : 'none'} ` +
    `(all of them in flight on the killed replica), and the non-streaming request cut there: status ${w.status}`);
})().catch((e) => {
  console.error(`FAIL: ${e.message}`);
  process.exit(1);
});

// A phase of PER_PHASE requests, IN_FLIGHT at a time, that calls
// fire(running) once, when at least one stream runs on replica R (headers
// from it, two events in) and IN_FLIGHT requests have begun; running: those
// streams. No request begins until the promise fire returns has settled.
async function phaseWithTrigger(name, r, fire) {
  const recs = [], live = new Set();
  let next = 0, fired = false;
  let hold = null;
  const worker = async () => {
    while (next < PER_PHASE) {
      if (hold) await hold;
      next++;
      const p = { replica: null, events: 0 };
      p.promise = one(name, { track: p });
      live.add(p);
      recs.push(await p.promise);
      live.delete(p);
    }
  };
  const watcher = (async () => {
    while (!fired && (next < PER_PHASE || live.size)) {
      const running = [...live].filter((q) => q.replica === r.name && q.events >= 2);
      if (next >= IN_FLIGHT && running.length) {
        fired = true;
        hold = fire(running);
      } else {
        await sleep(5);
      }
    }
  })();
  await Promise.all([...Array(IN_FLIGHT)].map(worker));
  await watcher;
  assert.ok(fired, `${name}: no stream ever ran on ${r.name}`);
  return recs;
}
