// logprobs, echo, logit_bias, /tokenize and /detokenize against a running
// `qwen3d serve`, through the official `openai` npm client where it has the
// field and raw HTTP where it does not (tests/serve_logprobs.sh prepares the
// references):
//  - completions (logprobs 5) and chat (logprobs, top_logprobs 20), streamed
//    and not: each token's logprob and its top entries, in order, equal a
//    log-softmax of `qwen3d generate --dump-logits` rows of the same prompt
//    to 1e-4; the streams' logprobs joined equal the one-shot bodies';
//  - echo with max_tokens 0: the prompt's text and tokens, a null first
//    logprob, the last one equal to the log-softmax of a generate run on the
//    prompt without its last id; echo with generation: the text_offsets;
//  - logit_bias +100 forces a token, -100 bans the greedy one (the next is
//    the reference row's second), alone and beside another stream;
//  - /tokenize ids equal `qwen3d tokenize`'s on the tokenizer corpus and
//    /detokenize gives `qwen3d tokenize --decode`'s text back.
//
// usage: node logprobs-client.js BASE_URL MODEL_NAME WORK_DIR
'use strict';
const assert = require('assert');
const fs = require('fs');
const path = require('path');
const OpenAI = require('openai').default || require('openai');

const [base, model, work] = process.argv.slice(2);
const { check, finish } = require('./checks.js').checks();
const c = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
const TOL = 1e-4;

