// Structured output through the official `openai` npm client against a
// running `qwen3d serve`: for each schema of SCHEMAS_JSON, COUNT requests
// at temperature 0 and COUNT at 0.8 (seeded) with response_format
// json_schema; every answer must end with finish_reason "stop", parse and
// validate with ajv (draft 2020-12, ajv-formats), whatever the model's
// weights (random ones never write JSON by themselves). Streamed answers
// must concatenate to the non-streamed one of the same seed. JSON mode
// (json_object) answers that end with "stop" must be JSON objects. Schemas
// outside the supported subset, past a limit or invalid get a 400 naming the
// keyword, its JSON pointer or the limits.
//
// usage: node structured.js BASE_URL MODEL_NAME SCHEMAS_JSON COUNT [MAX_TOKENS]
'use strict';
const assert = require('assert');
const fs = require('fs');
const OpenAI = require('openai').default || require('openai');
const Ajv2020 = require('ajv/dist/2020').default;
const addFormats = require('ajv-formats');

const [base, model, schemasFile, countArg, maxArg] = process.argv.slice(2);
const count = Number(countArg);
const maxTokens = Number(maxArg || 400);
const cases = JSON.parse(fs.readFileSync(schemasFile, 'utf8'));
const { check, finish } = require('./checks.js').checks();
const c = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'none', maxRetries: 0, timeout: 300000 });
const ajv = new Ajv2020({ strict: false });
addFormats(ajv);
const messages = [{ role: 'user', content: 'Answer with JSON.' }];

function format(i, strict) {
  return { type: 'json_schema', json_schema: { name: `case_${i}`, schema: cases[i].schema, strict } };
}

async function ask(extra) {
  return c.chat.completions.create({ model, messages, max_tokens: maxTokens, ...extra });
}

async function streamed(extra) {
  const s = await c.chat.completions.create({ model, messages, max_tokens: maxTokens, stream: true, ...extra });
  let text = '';
  let reason = null;
  for await (const chunk of s) {
    const ch = chunk.choices[0];
    if (!ch) continue;
    if (ch.delta && ch.delta.content) text += ch.delta.content;
    if (ch.finish_reason) reason = ch.finish_reason;
  }
  return { text, reason };
}

// Runs FNS with at most N at once (the daemon batches them).
async function pool(fns, n) {
  const out = new Array(fns.length);
  let next = 0;
  async function worker() {
    while (next < fns.length) {
      const i = next++;
      out[i] = await fns[i]();
    }
  }
  await Promise.all(Array.from({ length: n }, worker));
  return out;
}

async function expect400(extra, code, param, pattern) {
  let err = null;
  try {
    await ask({ max_tokens: 4, ...extra });
  } catch (e) {
    err = e;
  }
  assert.ok(err instanceof OpenAI.BadRequestError, `expected BadRequestError, got ${err}`);
  assert.strictEqual(err.code, code);
  assert.strictEqual(err.param, param);
  assert.match(err.message, pattern);
}

async function main() {
  const jobs = [];
  cases.forEach((cs, i) => {
    for (const temperature of [0, 0.8])
      for (let k = 0; k < count; k++)
        jobs.push({ i, temperature, seed: 1000 + k, strict: k % 2 === 0 });
  });
  let tokens = 0;
  const answers = await pool(jobs.map((j) => async () => {
    try {
      return await ask({ temperature: j.temperature, seed: j.seed, response_format: format(j.i, j.strict) });
    } catch (e) {
      return { error: e };
    }
  }), 4);
  const bad = [];
  answers.forEach((r, n) => {
    const j = jobs[n];
    const where = `case ${j.i} (${cases[j.i].name}) T=${j.temperature} seed ${j.seed}`;
    if (r.error) return bad.push(`${where}: ${r.error}`);
    const ch = r.choices[0];
    tokens += r.usage.completion_tokens;
    if (ch.finish_reason !== 'stop') return bad.push(`${where}: finish_reason ${ch.finish_reason}: ${ch.message.content.slice(0, 200)}`);
    let v;
    try {
      v = JSON.parse(ch.message.content);
    } catch (e) {
      return bad.push(`${where}: does not parse: ${ch.message.content.slice(0, 200)}`);
    }
    const validate = ajv.compile(cases[j.i].schema);
    if (!validate(v)) bad.push(`${where}: ${ajv.errorsText(validate.errors)}: ${ch.message.content.slice(0, 200)}`);
  });
  await check(`json_schema: ${jobs.length} answers over ${cases.length} schemas at T=0 and T=0.8 all parse and validate`, async () => {
    assert.deepStrictEqual(bad, []);
  });
  console.log(`# ${jobs.length} answers, ${(tokens / jobs.length).toFixed(1)} completion tokens each`);

  await check('json_schema: streamed answers concatenate to the non-streamed ones', async () => {
    const firsts = jobs.map((j, n) => [j, n]).filter(([j]) => j.seed === 1000);
    const got = await pool(firsts.map(([j]) => () =>
      streamed({ temperature: j.temperature, seed: j.seed, response_format: format(j.i, j.strict) })), 4);
    firsts.forEach(([j, n], k) => {
      assert.strictEqual(got[k].text, answers[n].choices[0].message.content, `case ${j.i} T=${j.temperature}`);
      assert.strictEqual(got[k].reason, 'stop');
    });
  });

  await check('json_object: answers that end with "stop" are JSON objects', async () => {
    const got = await pool([0, 0.8].flatMap((temperature) => [1, 2].map((seed) => () =>
      ask({ temperature, seed, max_tokens: 64, response_format: { type: 'json_object' } }))), 4);
    let stops = 0;
    for (const r of got) {
      const ch = r.choices[0];
      assert.ok(ch.message.content.startsWith('{'), ch.message.content);
      if (ch.finish_reason !== 'stop') continue;
      stops++;
      const v = JSON.parse(ch.message.content);
      assert.ok(v !== null && typeof v === 'object' && !Array.isArray(v));
    }
    console.log(`# json_object: ${stops} of ${got.length} ended with "stop", the others at max_tokens`);
  });

  await check('errors: an unsupported keyword is a 400 naming it and its JSON pointer', async () => {
    const schema = { type: 'object', properties: { age: { type: 'integer', minimum: 3 } } };
    await expect400({ response_format: { type: 'json_schema', json_schema: { name: 'a', schema } } }, 'unsupported_value',
      'response_format.json_schema.schema', /"minimum".*'\/properties\/age\/minimum'/);
  });
  await check('errors: a schema past a limit is a 400 stating the limits', async () => {
    const schema = { enum: Array.from({ length: 1025 }, (_, i) => i) };
    await expect400({ response_format: { type: 'json_schema', json_schema: { name: 'a', schema } } }, 'invalid_value',
      'response_format.json_schema.schema', /enum.*limits are .*1024 enum values/);
  });
  await check('errors: an invalid schema, a missing name, an unknown type are 400s', async () => {
    await expect400({ response_format: { type: 'json_schema', json_schema: { name: 'a', schema: { type: 'frob' } } } },
      'invalid_value', 'response_format.json_schema.schema', /"type" names no JSON type.*'\/type'/);
    await expect400({ response_format: { type: 'json_schema', json_schema: { schema: { type: 'object' } } } },
      'missing_required_parameter', 'response_format.json_schema.name', /name/);
    await expect400({ response_format: { type: 'json_schema', json_schema: { name: 'a', schema: {}, extra: 1 } } },
      'unsupported_value', 'response_format.json_schema.extra', /extra/);
  });
  finish('structured.js');
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
