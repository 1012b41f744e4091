// Tool calls through the official `openai` npm client against a running
// `qwen3d serve` (random weights: every call's structure comes from the
// constraint). The object schemas of SCHEMAS_JSON become functions fn_I.
//  - tool_choice "required" (two tools offered) and a named function, at
//    temperature 0 and 0.8, COUNT seeds each, parallel_tool_calls false:
//    every answer is one call, finish_reason "tool_calls", content null,
//    the name one offered (the named one), the arguments parse and
//    validate with ajv (draft 2020-12, ajv-formats);
//  - parallel_tool_calls true: every call that closed validates;
//  - streamed tool-call deltas (OpenAI's format: the first of a call with
//    index, id, type, name and "" arguments, then argument pieces) join to
//    the non-streamed message of the same seed, ids included;
//  - n = 2 with tool_choice required: each choice's call validates, the
//    choices' ids differ, choice 0 is the single request's answer, and a
//    stream's deltas, per choice index, join to the non-streamed choices;
//  - auto: without a call it answers as tool_choice none (the content's
//    surrounding whitespace dropped); with
//    <tool_call> pushed by logit_bias the call that follows validates;
//  - JSON mode (response_format json_object) answers all parse as objects;
//  - bad tools and tool_choice values are 400s naming the field;
//  - /metrics counts the answers with calls as finished_reason "tool_calls".
//
// usage: node tools.js BASE_URL MODEL_NAME SCHEMAS_JSON COUNT [MAX_TOKENS]
'use strict';
const assert = require('assert');
const fs = require('fs');
const OpenAI = require('openai').default || require('openai');
const Ajv2020 = require('ajv/dist/2020').default;
const addFormats = require('ajv-formats');

const [base, model, schemasFile, countArg, maxArg] = process.argv.slice(2);
const count = Number(countArg);
const maxTokens = Number(maxArg || 400);
const all = JSON.parse(fs.readFileSync(schemasFile, 'utf8'));
const cases = all.filter((c) => c.schema.type === 'object');
const { check, finish } = require('./checks.js').checks();
const c = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'none', maxRetries: 0, timeout: 300000 });
const ajv = new Ajv2020({ strict: false });
addFormats(ajv);
const validators = cases.map((cs) => ajv.compile(cs.schema));
const messages = [{ role: 'user', content: 'Call a tool.' }];

function tool(i) {
  return { type: 'function', function: { name: `fn_${i}`, description: cases[i].name, parameters: cases[i].schema } };
}

async function ask(extra) {
  return c.chat.completions.create({ model, messages, max_tokens: maxTokens, ...extra });
}

