// Reference side of bench/tokenizer-bench.sh: writes the tokenizer test
// corpus (tests/tokenizer/corpus.js) and times Hugging Face's `tokenizers` on
// it. Prints one JSON object per mode with bytes and seconds per run.
// Usage: node tokenizer-bench.js TOKENIZER_JSON OUTDIR RUNS
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require('tokenizers');
const { build } = require('../tests/tokenizer/corpus.js');

async function time(fn) {
  const t0 = process.hrtime.bigint();
  await fn();
  return Number(process.hrtime.bigint() - t0) / 1e9;
}

async function main() {
  const [tokFile, out, runsArg] = process.argv.slice(2);
  const runs = Number(runsArg || 5);
  const tok = Tokenizer.fromFile(tokFile);
  const { lines } = build();
  fs.mkdirSync(out, { recursive: true });
  const nl = Buffer.from([0x0a]);
  const corpus = Buffer.concat(lines.flatMap((b) => [b, nl]));
  fs.writeFileSync(path.join(out, 'corpus.txt'), corpus);
  const texts = lines.map((b) => b.toString('utf8'));
  const whole = corpus.toString('utf8');
  const lineBytes = lines.reduce((a, b) => a + b.length, 0);
  await tok.encode('warm up');

  const modes = {
    // The whole corpus as one text, one call.
    whole: [corpus.length, () => tok.encode(whole)],
    // Each line on its own, one call after another (one thread).
    lines: [lineBytes, async () => { for (const t of texts) await tok.encode(t); }],
    // Each line on its own, in batches the library spreads over all cores.
    batch: [lineBytes, async () => { for (let i = 0; i < texts.length; i += 1000) await tok.encodeBatch(texts.slice(i, i + 1000)); }],
  };
  for (const [mode, [bytes, fn]] of Object.entries(modes)) {
    const secs = [];
    for (let r = 0; r < runs; r++) secs.push(await time(fn));
    console.log(JSON.stringify({ mode, bytes, secs }));
  }
}

main().catch((e) => {
  console.error('tokenizer-bench.js: ' + e.message);
  process.exit(1);
});
