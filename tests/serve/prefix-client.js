// The prompt-prefix cache seen from outside, through the official `openai`
// npm client (a raw socket for the client that leaves), against daemons on
// the tiny model:
//   ON   the cache with its defaults (--prefix-min-tokens 64),
//   OFF  --no-prefix-cache,
//   TINY a --prefix-cache-bytes budget that holds one entry of the test's
//        prompts but not two (the shell script measures one entry on ON).
// Expectations are computed, never typed in: prompts of token ids make a
// shared length exact; chat prompts are rendered with the real Qwen3 chat
// template (@huggingface/jinja) and encoded with Hugging Face's tokenizers
// on the model's tokenizer.json, and their longest common prefix is what
// the cache must reuse. Requests run one at a time: each reported figure
// depends only on the requests before it.
//
// usage: node prefix-client.js MODE ...
//   measure ON_URL                         prints the bytes of one entry (PROMPT_LEN ids)
//   main ON_URL OFF_URL ON_LOG MODEL_DIR   hits, greedy equality, cancellation, chat
//   evict TINY_URL BUDGET                  eviction within a tiny budget
'use strict';
const assert = require('assert');
const fs = require('fs');
const OpenAI = require('openai').default || require('openai');
const { parseMetrics } = require('./metrics-parse.js');
const { post } = require('./sse-client.js');

const { check, finish } = require('./checks.js').checks();
const MIN_TOKENS = 64;   // the daemon's default --prefix-min-tokens
const PROMPT_LEN = 100;  // every id prompt of the eviction checks has this many ids
const MODEL = 'tiny';

function client(base) {
  return new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
}

// N distinct ids of one family: families share no first id, so they share no prefix.
function ids(family, n, from = 0) {
  return Array.from({ length: n }, (_, i) => 1000 + 97 * family + 13 * (i + from) % 5000);
}

async function metrics(base) {
  const r = await fetch(`${base}/metrics`, { signal: AbortSignal.timeout(30000) });
  assert.strictEqual(r.status, 200);
  const m = parseMetrics(await r.text());
  const v = (n) => m.value(n);
  return {
    hits: v('qwen3d_prefix_cache_hits_total'),
    misses: v('qwen3d_prefix_cache_misses_total'),
    tokens: v('qwen3d_prefix_cache_tokens_total'),
    evictions: v('qwen3d_prefix_cache_evictions_total'),
    bytes: v('qwen3d_prefix_cache_bytes'),
    sessions: v('qwen3d_sessions_active'),
  };
}

// Polls FN (async, truthy when done) every 100 ms for 30 s at most.
async function until(what, fn) {
  const deadline = Date.now() + 30000;
  for (;;) {
    if (await fn()) return;
    assert.ok(Date.now() < deadline, `${what}: not within 30 s`);
    await new Promise((res) => setTimeout(res, 100));
  }
}

// A greedy completion of an id prompt: its text and cached_tokens.
async function complete(c, prompt, stream = false, max_tokens = 6) {
  const body = { model: MODEL, prompt, max_tokens, temperature: 0 };
  if (!stream) {
    const r = await c.completions.create(body);
    return { text: r.choices[0].text, cached: r.usage.prompt_tokens_details.cached_tokens, usage: r.usage };
  }
  const s = await c.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  let text = '', usage = null;
  for await (const ch of s) {
    if (ch.choices.length) text += ch.choices[0].text;
    if (ch.usage) usage = ch.usage;
  }
  assert.ok(usage, 'the stream sent its usage chunk');
  return { text, cached: usage.prompt_tokens_details.cached_tokens, usage };
}

function lcp(a, b) {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
}

// What the cache must reuse for PROMPT after ENTRIES (earlier prompts of one scope, none evicted).
function expectedCached(entries, prompt) {
  let best = 0;
  for (const e of entries) best = Math.max(best, lcp(e, prompt));
  best = Math.min(best, prompt.length - 1);
  return best >= MIN_TOKENS ? best : 0;
}

