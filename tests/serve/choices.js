// `n` and `best_of` against a running `qwen3d serve` (tests/serve_choices.sh),
// through the official `openai` npm client and raw HTTP:
//  - n greedy: every choice equals the request's single output, on both
//    endpoints, streaming or not; usage counts every choice's tokens;
//  - n sampled with a seed: the same choices on every run, and choice i is
//    what the request with seed + i gives alone (that is how the choices
//    are seeded), so forked choices decode as their own requests would;
//  - a stream of n choices: every chunk names its choice's index, each
//    choice's deltas concatenate to its non-streamed text, each ends with
//    its finish_reason, and the usage chunk comes last;
//  - best_of: the candidates are the choices of the same request with
//    n = best_of; the ones returned are those with the highest cumulative
//    log-probability, which this script computes itself from the logits
//    `qwen3d generate --dump-logits` writes for each candidate (with the
//    candidate's seed and the same sampling); usage counts every candidate;
//  - best_of again, against the log-probabilities the daemon itself reports
//    for the same candidates (n = best_of with logprobs);
//  - per choice: with logprobs, each choice's logprobs are its solo run's;
//    with logit_bias, response_format or echo, each choice is its solo run
//    (so each constrained choice has a grammar matcher of its own);
//  - the prefix cache: n = 3 on a prompt that is a cache hit (cached_tokens
//    > 0) gives the solo output in every choice;
//  - a client that disconnects mid-stream from n = 3 frees all three
//    sessions: qwen3d_sessions_active and qwen3d_kv_cache_bytes return to 0;
//  - the errors: n = 0, n above 16, best_of below n, best_of above n with
//    stream, and more choices than --parallel are 400s naming the field.
//
// usage: node choices.js BASE_URL MODEL_NAME QWEN3D MODEL_DIR PARALLEL WORKDIR
'use strict';
const assert = require('assert');
const fs = require('fs');
const http = require('http');
const path = require('path');
const { execFileSync } = require('child_process');
const OpenAI = require('openai').default || require('openai');
const sse = require('./sse-client.js');
const { parseMetrics } = require('./metrics-parse.js');

const [base, model, qwen3d, modelDir, parallelArg, workdir] = process.argv.slice(2);
const parallel = Number(parallelArg);
const { check, finish } = require('./checks.js').checks();
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60000 });

// Prompt ids rather than text: `qwen3d generate` then sees the same prompt.
const PROMPT = [9707, 1879, 11, 1052, 374, 264];
// Sampling the way `qwen3d generate --temperature 1 --seed S` samples (no filters).
const SAMPLED = { temperature: 1, top_p: 1, top_k: 0, min_p: 0, repetition_penalty: 1 };

async function raw(path_, body) {
  const r = await fetch(base + path_, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
    signal: AbortSignal.timeout(60000),
  });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch (_) { /* not JSON */ }
  return { status: r.status, json, text };
}

async function metrics() {
  const r = await fetch(`${base}/metrics`, { signal: AbortSignal.timeout(30000) });
  assert.strictEqual(r.status, 200);
  return parseMetrics(await r.text());
}

// Choice i of a request with n choices against the same request alone with seed + i.
async function eachIsSolo(ep, body, n, what) {
  const all = await raw(ep, { ...body, n });
  assert.strictEqual(all.status, 200, all.text);
  assert.strictEqual(all.json.choices.length, n);
  for (let i = 0; i < n; i++) {
    const solo = await raw(ep, { ...body, seed: body.seed + i });
    assert.strictEqual(solo.status, 200, solo.text);
    assert.deepStrictEqual(all.json.choices[i], { ...solo.json.choices[0], index: i }, `${what}: choice ${i}`);
  }
  return all.json;
}

function texts(r) {
  return r.choices.map((c) => (c.message ? JSON.stringify(c.message) : c.text));
}

