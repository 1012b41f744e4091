// Concurrent streaming clients against a running `qwen3d serve --parallel 4`:
//  1. 16 greedy requests (completions and chat), each streamed alone;
//  2. the same 16 streamed at once, together with 4 clients that disconnect
//     after a few events of a long generation and 1 that disconnects while
//     it still waits in the queue: every one of the 16 completes with a
//     well-formed stream whose text, finish reason and usage equal its
//     single run, at least 4 of them overlap in time, and the queue served
//     all of them;
//  3. afterwards /metrics shows no session, no waiting request and no KV
//     memory left, generation has stopped, and the request counters add up.
//
// usage: node load-clients.js BASE_URL MODEL_NAME
'use strict';
const assert = require('assert');
const fs = require('fs');
const { post, parse, summarize } = require('./sse-client.js');
const { parseMetrics } = require('./metrics-parse.js');

// stallFile (optional): the daemon's QWEN3D_TEST_STALL file (tests/serve/qwen3d-hooks).
const [base, model, stallFile] = process.argv.slice(2);
const N = 16, MAX_TOKENS = 32;

const subjects = ['the sea', 'a clock', 'winter', 'a library', 'trains', 'the moon', 'bread', 'a river'];
function request(i) {
  const s = subjects[i % subjects.length];
  const common = { model, max_tokens: MAX_TOKENS, temperature: 0, stream: true, stream_options: { include_usage: true } };
  if (i % 2 === 0)
    return ['/v1/completions', { ...common, prompt: `Request ${i}: a few words about ${s}.` }];
  return ['/v1/chat/completions', {
    ...common,
    messages: [{ role: 'user', content: `Request ${i}: tell me about ${s}.` }],
    chat_template_kwargs: { enable_thinking: i % 4 === 1 },
  }];
}

async function metrics() {
  const r = await fetch(base + '/metrics', { signal: AbortSignal.timeout(10000) });
  assert.strictEqual(r.status, 200);
  return parseMetrics(await r.text());
}

function checkStream(r, what) {
  assert.strictEqual(r.status, 200, `${what}: status ${r.status}: ${r.raw.slice(0, 300)}`);
  assert.match(r.headers['content-type'] || '', /^text\/event-stream/, what);
  assert.ok(r.complete, `${what}: ${r.error || 'incomplete'}`);
  const s = summarize(parse(r.raw));
  assert.strictEqual(s.error, null, `${what}: error event ${JSON.stringify(s.error)}`);
  assert.ok(['stop', 'length'].includes(s.finish), `${what}: finish_reason ${s.finish}`);
  assert.ok(s.usage, `${what}: no usage chunk`);
  return s;
}

async function waitFor(what, cond, ms) {
  const end = Date.now() + ms;
  for (;;) {
    const m = await metrics();
    if (cond(m)) return m;
    if (Date.now() > end) throw new Error(`${what} not reached within ${ms} ms`);
    await new Promise((res) => setTimeout(res, 100));
  }
}