async function measure(base) {
  const c = client(base);
  const before = await metrics(base);
  await complete(c, ids(90, PROMPT_LEN));
  const after = await metrics(base);
  assert.ok(after.bytes > before.bytes, 'one more entry holds memory');
  console.log(after.bytes - before.bytes);
}

async function main(on, off, onLog, modelDir) {
  const con = client(on), coff = client(off);
  const seen = []; // prompts ON has seen, in order

  await check('a second prompt sharing a long prefix reports it as cached_tokens, streamed or not', async () => {
    const shared = ids(1, 150);
    const tails = [[11, 12, 13], [21, 22], [31, 32, 33, 34]];
    const m0 = await metrics(on);
    let reused = 0, hits = 0;
    for (const [i, tail] of tails.entries()) {
      const prompt = [...shared, ...tail];
      const want = expectedCached(seen, prompt);
      const r = await complete(con, prompt, i === 1);
      seen.push(prompt);
      assert.strictEqual(r.usage.prompt_tokens, prompt.length);
      assert.strictEqual(r.cached, want, `request ${i + 1}: cached_tokens`);
      assert.strictEqual(r.cached, i === 0 ? 0 : shared.length);
      const cold = await complete(coff, prompt, i === 1);
      assert.strictEqual(cold.cached, 0, '--no-prefix-cache reuses nothing');
      assert.strictEqual(r.text, cold.text, `request ${i + 1}: the same greedy text as without the cache`);
      reused += want;
      if (want) hits++;
    }
    const m1 = await metrics(on);
    assert.strictEqual(m1.hits - m0.hits, hits);
    assert.strictEqual(m1.misses - m0.misses, tails.length - hits);
    assert.strictEqual(m1.tokens - m0.tokens, reused);
    assert.ok(m1.bytes > 0, 'the cache holds the shared prompts');
    const moff = await metrics(off);
    assert.deepStrictEqual([moff.hits, moff.misses, moff.tokens, moff.bytes], [0, 0, 0, 0], 'no cache, no figures');
  });

  await check("a cancelled request's prompt is reused by the next request", async () => {
    const prompt = ids(2, 120);
    // The socket is destroyed after three events: the prompt is prefilled by then.
    const r0 = await post(on, '/v1/completions', { model: MODEL, prompt, max_tokens: 4000, temperature: 0, stream: true },
      { abortAfterEvents: 3, timeoutMs: 30000 });
    assert.strictEqual(r0.status, 200);
    assert.strictEqual(r0.error, 'aborted by the client');
    const id = r0.headers['x-request-id'];
    assert.ok(id, 'the stream names its request id');
    // The daemon logs the request as cancelled once it notices, and frees its session after.
    await until('the cancellation logged', async () =>
      fs.readFileSync(onLog, 'utf8').split('\n').some((l) => l.includes(`id=${id} `) && l.includes('finish=cancelled')));
    await until('no session left', async () => (await metrics(on)).sessions === 0);
    seen.push(prompt);
    const next = [...prompt, 41, 42, 43];
    const r = await complete(con, next);
    assert.strictEqual(r.cached, prompt.length, 'the whole cancelled prompt is reused');
    seen.push(next);
    assert.strictEqual(r.text, (await complete(coff, next)).text, 'the same greedy text as without the cache');
  });

  await check("chat: each turn's cached_tokens is the length its rendered prompt shares with the earlier turns", async () => {
    const { Template } = require('@huggingface/jinja');
    const { Tokenizer } = require('tokenizers');
    const config = JSON.parse(fs.readFileSync(`${modelDir}/tokenizer_config.json`, 'utf8'));
    const template = new Template(config.chat_template);
    const tok = Tokenizer.fromFile(`${modelDir}/tokenizer.json`);
    const encode = async (messages) =>
      Array.from((await tok.encode(template.render({ messages, add_generation_prompt: true }))).getIds());
    const system = 'You are a careful assistant for a shipping company. Answer briefly, name the warehouse, ' +
      'the carrier and the day of delivery, and never promise a time of day. Warehouses: Leeds, Lyon, Lodz, ' +
      'Linz and Lille. Carriers: rail, road and sea. Days: Monday to Friday only. When an order is late, say so ' +
      'plainly, give the new day, and offer the customer a refund of the shipping fee.';
    const questions = ['Where is order 17?', 'And order 18?', 'Can both go by rail?', 'Which day is sooner?'];
    const messages = [{ role: 'system', content: system }];
    const chatSeen = [];
    const figures = [];
    for (const [t, q] of questions.entries()) {
      messages.push({ role: 'user', content: q });
      const prompt = await encode(messages);
      const want = expectedCached([...seen, ...chatSeen], prompt);
      const body = { model: MODEL, messages, max_tokens: 8, temperature: 0 };
      const r = await con.chat.completions.create(body);
      const cold = await coff.chat.completions.create(body);
      assert.strictEqual(r.usage.prompt_tokens, prompt.length, `turn ${t + 1}: the reference renders the same prompt`);
      assert.strictEqual(r.usage.prompt_tokens_details.cached_tokens, want, `turn ${t + 1}: cached_tokens`);
      if (t > 0) assert.ok(want >= MIN_TOKENS, `turn ${t + 1} reuses the earlier turns`);
      assert.strictEqual(r.choices[0].message.content, cold.choices[0].message.content,
        `turn ${t + 1}: the same greedy answer as without the cache`);
      chatSeen.push(prompt);
      figures.push(`${want}/${prompt.length}`);
      messages.push({ role: 'assistant', content: r.choices[0].message.content || '' });
    }
    console.log(`chat turns, cached/prompt tokens: ${figures.join(' ')}`);
  });
}