async function post(p, body) {
  const r = await fetch(base + p, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  return { status: r.status, body: await r.json() };
}

// The generate run's rows (float32, V per row) as log-softmax in double.
function refRows(file, n) {
  const buf = fs.readFileSync(file);
  const all = new Float32Array(buf.buffer, buf.byteOffset, buf.length / 4);
  assert.strictEqual(all.length % n, 0, `${file}: ${all.length} floats are not ${n} rows`);
  const V = all.length / n, rows = [];
  for (let r = 0; r < n; r++) {
    const x = all.subarray(r * V, (r + 1) * V);
    let mx = -Infinity;
    for (const v of x) if (v > mx) mx = v;
    let sum = 0;
    for (const v of x) sum += Math.exp(v - mx);
    const lse = mx + Math.log(sum);
    const lp = Float64Array.from(x, (v) => v - lse);
    // ids by logprob, ties to the lower id (the server's order)
    const order = Array.from(lp.keys()).sort((a, b) => lp[b] - lp[a] || a - b).slice(0, 20);
    rows.push({ lp, order });
  }
  return rows;
}

const names = new Map();
async function tokenStr(id) {
  if (!names.has(id)) {
    const r = await post('/detokenize', { tokens: [id] });
    assert.strictEqual(r.status, 200, JSON.stringify(r.body));
    names.set(id, r.body.prompt);
  }
  return names.get(id);
}

function readJson(f) {
  return JSON.parse(fs.readFileSync(path.join(work, f), 'utf8'));
}

async function main() {
  const cmplRef = readJson('cmpl.json'), echoRef = readJson('echo.json'), chatRef = readJson('chat.json');
  const promptIds = cmplRef.prompt_ids;
  const cmplRows = refRows(path.join(work, 'cmpl.f32'), cmplRef.ids.length);

  await check('completions logprobs 5: the log-softmax of generate --dump-logits, streamed and not', async () => {
    const req = { model, prompt: promptIds, max_tokens: cmplRef.ids.length, temperature: 0, logprobs: 5 };
    const r = await c.completions.create(req);
    const lp = r.choices[0].logprobs;
    assert.strictEqual(lp.tokens.length, cmplRef.ids.length);
    assert.strictEqual(lp.text_offset[0], 0);
    for (let i = 0; i < cmplRef.ids.length; i++) {
      const want = cmplRows[i], id = cmplRef.ids[i];
      assert.strictEqual(lp.tokens[i], await tokenStr(id), `token ${i}`);
      assert.ok(Math.abs(lp.token_logprobs[i] - want.lp[id]) < TOL, `token ${i}: ${lp.token_logprobs[i]} vs ${want.lp[id]}`);
      const top = lp.top_logprobs[i];
      for (let k = 0; k < 5; k++) {
        const s = await tokenStr(want.order[k]);
        assert.ok(s in top, `position ${i}: top ${k} '${s}' missing from ${JSON.stringify(top)}`);
        assert.ok(Math.abs(top[s] - want.lp[want.order[k]]) < TOL, `position ${i} top ${k}`);
      }
      if (i) assert.ok(lp.text_offset[i] >= lp.text_offset[i - 1], `text_offset ${i}`);
    }
    const stream = await c.completions.create({ ...req, stream: true });
    const joined = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
    for await (const chunk of stream) {
      const l = chunk.choices[0] && chunk.choices[0].logprobs;
      if (l) for (const k of Object.keys(joined)) joined[k].push(...l[k]);
    }
    assert.deepStrictEqual(joined, lp);
  });

  await check('chat logprobs + top_logprobs 20: values and top order of generate --dump-logits, streamed and not', async () => {
    const rows = refRows(path.join(work, 'chat.f32'), chatRef.ids.length);
    const req = { model, messages: [{ role: 'user', content: 'Name a colour.' }], max_tokens: chatRef.ids.length,
      temperature: 0, logprobs: true, top_logprobs: 20, chat_template_kwargs: { enable_thinking: false } };
    const r = await c.chat.completions.create(req);
    const content = r.choices[0].logprobs.content;
    assert.strictEqual(content.length, chatRef.ids.length);
    for (let i = 0; i < content.length; i++) {
      const e = content[i], want = rows[i], id = chatRef.ids[i];
      assert.strictEqual(e.token, await tokenStr(id));
      assert.ok(Math.abs(e.logprob - want.lp[id]) < TOL, `token ${i}`);
      assert.ok(Array.isArray(e.bytes) && e.bytes.every((b) => b >= 0 && b < 256));
      assert.strictEqual(e.top_logprobs.length, 20);
      for (let k = 0; k < 20; k++) {
        assert.strictEqual(e.top_logprobs[k].token, await tokenStr(want.order[k]), `position ${i}: top ${k}`);
        assert.ok(Math.abs(e.top_logprobs[k].logprob - want.lp[want.order[k]]) < TOL, `position ${i}: top ${k} value`);
      }
    }
    const stream = await c.chat.completions.create({ ...req, stream: true });
    const joined = [];
    for await (const chunk of stream) {
      const l = chunk.choices[0] && chunk.choices[0].logprobs;
      if (l) joined.push(...l.content);
    }
    assert.deepStrictEqual(joined, content);
  });

  await check('echo with max_tokens 0: the prompt and its logprobs, the first null, nothing generated', async () => {
    const r = await c.completions.create({ model, prompt: promptIds, max_tokens: 0, echo: true, logprobs: 2 });
    const ch = r.choices[0], lp = ch.logprobs;
    assert.strictEqual(r.usage.completion_tokens, 0);
    assert.strictEqual(r.usage.prompt_tokens, promptIds.length);
    assert.strictEqual(ch.finish_reason, 'length');
    const words = await Promise.all(promptIds.map(tokenStr));
    assert.strictEqual(ch.text, words.join(''));
    assert.deepStrictEqual(lp.tokens, words);
    assert.strictEqual(lp.token_logprobs[0], null);
    assert.strictEqual(lp.top_logprobs[0], null);
    // the last prompt id under the row of the prompt without it
    const n = promptIds.length, row = refRows(path.join(work, 'echo.f32'), echoRef.ids.length)[0];
    assert.ok(Math.abs(lp.token_logprobs[n - 1] - row.lp[promptIds[n - 1]]) < TOL,
      `${lp.token_logprobs[n - 1]} vs ${row.lp[promptIds[n - 1]]}`);
    for (let i = 1; i < n; i++) assert.ok(lp.token_logprobs[i] < 0 && Object.keys(lp.top_logprobs[i]).length >= 2);
    // streamed: the same text and logprobs
    const stream = await c.completions.create({ model, prompt: promptIds, max_tokens: 0, echo: true, logprobs: 2, stream: true });
    let text = '', toks = [];
    for await (const chunk of stream) {
      text += chunk.choices[0].text;
      if (chunk.choices[0].logprobs) toks.push(...chunk.choices[0].logprobs.token_logprobs);
    }
    assert.strictEqual(text, ch.text);
    assert.deepStrictEqual(toks, lp.token_logprobs);
  });

  await check('echo with generation: prompt text then completion, text_offset into both', async () => {
    const prompt = 'Hello world, this is';
    const r = await c.completions.create({ model, prompt, max_tokens: 4, temperature: 0, echo: true, logprobs: 0 });
    const plain = await c.completions.create({ model, prompt, max_tokens: 4, temperature: 0 });
    const ch = r.choices[0], lp = ch.logprobs;
    assert.strictEqual(ch.text, prompt + plain.choices[0].text);
    const chars = [...ch.text];
    assert.strictEqual(lp.tokens.length, r.usage.prompt_tokens + r.usage.completion_tokens);
    for (let i = 0; i + 1 < lp.tokens.length; i++) assert.ok(lp.text_offset[i] <= lp.text_offset[i + 1]);
    for (let i = 0; i < r.usage.prompt_tokens; i++)
      assert.strictEqual(chars.slice(lp.text_offset[i], lp.text_offset[i] + [...lp.tokens[i]].length).join(''), lp.tokens[i]);
    assert.strictEqual(lp.text_offset[r.usage.prompt_tokens], [...prompt].length);
    // without logprobs the echo is the text alone
    const bare = await c.completions.create({ model, prompt, max_tokens: 0, echo: true });
    assert.strictEqual(bare.choices[0].text, prompt);
    assert.strictEqual(bare.choices[0].logprobs, null);
  });

  await check('logit_bias: +100 forces a token, -100 bans the greedy one (the reference row\'s second wins)', async () => {
    const t = await post('/tokenize', { model, prompt: ' blue' });
    assert.strictEqual(t.body.tokens.length, 1, JSON.stringify(t.body));
    const forced = t.body.tokens[0];
    const r = await c.completions.create({ model, prompt: promptIds, max_tokens: 4, temperature: 0, logit_bias: { [forced]: 100 } });
    assert.strictEqual(r.choices[0].text, ' blue'.repeat(4));
    const greedy = cmplRef.ids[0], second = cmplRows[0].order[1];
    assert.strictEqual(cmplRows[0].order[0], greedy);
    const req = { model, prompt: promptIds, max_tokens: 1, temperature: 0, logit_bias: { [greedy]: -100 } };
    const b = await c.completions.create(req);
    assert.strictEqual(b.choices[0].text, await tokenStr(second));
    // the same beside another stream (batch invariance of a biased generation)
    const other = c.completions.create({ model, prompt: 'Some other prompt', max_tokens: 24, temperature: 0, stream: true });
    const [s] = await Promise.all([
      c.completions.create({ ...req, max_tokens: 6 }),
      other.then(async (st) => { for await (const _ of st); }),
    ]);
    const alone = await c.completions.create({ ...req, max_tokens: 6 });
    assert.strictEqual(s.choices[0].text, alone.choices[0].text);
  });

  await check('/tokenize: messages rendered with the template equal the reference prompt ids; errors', async () => {
    const r = await post('/tokenize', { model, messages: [{ role: 'user', content: 'Name a colour.' }],
      chat_template_kwargs: { enable_thinking: false }, return_token_strs: true });
    assert.strictEqual(r.status, 200);
    assert.deepStrictEqual(r.body.tokens, chatRef.prompt_ids);
    assert.strictEqual(r.body.count, chatRef.prompt_ids.length);
    assert.ok(r.body.max_model_len > 0);
    assert.deepStrictEqual(r.body.token_strs, await Promise.all(chatRef.prompt_ids.map(tokenStr)));
    const bad = await post('/detokenize', { model, tokens: [1, 99999999] });
    assert.strictEqual(bad.status, 400);
    assert.strictEqual(bad.body.error.param, 'tokens[1]');
    const neg = await post('/detokenize', { model, tokens: [-1] });
    assert.strictEqual(neg.status, 400);
    const both = await post('/tokenize', { model, prompt: 'x', messages: [] });
    assert.strictEqual(both.status, 400);
    const unknown = await post('/tokenize', { model, prompt: 'x', stream: true });
    assert.strictEqual(unknown.status, 400);
    assert.strictEqual(unknown.body.error.param, 'stream');
  });

  await check('/tokenize and /detokenize equal qwen3d tokenize on the tokenizer corpus', async () => {
    const raw = fs.readFileSync(path.join(work, 'corpus.txt'));
    const lines = [];
    for (let s = 0, i = 0; i <= raw.length; i++)
      if (i === raw.length || raw[i] === 0x0a) {
        if (i > s || i < raw.length) lines.push(raw.subarray(s, i));
        s = i + 1;
      }
    const ids = fs.readFileSync(path.join(work, 'corpus.out'), 'utf8').split('\n');
    const dec = fs.readFileSync(path.join(work, 'corpus.dec'), 'utf8').split('\n').filter((l) => l.length).map((l) => JSON.parse(l).text);
    let checked = 0, next = 0;
    async function one(i) {
      const text = lines[i].toString('utf8');
      // JSON bodies carry no invalid UTF-8, and the API refuses NUL characters in strings
      if (!Buffer.from(text, 'utf8').equals(lines[i]) || text.includes('\0')) return;
      const want = ids[i].trim() ? ids[i].trim().split(' ').map(Number) : [];
      const t = await post('/tokenize', { model, prompt: text, add_special_tokens: true });
      assert.strictEqual(t.status, 200, `line ${i + 1}: ${JSON.stringify(t.body)}`);
      assert.deepStrictEqual(t.body.tokens, want, `line ${i + 1}: ${JSON.stringify(text).slice(0, 80)}`);
      const d = await post('/detokenize', { model, tokens: t.body.tokens });
      assert.strictEqual(d.status, 200, `line ${i + 1}: ${JSON.stringify(d.body)}`);
      assert.strictEqual(d.body.prompt, dec[i], `line ${i + 1}: decode`);
      checked++;
    }
    // four requests in flight: the daemon tokenizes on its work pool
    await Promise.all([0, 1, 2, 3].map(async () => {
      while (next < lines.length) await one(next++);
    }));
    assert.ok(checked > lines.length / 2, `only ${checked} of ${lines.length} lines checked`);
    console.log(`# ${checked} corpus lines through /tokenize and /detokenize`);
  });
}

main().then(() => finish('logprobs-client'), (e) => {
  console.error(e);
  process.exit(1);
});