// A stream's content, tool calls (joined from their deltas, checking the delta format) and finish_reason.
async function streamed(extra) {
  const s = await c.chat.completions.create({ model, messages, max_tokens: maxTokens, stream: true, ...extra });
  let content = '';
  let reason = null;
  const calls = [];
  for await (const chunk of s) {
    const ch = chunk.choices[0];
    if (!ch) continue;
    if (ch.delta && ch.delta.content) content += ch.delta.content;
    for (const d of (ch.delta && ch.delta.tool_calls) || []) {
      if (d.index === calls.length) {
        assert.strictEqual(d.type, 'function');
        assert.strictEqual(d.function.arguments, '');
        assert.ok(d.id && d.function.name, JSON.stringify(d));
        calls.push({ id: d.id, type: 'function', function: { name: d.function.name, arguments: '' } });
      } else {
        assert.strictEqual(d.index, calls.length - 1, JSON.stringify(d));
        assert.strictEqual(d.id, undefined);
        assert.strictEqual(d.function.name, undefined);
        calls[d.index].function.arguments += d.function.arguments;
      }
    }
    if (ch.finish_reason) reason = ch.finish_reason;
  }
  return { content, calls, reason };
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

// Problems with one call: its name among NAMES, its arguments valid for that tool's schema.
function callProblems(call, names) {
  const name = call.function.name;
  if (!names.includes(name)) return `called ${name}, not one of ${names}`;
  let v;
  try {
    v = JSON.parse(call.function.arguments);
  } catch (e) {
    return `arguments do not parse: ${call.function.arguments.slice(0, 200)}`;
  }
  const validate = validators[Number(name.slice(3))];
  return validate(v) ? null : `${ajv.errorsText(validate.errors)}: ${call.function.arguments.slice(0, 200)}`;
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
    const other = (i + 1) % cases.length;
    for (const temperature of [0, 0.8])
      for (let k = 0; k < count; k++) {
        jobs.push({ i, temperature, seed: 2000 + k, tools: [tool(i), tool(other)], choice: 'required',
                    names: [`fn_${i}`, `fn_${other}`] });
        jobs.push({ i, temperature, seed: 3000 + k, tools: [tool(other), tool(i)],
                    choice: { type: 'function', function: { name: `fn_${i}` } }, names: [`fn_${i}`] });
      }
  });
  const req = (j) => ({ temperature: j.temperature, seed: j.seed, tools: j.tools, tool_choice: j.choice,
                        parallel_tool_calls: false });
  const answers = await pool(jobs.map((j) => async () => {
    try {
      return await ask(req(j));
    } catch (e) {
      return { error: e };
    }
  }), 4);
  const bad = [];
  let tokens = 0;
  answers.forEach((r, n) => {
    const j = jobs[n];
    const where = `fn_${j.i} (${cases[j.i].name}) ${JSON.stringify(j.choice)} T=${j.temperature} seed ${j.seed}`;
    if (r.error) return bad.push(`${where}: ${r.error}`);
    tokens += r.usage.completion_tokens;
    const ch = r.choices[0];
    if (ch.finish_reason !== 'tool_calls') return bad.push(`${where}: finish_reason ${ch.finish_reason}`);
    if (ch.message.content !== null) bad.push(`${where}: content ${JSON.stringify(ch.message.content)}`);
    const calls = ch.message.tool_calls || [];
    if (calls.length !== 1) return bad.push(`${where}: ${calls.length} calls`);
    if (!/^call_[A-Za-z0-9]{24}$/.test(calls[0].id) || calls[0].type !== 'function')
      bad.push(`${where}: id ${calls[0].id}, type ${calls[0].type}`);
    const p = callProblems(calls[0], j.names);
    if (p) bad.push(`${where}: ${p}`);
  });
  await check(`required and named: ${jobs.length} calls over ${cases.length} schemas at T=0 and T=0.8 all validate`,
    async () => assert.deepStrictEqual(bad, []));
  console.log(`# ${jobs.length} answers, ${(tokens / jobs.length).toFixed(1)} completion tokens each`);

  await check('streamed tool-call deltas join to the non-streamed message of the same seed', async () => {
    const firsts = jobs.map((j, n) => [j, n]).filter(([j]) => j.seed % 1000 === 0);
    const got = await pool(firsts.map(([j]) => () => streamed(req(j))), 4);
    firsts.forEach(([j, n], k) => {
      const msg = answers[n].choices[0].message;
      assert.strictEqual(got[k].content, '', `fn_${j.i} T=${j.temperature}`);
      assert.deepStrictEqual(got[k].calls, msg.tool_calls, `fn_${j.i} T=${j.temperature}`);
      assert.strictEqual(got[k].reason, 'tool_calls');
    });
  });

  await check('parallel_tool_calls: every call that closed validates, and a stream joins to the same calls', async () => {
    const small = cases.findIndex((cs) => cs.name === 'flat object, all required');
    const i = small >= 0 ? small : 0;
    const reqs = [0, 0.8].flatMap((temperature) => [1, 2].map((seed) => ({ temperature, seed, tools: [tool(i)],
      tool_choice: 'required' })));
    const got = await pool(reqs.map((q) => () => ask(q)), 4);
    let n = 0;
    got.forEach((r, k) => {
      const ch = r.choices[0];
      const calls = ch.message.tool_calls || [];
      assert.ok(calls.length >= 1);
      const closed = ch.finish_reason === 'tool_calls' ? calls : calls.slice(0, -1);
      for (const call of closed) {
        assert.strictEqual(callProblems(call, [`fn_${i}`]), null, JSON.stringify(reqs[k]));
        n++;
      }
    });
    const s = await streamed(reqs[0]);
    assert.deepStrictEqual(s.calls, got[0].choices[0].message.tool_calls);
    console.log(`# parallel: ${n} closed calls in ${got.length} answers`);
  });

  await check('n = 2, required: each choice calls and validates, ids differ, a stream joins per choice', async () => {
    const tools = [tool(0), tool(1)];
    for (const temperature of [0, 0.8]) {
      const q = { temperature, seed: 11, tools, tool_choice: 'required', parallel_tool_calls: false };
      const [r, solo] = await Promise.all([ask({ ...q, n: 2 }), ask(q)]);
      assert.strictEqual(r.choices.length, 2);
      const ids = r.choices.map((ch, k) => {
        assert.strictEqual(ch.index, k);
        assert.strictEqual(ch.finish_reason, 'tool_calls', `T=${temperature} choice ${k}`);
        assert.strictEqual(ch.message.tool_calls.length, 1);
        assert.strictEqual(callProblems(ch.message.tool_calls[0], ['fn_0', 'fn_1']), null, `T=${temperature} choice ${k}`);
        return ch.message.tool_calls[0].id;
      });
      assert.notStrictEqual(ids[0], ids[1], `T=${temperature}: both choices have id ${ids[0]}`);
      assert.deepStrictEqual(r.choices[0].message, solo.choices[0].message, `T=${temperature}: choice 0 is the solo answer`);
      const s = await c.chat.completions.create({ model, messages, max_tokens: maxTokens, stream: true, ...q, n: 2 });
      const calls = [[], []];
      const reasons = [null, null];
      for await (const chunk of s) {
        for (const ch of chunk.choices) {
          for (const d of (ch.delta && ch.delta.tool_calls) || []) {
            const mine = calls[ch.index];
            if (d.index === mine.length) mine.push({ id: d.id, type: d.type, function: { ...d.function } });
            else mine[d.index].function.arguments += d.function.arguments;
          }
          if (ch.finish_reason) reasons[ch.index] = ch.finish_reason;
        }
      }
      assert.deepStrictEqual(reasons, ['tool_calls', 'tool_calls']);
      assert.deepStrictEqual(calls, r.choices.map((ch) => ch.message.tool_calls), `T=${temperature}: stream per choice`);
    }
  });

  await check('auto: without a call the answer is tool_choice none\'s; a call opened by <tool_call> validates', async () => {
    const tools = [tool(0), tool(1)];
    const q = { temperature: 0, seed: 5, max_tokens: 24, tools };
    const [auto, none] = await Promise.all([ask({ ...q, tool_choice: 'auto' }), ask({ ...q, tool_choice: 'none' })]);
    assert.strictEqual(auto.choices[0].message.tool_calls, undefined);
    // with tools in play the content loses its surrounding whitespace (the newlines around calls)
    assert.strictEqual(auto.choices[0].message.content, none.choices[0].message.content.replace(/^[ \n\r\t]+|[ \n\r\t]+$/g, ''));
    const tok = await (await fetch(`${base}/tokenize`, { method: 'POST', body: JSON.stringify({ prompt: '<tool_call>' }) })).json();
    assert.strictEqual(tok.count, 1);
    for (const temperature of [0, 0.8]) {
      const r = await ask({ temperature, seed: 9, tools, tool_choice: 'auto', parallel_tool_calls: false,
                            logit_bias: { [tok.tokens[0]]: 100 } });
      const ch = r.choices[0];
      assert.strictEqual(ch.finish_reason, 'tool_calls');
      assert.strictEqual(ch.message.tool_calls.length, 1);
      assert.strictEqual(callProblems(ch.message.tool_calls[0], ['fn_0', 'fn_1']), null);
      assert.strictEqual(ch.message.content, null);
    }
    const r = await ask({ tool_choice: 'none', tools, temperature: 0, seed: 9, max_tokens: 24,
                          logit_bias: { [tok.tokens[0]]: 100 } });
    assert.strictEqual(r.choices[0].message.tool_calls, undefined, 'none parses no call');
    assert.ok(r.choices[0].message.content.startsWith('<tool_call>'));
  });

  await check('json_object: every answer parses as an object', async () => {
    const got = await pool([0, 0.8].flatMap((temperature) => [1, 2, 3, 4, 5].map((seed) => () =>
      ask({ temperature, seed, max_tokens: 600, response_format: { type: 'json_object' } }))), 4);
    for (const r of got) {
      const ch = r.choices[0];
      assert.strictEqual(ch.finish_reason, 'stop', ch.message.content.slice(0, 200));
      const v = JSON.parse(ch.message.content);
      assert.ok(v !== null && typeof v === 'object' && !Array.isArray(v));
    }
  });

  await check('errors: bad tools and tool_choice values are 400s naming the field', async () => {
    const t = [tool(0)];
    await expect400({ tools: t, tool_choice: { type: 'function', function: { name: 'nope' } } }, 'invalid_value',
      'tool_choice.function.name', /"nope" is not one of the request's tools/);
    await expect400({ tool_choice: 'required' }, 'invalid_value', 'tool_choice', /'tools' is empty/);
    const badParams = { type: 'object', properties: { age: { type: 'integer', minimum: 3 } } };
    await expect400({ tools: [tool(0), { type: 'function', function: { name: 'g', parameters: badParams } }],
      tool_choice: 'none' }, 'unsupported_value', 'tools[1].function.parameters',
      /"minimum".*'\/tools\/1\/function\/parameters\/properties\/age\/minimum'/);
    const huge = { type: 'object', properties: { e: { enum: Array.from({ length: 1025 }, (_, i) => i) } } };
    await expect400({ tools: [{ type: 'function', function: { name: 'h', parameters: huge } }] }, 'invalid_value',
      'tools[0].function.parameters', /limits are .*1024 enum values/);
    await expect400({ tools: [{ type: 'function', function: { name: 'a b' } }] }, 'invalid_value',
      'tools[0].function.name', /1 to 64/);
    await expect400({ tools: t, response_format: { type: 'json_object' } }, 'unsupported_value', 'response_format',
      /tool_choice/);
    await expect400({ tools: Array.from({ length: 129 }, (_, i) => ({ type: 'function', function: { name: `f${i}` } })) },
      'invalid_value', 'tools', /at most 128/);
  });
  await check('metrics: answers that made calls count as finished_reason "tool_calls"', async () => {
    const text = await (await fetch(`${base}/metrics`)).text();
    const m = text.match(/^qwen3d_request_finished_total\{[^}]*finished_reason="tool_calls"[^}]*\} (\d+)/m);
    assert.ok(m && Number(m[1]) >= jobs.length, m ? m[0] : 'no tool_calls series');
  });
  finish('tools.js');
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