// One candidate alone, by `qwen3d generate`: its ids, text and the sum of
// its ids' log-probabilities under the model's distribution (log-softmax of
// the raw logits of each produced position, in double precision).
function candidate(seed, maxTokens) {
  const dump = path.join(workdir, `logits-${seed}.bin`);
  const out = execFileSync(qwen3d, ['generate', '--model', modelDir, '--prompt-ids', PROMPT.join(','),
    '--max-tokens', String(maxTokens), '--temperature', '1', '--seed', String(seed), '--threads', '1',
    '--dump-logits', dump, '--json'], { encoding: 'utf8', timeout: 120000 });
  const g = JSON.parse(out);
  const buf = fs.readFileSync(dump);
  const logits = new Float32Array(buf.buffer, buf.byteOffset, buf.length / 4);
  const vocab = logits.length / g.ids.length;
  assert.ok(Number.isInteger(vocab), `${logits.length} logits for ${g.ids.length} ids`);
  let cum = 0;
  g.ids.forEach((id, k) => {
    const row = logits.subarray(k * vocab, (k + 1) * vocab);
    let max = -Infinity;
    for (const v of row) if (v > max) max = v;
    let sum = 0;
    for (const v of row) sum += Math.exp(v - max);
    cum += row[id] - max - Math.log(sum);
  });
  return { ids: g.ids, text: g.text, cum };
}