(async () => {
  const m0 = await metrics();
  // 1. Each request alone.
  const singles = [];
  for (let i = 0; i < N; i++) {
    const [path, body] = request(i);
    singles.push(checkStream(await post(base, path, body, { timeoutMs: 30000 }), `single ${i}`));
  }
  assert.ok(singles.some((s) => s.text.length > 0), 'the single runs produced text');

  // 2. All at once, with clients that leave. The leavers go first in the
  // queue (so they hold sessions while the others wait and stream); the one
  // that leaves while queued comes 200 ms after the others, behind them.
  // The stall file lets 20 steps through and then holds the compute thread
  // until that one has gone: 20 steps cannot finish the 16 streams' 512
  // tokens, so every session is still taken when it comes and it stays
  // queued, however fast the machine runs the tiny model.
  const long = (i) => ['/v1/completions', { model, prompt: `Leaver ${i}: a long story.`, max_tokens: 2000, stream: true }];
  if (stallFile) fs.writeFileSync(stallFile, '20');
  const t0 = performance.now();
  const leavers = [0, 1, 2, 3].map((i) => post(base, ...long(i), { abortAfterEvents: 4, timeoutMs: 30000 }));
  const runs = [];
  for (let i = 0; i < N; i++) runs.push(post(base, ...request(i), { timeoutMs: 60000 }));
  const queued = new Promise((res) => setTimeout(res, 200)).then(async () => {
    try {
      return await post(base, ...long(9), { abortAfterMs: 50, timeoutMs: 30000 });
    } finally {
      if (stallFile) fs.rmSync(stallFile, { force: true });
    }
  });
  const all = await Promise.all(runs);
  const gone = await Promise.all([...leavers, queued]);
  const wall = performance.now() - t0;

  let tokens = 0;
  all.forEach((r, i) => {
    const s = checkStream(r, `concurrent ${i}`);
    assert.strictEqual(s.text, singles[i].text, `concurrent ${i}: text differs from its single run`);
    assert.strictEqual(s.reasoning, singles[i].reasoning, `concurrent ${i}: reasoning differs from its single run`);
    assert.strictEqual(s.finish, singles[i].finish, `concurrent ${i}: finish_reason`);
    assert.deepStrictEqual(s.usage, singles[i].usage, `concurrent ${i}: usage`);
    tokens += s.usage.completion_tokens;
  });
  gone.forEach((r, i) => {
    assert.strictEqual(r.status, 200, `leaver ${i}: status ${r.status}`);
    assert.ok(!r.complete, `leaver ${i} was not cut`);
  });
  // --parallel 4: at some instant at least 4 of the 16 streams were mid-flight.
  const hasText = (e) => {
    if (e.data === 'data: [DONE]') return false;
    const c = JSON.parse(e.data.slice(6)).choices;
    return !!(c && c.length && (c[0].text || (c[0].delta && (c[0].delta.content || c[0].delta.reasoning_content))));
  };
  const spans = all.map((r) => r.events.filter(hasText)).filter((ev) => ev.length).map((ev) => [ev[0].t, ev[ev.length - 1].t]);
  const overlap = Math.max(...spans.map(([a]) => spans.filter(([b, e]) => b <= a && a <= e).length));
  assert.ok(overlap >= 4, `at most ${overlap} streams overlapped`);

  // 3. Sessions are freed, nothing waits, generation stops.
  const m1 = await waitFor('sessions_active 0 and requests_waiting 0',
    (m) => m.value('qwen3d_sessions_active') === 0 && m.value('qwen3d_requests_waiting') === 0, 5000);
  assert.strictEqual(m1.value('qwen3d_kv_cache_bytes'), 0, 'KV memory left after the clients went');
  await new Promise((res) => setTimeout(res, 300));
  const m2 = await metrics();
  assert.strictEqual(m2.value('qwen3d_generation_tokens_total'), m1.value('qwen3d_generation_tokens_total'),
    'tokens are still generated after every client went');
  const d = (name, labels) => m2.value(name, labels) - m0.value(name, labels);
  const ok = d('qwen3d_requests_total', { endpoint: '/v1/completions', code: '200' }) +
    d('qwen3d_requests_total', { endpoint: '/v1/chat/completions', code: '200' });
  assert.strictEqual(ok, 2 * N + gone.length, 'requests_total with code 200');
  assert.strictEqual(d('qwen3d_queue_wait_seconds_count'), 2 * N + gone.length - 1,
    'every request but the one that left the queue got a session');
  console.log(`load-clients: ${N} concurrent streams equal their single runs (${tokens} tokens in ${wall.toFixed(0)} ms, ` +
    `${overlap} overlapping); ${gone.length} disconnected clients freed their sessions`);
})().catch((e) => {
  console.error(`load-clients: ${e && e.stack ? e.stack : e}`);
  process.exit(1);
});
