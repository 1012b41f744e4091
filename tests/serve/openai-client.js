// The official `openai` npm client against a running `qwen3d serve`:
// models.list, completions and chat completions, streaming and not (greedy
// streams must equal the non-streamed text), usage in streams, the
// client's typed errors for the documented statuses, and the fields that
// are refused rather than ignored (response_format of an unknown type,
// tools of a type other than function); logit_bias out of range. With MODE=auth the
// daemon requires KEY: the right key works, a wrong one is a 401.
//
// usage: node openai-client.js BASE_URL MODEL_NAME [auth KEY]
'use strict';
const assert = require('assert');
const OpenAI = require('openai').default || require('openai');

const [base, model, mode, key] = process.argv.slice(2);
const { check, finish } = require('./checks.js').checks();

function client(apiKey) {
  return new OpenAI({ baseURL: `${base}/v1`, apiKey, maxRetries: 0, timeout: 30000 });
}

async function expectError(fn, Cls, status, code) {
  let err = null;
  try {
    await fn();
  } catch (e) {
    err = e;
  }
  assert.ok(err, 'the call should have failed');
  assert.ok(err instanceof Cls, `expected ${Cls.name}, got ${err && err.constructor.name}: ${err}`);
  assert.strictEqual(err.status, status);
  if (code) assert.strictEqual(err.code, code);
}

async function main() {
  if (mode === 'auth') {
    await check('auth: the right key is accepted', async () => {
      const r = await client(key).completions.create({ model, prompt: 'Hi', max_tokens: 2, temperature: 0 });
      assert.strictEqual(r.choices.length, 1);
    });
    await check('auth: a wrong key is a 401 AuthenticationError', async () => {
      await expectError(() => client(key + 'x').models.list(), OpenAI.AuthenticationError, 401, 'invalid_api_key');
    });
    return;
  }
  const c = client('unused');

  await check('models.list names the served model', async () => {
    const page = await c.models.list();
    assert.deepStrictEqual(page.data.map((m) => m.id), [model]);
  });

  await check('completions: create, and the stream of the same request, agree', async () => {
    const req = { model, prompt: 'The capital of France is', max_tokens: 20, temperature: 0 };
    const r = await c.completions.create(req);
    assert.strictEqual(r.object, 'text_completion');
    assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
    assert.strictEqual(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
    const stream = await c.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
    let text = '', finish = null, usage = null;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      if (!chunk.choices.length) continue;
      text += chunk.choices[0].text;
      finish = chunk.choices[0].finish_reason || finish;
    }
    assert.strictEqual(text, r.choices[0].text);
    assert.strictEqual(finish, r.choices[0].finish_reason);
    assert.deepStrictEqual(usage, r.usage);
  });

  await check('chat: create, and the stream of the same request, agree', async () => {
    const req = {
      model,
      messages: [{ role: 'system', content: 'Answer briefly.' }, { role: 'user', content: 'What is 2+2?' }],
      max_tokens: 16, temperature: 0, chat_template_kwargs: { enable_thinking: false },
    };
    const r = await c.chat.completions.create(req);
    assert.strictEqual(r.object, 'chat.completion');
    assert.strictEqual(r.choices[0].message.role, 'assistant');
    const stream = await c.chat.completions.create({ ...req, stream: true });
    let content = '', finish = null, role = null;
    for await (const chunk of stream) {
      if (!chunk.choices.length) continue;
      const d = chunk.choices[0].delta;
      role = d.role || role;
      content += d.content || '';
      finish = chunk.choices[0].finish_reason || finish;
    }
    assert.strictEqual(role, 'assistant');
    assert.strictEqual(content, r.choices[0].message.content);
    assert.strictEqual(finish, r.choices[0].finish_reason);
  });

  await check('errors: unknown model is NotFoundError, n=2 and bad ranges are BadRequestError', async () => {
    await expectError(() => c.completions.create({ model: 'nope', prompt: 'x' }), OpenAI.NotFoundError, 404, 'model_not_found');
    await expectError(() => c.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }], n: 0 }),
      OpenAI.BadRequestError, 400, 'invalid_value');
    await expectError(() => c.completions.create({ model, prompt: 'x', temperature: 9 }), OpenAI.BadRequestError, 400, 'invalid_value');
    await expectError(() => c.completions.create({ model, prompt: 'x', stream: true, top_p: 0 }), OpenAI.BadRequestError, 400, 'invalid_value');
  });

  // Fields that would change the output and are not implemented are refused,
  // never ignored: the client must not get prose where it asked for JSON.
  const messages = [{ role: 'user', content: 'Give me a JSON object.' }];
  const refused = [
    ['response_format.type', { response_format: { type: 'regex' } }],
    ['tools[0].type', { tools: [{ type: 'custom', custom: { name: 'f' } }] }],
  ];
  for (const [param, extra] of refused) {
    await check(`errors: chat ${param} ${JSON.stringify(extra).slice(0, 40)} is a 400 unsupported_value naming it`, async () => {
      let err = null;
      try {
        await c.chat.completions.create({ model, messages, max_tokens: 4, ...extra });
      } catch (e) {
        err = e;
      }
      assert.ok(err instanceof OpenAI.BadRequestError, `expected BadRequestError, got ${err}`);
      assert.strictEqual(err.status, 400);
      assert.strictEqual(err.code, 'unsupported_value');
      assert.strictEqual(err.param, param);
    });
  }
  await check('errors: a logit_bias outside the vocabulary or past 100, and echo on chat, are a 400', async () => {
    await expectError(() => c.completions.create({ model, prompt: 'x', logit_bias: { 999999999: 100 } }), OpenAI.BadRequestError, 400, 'invalid_value');
    await expectError(() => c.completions.create({ model, prompt: 'x', logit_bias: { 9707: 101 } }), OpenAI.BadRequestError, 400, 'invalid_value');
    await expectError(() => c.chat.completions.create({ model, messages, echo: true }), OpenAI.BadRequestError, 400, 'unsupported_value');
  });
}

main().then(() => {
  finish(`openai-client${mode ? ' (' + mode + ')' : ''}`);
}, (e) => {
  console.error(e);
  process.exit(1);
});
