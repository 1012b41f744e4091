// SIGTERM while 4 streams are active: two short generations (that may finish
// within the drain timeout) and two long ones (that cannot). The script
// streams the short requests alone first, for reference, then starts all
// four, sends SIGTERM to the daemon once each has received text, and reads
// every stream to its end. Each must end cleanly: the connection closes
// after the terminating chunk, the events are well formed and end with
// [DONE], and the last event before it is either the final chunk (finish
// reason and usage; the text then equals the reference) or the documented
// error event (code "shutting_down"). The long ones must end the second way.
// Prints the time of the signal (ms since the epoch) on stdout's last line.
//
// The daemon's stall file (tests/serve/qwen3d-hooks) holds its compute
// thread until the four requests are in and then lets it through one step
// at a time until all four hold a session and have had tokens, so the
// short streams cannot end before the signal however fast or slow the
// machine runs the tiny model.
//
// usage: node drain-clients.js BASE_URL MODEL_NAME DAEMON_PID STALL_FILE
'use strict';
const assert = require('assert');
const fs = require('fs');
const { post, parse, summarize } = require('./sse-client.js');
const { parseMetrics } = require('./metrics-parse.js');

const [base, model, pidText, stallFile] = process.argv.slice(2);
assert.ok(stallFile, 'usage: drain-clients.js BASE_URL MODEL_NAME DAEMON_PID STALL_FILE');
const pid = Number(pidText);

const req = (i, maxTokens) => ({
  model, prompt: `Stream ${i} before the shutdown:`, max_tokens: maxTokens, temperature: 0, stream: true,
  stream_options: { include_usage: true },
});
const plan = [req(0, 48), req(1, 4000), req(2, 64), req(3, 4000)];

(async () => {
  const ref = {};
  for (const i of [0, 2]) {
    const r = await post(base, '/v1/completions', plan[i], { timeoutMs: 30000 });
    assert.ok(r.complete && r.status === 200, `reference ${i}: ${r.status} ${r.error}`);
    ref[i] = summarize(parse(r.raw));
  }

  const metric = async (name) => {
    const m = await (await fetch(base + '/metrics', { signal: AbortSignal.timeout(10000) })).text();
    return parseMetrics(m).value(name);
  };
  // Held from the first step on: the first request's step waits, the others
  // queue. A stream's response headers leave once the daemon has taken its
  // request in.
  fs.writeFileSync(stallFile, '0');
  let accepted = 0;
  const runs = plan.map((body) =>
    post(base, '/v1/completions', body, { timeoutMs: 60000, onHeaders: () => accepted++ }));
  const started = Date.now();
  const within = (what) => assert.ok(Date.now() - started < 30000, `${what} within 30 s`);
  while (accepted < 4) {
    within('the daemon did not take the four requests in');
    await new Promise((res) => setTimeout(res, 10));
  }
  // Then one step at a time (each gives at least one token), until all four
  // hold a session and 8 more tokens have come (two steps' worth each).
  let passed = 0;
  let g1 = null;
  for (;;) {
    const gen = await metric('qwen3d_generation_tokens_total');
    if (g1 === null && (await metric('qwen3d_sessions_active')) === 4) g1 = gen;
    if (g1 !== null && gen >= g1 + 8) break;
    fs.writeFileSync(stallFile, String(++passed));
    while ((await metric('qwen3d_generation_tokens_total')) === gen) {
      within('the four streams did not all start');
      await new Promise((res) => setTimeout(res, 5));
    }
  }
  assert.ok(passed < 40, `${passed} steps to start four streams of prompts this short`);
  const killedAt = Date.now();
  process.kill(pid, 'SIGTERM');
  fs.rmSync(stallFile, { force: true });
  const results = await Promise.all(runs);

  const outcome = [];
  results.forEach((r, i) => {
    const what = `stream ${i} (max_tokens ${plan[i].max_tokens})`;
    assert.strictEqual(r.status, 200, `${what}: status ${r.status}`);
    assert.ok(r.complete, `${what}: ${r.error}; received ...${JSON.stringify(r.raw.slice(-200))}`);
    const chunks = parse(r.raw);
    const s = summarize(chunks);
    const last = chunks[chunks.length - 1];
    assert.ok(s.contentChunks > 0, `${what}: no text before the signal`);
    if (last.error) {
      assert.strictEqual(last.error.code, 'shutting_down', `${what}: error event ${JSON.stringify(last.error)}`);
      assert.strictEqual(typeof last.error.message, 'string');
      assert.strictEqual(s.finish, null, `${what}: a finish_reason before the error event`);
      if (ref[i]) assert.ok(ref[i].text.startsWith(s.text), `${what}: the cut text is not a prefix of the full one`);
      outcome.push('error event');
    } else {
      assert.ok(['stop', 'length'].includes(s.finish), `${what}: neither a finish_reason nor an error event last`);
      assert.ok(last.usage && last.choices.length === 0, `${what}: no usage chunk last`);
      assert.ok(ref[i], `${what}: a generation of 4000 tokens finished within the drain timeout`);
      assert.strictEqual(s.text, ref[i].text, `${what}: the drained text differs from its single run`);
      assert.deepStrictEqual(s.usage, ref[i].usage, `${what}: usage`);
      outcome.push('completed');
    }
  });
  console.log(`drain-clients: ${outcome.map((o, i) => `stream ${i}: ${o}`).join(', ')}`);
  console.log(killedAt);
})().catch((e) => {
  console.error(`drain-clients: ${e && e.stack ? e.stack : e}`);
  process.exit(1);
});
