// Checks the outputs of tests/grammar/walk against their schemas with ajv
// (draft 2020-12, formats from ajv-formats), independently of the grammar
// code: every text must parse as JSON and validate; tool-call cases must
// be Qwen3 tool calls whose arguments validate against the named tool's
// parameters.
//
// Usage: node validate.js CASES_JSON OUT_JSONL WALKS
// Prints one line per case (walks checked, mean tokens) and a summary;
// exits 1 on any failure or a missing walk.
'use strict';
const fs = require('fs');
const Ajv2020 = require('ajv/dist/2020').default;
const addFormats = require('ajv-formats');

const [casesFile, outFile, walksArg] = process.argv.slice(2);
const cases = JSON.parse(fs.readFileSync(casesFile, 'utf8'));
const walks = Number(walksArg);
const lines = fs.readFileSync(outFile, 'utf8').split('\n').filter((l) => l.length);
const ajv = new Ajv2020({ strict: false, allErrors: false });
addFormats(ajv);

let failed = 0;
const byCase = cases.map(() => []);
for (const l of lines) {
  const r = JSON.parse(l);
  byCase[r.case].push(r);
}

function fail(i, msg, text) {
  failed++;
  console.log(`FAIL case ${i} (${cases[i].name}): ${msg}: ${JSON.stringify(text).slice(0, 300)}`);
}

// Qwen3's tool-call blocks, as its chat template writes them; returns null if TEXT is not that.
function toolCalls(text, auto) {
  const re = /<tool_call>\n([\s\S]*?)\n<\/tool_call>/g;
  let first = text.indexOf('<tool_call>');
  if (first < 0) return auto ? [] : null;
  const before = text.slice(0, first);
  if (!auto && before.length) return null;
  const rest = text.slice(first);
  const calls = [];
  let m;
  let at = 0;
  while ((m = re.exec(rest)) !== null) {
    if (m.index !== at) return null;
    calls.push(m[1]);
    at = m.index + m[0].length;
    if (rest[at] === '\n') at++;
  }
  if (at !== rest.length) return null;
  return calls;
}

cases.forEach((c, i) => {
  const outs = byCase[i];
  if (outs.length !== walks) fail(i, `${outs.length} walks of ${walks}`, '');
  let tokens = 0;
  if (c.schema !== undefined) {
    const validate = ajv.compile(c.schema);
    for (const o of outs) {
      tokens += o.tokens;
      let v;
      try {
        v = JSON.parse(o.text);
      } catch (e) {
        fail(i, `not JSON (${e.message})`, o.text);
        continue;
      }
      if (!validate(v)) fail(i, ajv.errorsText(validate.errors), o.text);
    }
  } else {
    const tools = new Map(c.tools.map((t) => [t.name, ajv.compile(t.parameters || { type: 'object' })]));
    for (const o of outs) {
      tokens += o.tokens;
      const calls = toolCalls(o.text, c.mode === 'auto');
      if (calls === null) {
        fail(i, 'not tool calls in the Qwen3 form', o.text);
        continue;
      }
      if (!c.parallel && calls.length > 1) fail(i, 'several calls without parallel_tool_calls', o.text);
      for (const body of calls) {
        let call;
        try {
          call = JSON.parse(body);
        } catch (e) {
          fail(i, `call not JSON (${e.message})`, body);
          continue;
        }
        const keys = Object.keys(call);
        if (keys.length !== 2 || keys[0] !== 'name' || keys[1] !== 'arguments') {
          fail(i, 'call is not {"name", "arguments"}', body);
          continue;
        }
        const validate = tools.get(call.name);
        if (!validate) fail(i, `unknown tool ${call.name}`, body);
        else if (!validate(call.arguments)) fail(i, ajv.errorsText(validate.errors), body);
      }
    }
  }
  console.log(`case ${i} (${c.name}): ${outs.length} walks, ${(tokens / Math.max(1, outs.length)).toFixed(1)} tokens on average`);
});
const total = lines.length;
console.log(`${total - failed} passed, ${failed} failed`);
process.exit(failed || total !== walks * cases.length ? 1 : 0);