async function evict(base, budget) {
  const c = client(base);
  await check('a tiny budget evicts the least recently used entry and keeps its bytes within the budget', async () => {
    const prompts = [ids(3, PROMPT_LEN), ids(4, PROMPT_LEN), ids(5, PROMPT_LEN)];
    for (const [i, p] of prompts.entries()) {
      const r = await complete(c, p);
      assert.strictEqual(r.cached, 0);
      const m = await metrics(base);
      assert.ok(m.bytes > 0 && m.bytes <= budget, `after prompt ${i + 1}: ${m.bytes} bytes, budget ${budget}`);
      assert.strictEqual(m.evictions, i, `after prompt ${i + 1}: each new entry evicts the one before`);
    }
    // The last prompt is still cached; the first was evicted.
    const last = prompts[2], first = prompts[0];
    const r3 = await complete(c, [...last.slice(0, -1), 7]);
    assert.strictEqual(r3.cached, last.length - 1, 'the most recent entry serves its prefix');
    const m3 = await metrics(base);
    const r1 = await complete(c, [...first.slice(0, -1), 7]);
    assert.strictEqual(r1.cached, 0, 'the evicted entry serves nothing');
    const m1 = await metrics(base);
    assert.strictEqual(m1.hits, 1);
    assert.ok(m1.evictions > m3.evictions, 'the new entry evicted another');
    assert.ok(m1.bytes <= budget, `${m1.bytes} bytes, budget ${budget}`);
  });
}

(async () => {
  const [mode, ...args] = process.argv.slice(2);
  if (mode === 'measure') {
    await measure(args[0]);
    return;
  }
  if (mode === 'main') await main(...args);
  else if (mode === 'evict') await evict(args[0], Number(args[1]));
  else throw new Error(`unknown mode ${mode}`);
  finish(`prefix-client ${mode}`);
})().catch((e) => {
  console.error(`prefix-client: ${e && e.stack ? e.stack : e}`);
  process.exit(1);
});