async function main() {
  await check('n=3 greedy: each choice equals the single output (completions, openai client)', async () => {
    const body = { model, prompt: 'Hello world', max_tokens: 8, temperature: 0 };
    const one = await client.completions.create(body);
    const three = await client.completions.create({ ...body, n: 3 });
    assert.strictEqual(three.choices.length, 3);
    three.choices.forEach((c, i) => {
      assert.strictEqual(c.index, i);
      assert.strictEqual(c.text, one.choices[0].text, `choice ${i}`);
      assert.strictEqual(c.finish_reason, one.choices[0].finish_reason);
    });
    assert.strictEqual(three.usage.prompt_tokens, one.usage.prompt_tokens);
    assert.strictEqual(three.usage.completion_tokens, 3 * one.usage.completion_tokens);
    assert.strictEqual(three.usage.total_tokens, three.usage.prompt_tokens + three.usage.completion_tokens);
    // The choices decode in the same steps: tpot_ms is the time per step,
    // decode_tokens_per_s counts every choice's tokens after its first.
    const t = three.timings;
    if (one.usage.completion_tokens > 1 && t.tpot_ms >= 0.1)
      assert.ok(Math.abs(t.tpot_ms * t.decode_tokens_per_s / 3000 - 1) < 0.01, JSON.stringify(t));
  });

  await check('n=2 greedy chat: each choice equals the single output (openai client)', async () => {
    const body = { model, messages: [{ role: 'user', content: 'Say something.' }], max_tokens: 10, temperature: 0 };
    const one = await client.chat.completions.create(body);
    const two = await client.chat.completions.create({ ...body, n: 2 });
    assert.strictEqual(two.choices.length, 2);
    two.choices.forEach((c, i) => {
      assert.strictEqual(c.index, i);
      assert.deepStrictEqual(c.message, one.choices[0].message, `choice ${i}`);
    });
    assert.strictEqual(two.usage.completion_tokens, 2 * one.usage.completion_tokens);
  });

  const seeded = { model, prompt: PROMPT, max_tokens: 10, seed: 41, ...SAMPLED };
  let seededChoices = null;
  await check('n=3 with a seed: the same choices on every run, choice i = the request with seed + i alone', async () => {
    const a = await raw('/v1/completions', { ...seeded, n: 3 });
    const b = await raw('/v1/completions', { ...seeded, n: 3 });
    assert.strictEqual(a.status, 200, a.text);
    assert.deepStrictEqual(texts(b.json), texts(a.json));
    for (let i = 0; i < 3; i++) {
      const solo = await raw('/v1/completions', { ...seeded, seed: seeded.seed + i });
      assert.strictEqual(solo.status, 200, solo.text);
      assert.strictEqual(a.json.choices[i].text, solo.json.choices[0].text, `choice ${i}`);
      assert.strictEqual(a.json.choices[i].finish_reason, solo.json.choices[0].finish_reason, `choice ${i}`);
    }
    assert.ok(new Set(texts(a.json)).size > 1, `sampled choices should differ: ${JSON.stringify(texts(a.json))}`);
    seededChoices = a.json;
  });

  await check('a stream of n=3: chunks carry their index and add up to the non-streamed choices', async () => {
    for (const ep of ['/v1/completions', '/v1/chat/completions']) {
      const body = ep === '/v1/completions' ? { ...seeded, n: 3 }
        : { model, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 8, seed: 5, ...SAMPLED, n: 3 };
      const whole = await raw(ep, body);
      assert.strictEqual(whole.status, 200, whole.text);
      const r = await sse.post(base, ep, { ...body, stream: true, stream_options: { include_usage: true } },
        { timeoutMs: 60000 });
      assert.ok(r.complete && r.status === 200, `${ep}: ${r.status} ${r.error}`);
      const chunks = sse.parse(r.raw);
      const got = [0, 1, 2].map(() => ({ text: '', reasoning: '', finish: null }));
      let usage = null;
      chunks.forEach((j, k) => {
        assert.ok(!usage, `${ep}: a chunk after the usage chunk`);
        if (j.usage) {
          usage = j.usage;
          assert.deepStrictEqual(j.choices, []);
          assert.strictEqual(k, chunks.length - 1, `${ep}: the usage chunk is not the last`);
          return;
        }
        assert.strictEqual(j.choices.length, 1);
        const c = j.choices[0];
        assert.ok(c.index >= 0 && c.index < 3, `${ep}: index ${c.index}`);
        const g = got[c.index];
        assert.strictEqual(g.finish, null, `${ep}: choice ${c.index} has a chunk after its final one`);
        if (c.delta) {
          g.text += c.delta.content || '';
          g.reasoning += c.delta.reasoning_content || '';
        } else {
          g.text += c.text;
        }
        g.finish = c.finish_reason;
      });
      got.forEach((g, i) => {
        const want = whole.json.choices[i];
        if (want.message) {
          assert.strictEqual(g.text, want.message.content, `${ep}: choice ${i}`);
          assert.strictEqual(g.reasoning, want.message.reasoning_content || '', `${ep}: choice ${i} reasoning`);
        } else {
          assert.strictEqual(g.text, want.text, `${ep}: choice ${i}`);
        }
        assert.strictEqual(g.finish, want.finish_reason, `${ep}: choice ${i} finish`);
      });
      assert.deepStrictEqual(usage, whole.json.usage);
    }
  });

  await check('best_of: the n candidates with the highest cumulative logprob, best first', async () => {
    assert.ok(seededChoices, 'needs the seeded n=3 run');
    const cands = [0, 1, 2].map((i) => candidate(seeded.seed + i, seeded.max_tokens));
    cands.forEach((c, i) => assert.strictEqual(c.text, seededChoices.choices[i].text,
      `qwen3d generate with seed ${seeded.seed + i} differs from choice ${i} of the daemon`));
    const rank = [0, 1, 2].sort((x, y) => cands[y].cum - cands[x].cum || x - y);
    // The daemon sums float log-probabilities: a near tie could go either way.
    const close = (x, y) => Math.abs(cands[x].cum - cands[y].cum) < 1e-3;
    for (const n of [1, 2]) {
      const r = await client.completions.create({ ...seeded, n, best_of: 3 });
      assert.strictEqual(r.choices.length, n);
      r.choices.forEach((c, k) => {
        assert.strictEqual(c.index, k);
        const i = cands.findIndex((x) => x.text === c.text);
        assert.ok(i >= 0, `choice ${k} is no candidate: ${JSON.stringify(c.text)}`);
        assert.ok(i === rank[k] || close(i, rank[k]),
          `best_of=3 n=${n}: choice ${k} is candidate ${i} (cum ${cands[i].cum}), the rank says ${rank[k]} ` +
          `(cums ${cands.map((x) => x.cum).join(', ')})`);
      });
      assert.strictEqual(r.usage.completion_tokens, seededChoices.usage.completion_tokens,
        'usage counts every candidate');
    }
  });

  await check('best_of against the daemon\'s own logprobs of the same candidates (n = best_of, logprobs)', async () => {
    const all = await raw('/v1/completions', { ...seeded, n: 3, logprobs: 0 });
    assert.strictEqual(all.status, 200, all.text);
    const cum = all.json.choices.map((c) => c.logprobs.token_logprobs.reduce((a, b) => a + b, 0));
    const best = [0, 1, 2].sort((x, y) => cum[y] - cum[x] || x - y)[0];
    const r = await raw('/v1/completions', { ...seeded, n: 1, best_of: 3, logprobs: 0 });
    assert.strictEqual(r.status, 200, r.text);
    const got = all.json.choices.findIndex((c) => c.text === r.json.choices[0].text);
    assert.ok(got === best || Math.abs(cum[got] - cum[best]) < 1e-3,
      `best_of picked candidate ${got}, the highest cumulative logprob is ${best} (${cum.join(', ')})`);
    assert.deepStrictEqual(r.json.choices[0].logprobs, all.json.choices[got].logprobs);
  });

  await check('per choice: logprobs, logit_bias, echo and response_format each as the solo run', async () => {
    const lp = await eachIsSolo('/v1/completions', { ...seeded, logprobs: 2 }, 3, 'logprobs');
    lp.choices.forEach((c, i) => assert.strictEqual(c.logprobs.tokens.length, c.logprobs.token_logprobs.length,
      `choice ${i}`));
    assert.ok(new Set(lp.choices.map((c) => JSON.stringify(c.logprobs))).size > 1, 'the choices share logprobs');
    await eachIsSolo('/v1/completions', { ...seeded, logit_bias: { 1879: 5, 374: -100 } }, 3, 'logit_bias');
    const echo = await eachIsSolo('/v1/completions', { model, prompt: 'Hello there', echo: true, logprobs: 1,
      max_tokens: 5, seed: 3, ...SAMPLED }, 2, 'echo');
    echo.choices.forEach((c) => assert.ok(c.text.startsWith('Hello there'), c.text));
    const only = await eachIsSolo('/v1/completions', { model, prompt: 'Hello there', echo: true, logprobs: 1,
      max_tokens: 0, seed: 3 }, 3, 'echo, max_tokens 0');
    only.choices.forEach((c) => assert.strictEqual(c.text, 'Hello there'));
    assert.strictEqual(only.usage.completion_tokens, 0);
    const fmt = await eachIsSolo('/v1/chat/completions', { model, messages: [{ role: 'user', content: 'JSON please' }],
      max_tokens: 48, seed: 9, ...SAMPLED, response_format: { type: 'json_object' } }, 3, 'response_format');
    for (const c of fmt.choices)
      if (c.finish_reason === 'stop')
        assert.strictEqual(typeof JSON.parse(c.message.content), 'object', c.message.content);
  });

  await check('the prefix cache: n=3 on a cached prompt gives the solo output in every choice', async () => {
    const prompt = 'The quick brown fox jumps over the lazy dog, and then the dog chases the fox around the ' +
      'garden until both of them are tired and lie down in the shade of the old apple tree.';
    const body = { model, prompt, max_tokens: 8, temperature: 0 };
    const solo = await raw('/v1/completions', body);
    assert.strictEqual(solo.status, 200, solo.text);
    for (let run = 0; run < 2; run++) {
      const r = await client.completions.create({ ...body, n: 3 });
      assert.ok(r.usage.prompt_tokens_details.cached_tokens > 0, `no cache hit: ${JSON.stringify(r.usage)}`);
      r.choices.forEach((c, i) => assert.strictEqual(c.text, solo.json.choices[0].text, `choice ${i}`));
    }
  });

  await check('a client gone mid-stream from n=3: every choice\'s session is freed', async () => {
    // The daemon is tests/serve/qwen3d-hooks: the file `stall` holding 4
    // lets 4 steps through (the prompt and the forks, then 3 decode steps)
    // and holds the 5th. The client sees the three sessions, goes away, and
    // lets the steps go on: the cancellation must then free them all.
    const stall = path.join(workdir, 'stall');
    const m0 = await metrics();
    const gen0 = m0.value('qwen3d_generation_tokens_total');
    fs.writeFileSync(stall, '4\n');
    const body = JSON.stringify({ model, prompt: PROMPT, max_tokens: 400, seed: 1, ...SAMPLED, n: 3, stream: true });
    const req = http.request(new URL('/v1/completions', base), {
      method: 'POST', headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) },
    }, (res) => res.resume());
    req.on('error', () => {});
    req.end(body);
    try {
      const end = Date.now() + 60000;
      for (;;) {
        const m = await metrics();
        if (m.value('qwen3d_generation_tokens_total') - gen0 === 12) {
          assert.strictEqual(m.value('qwen3d_sessions_active'), 3, 'the 3 choices\' sessions while streaming');
          assert.ok(m.value('qwen3d_kv_cache_bytes') > 0);
          break;
        }
        assert.ok(Date.now() < end, `4 steps of 3 choices not done within 60 s (${
          m.value('qwen3d_generation_tokens_total') - gen0} tokens)`);
        await new Promise((res) => setTimeout(res, 50));
      }
    } finally {
      req.destroy();
      await new Promise((res) => setTimeout(res, 200));
      fs.unlinkSync(stall);
    }
    const end = Date.now() + 60000;
    let m;
    for (;;) {
      m = await metrics();
      if (m.value('qwen3d_sessions_active') === 0 && m.value('qwen3d_kv_cache_bytes') === 0) break;
      assert.ok(Date.now() < end, `sessions ${m.value('qwen3d_sessions_active')}, KV bytes ` +
        `${m.value('qwen3d_kv_cache_bytes')} 60 s after the client went`);
      await new Promise((res) => setTimeout(res, 100));
    }
    // Each choice stops within a step or so of the disconnect, far from its 400 tokens.
    const gen = m.value('qwen3d_generation_tokens_total') - gen0;
    assert.ok(gen < 400, `${gen} tokens: some choices ran on after the client went`);
  });

  await check('errors: n=0, n=17, best_of < n, best_of > n with stream, more choices than --parallel', async () => {
    const cases = [
      [{ prompt: 'x', n: 0 }, 'n', /'n' must be in \[1, 16\]/],
      [{ prompt: 'x', n: 17 }, 'n', /'n' must be in \[1, 16\]/],
      [{ prompt: 'x', n: 3, best_of: 2 }, 'best_of', /'best_of' \(2\) must be at least 'n' \(3\)/],
      [{ prompt: 'x', best_of: 2, stream: true }, 'best_of', /cannot be used with 'stream'/],
      [{ prompt: 'x', n: parallel + 1 }, 'n', new RegExp(`--parallel ${parallel}`)],
      [{ prompt: 'x', n: 1, best_of: parallel + 1 }, 'best_of', new RegExp(`--parallel ${parallel}`)],
    ];
    for (const [body, param, msg] of cases) {
      const r = await raw('/v1/completions', { model, max_tokens: 2, ...body });
      assert.strictEqual(r.status, 400, `${JSON.stringify(body)}: ${r.text}`);
      assert.strictEqual(r.json.error.param, param, r.text);
      assert.strictEqual(r.json.error.code, 'invalid_value', r.text);
      assert.match(r.json.error.message, msg);
      let err = null;
      try {
        await client.completions.create({ model, max_tokens: 2, ...body });
      } catch (e) {
        err = e;
      }
      assert.ok(err instanceof OpenAI.BadRequestError, `openai client: ${err}`);
      assert.strictEqual(err.status, 400);
      assert.strictEqual(err.param, param);
    }
    const chat = await raw('/v1/chat/completions', { model, messages: [{ role: 'user', content: 'x' }], best_of: 2 });
    assert.strictEqual(chat.status, 400, chat.text);
    assert.strictEqual(chat.json.error.param, 'best_of');
  });
}

main().then(() => finish('choices.js'), (e) => {
  console.error(e);
  process.exit(1);
});
