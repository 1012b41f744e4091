// Compares qwen3d's output with the reference's, line by line, and on the
// first difference prints the line number, the input and both outputs, then
// exits 1.
//   node compare.js ids  INPUT EXPECTED.ids  GOT     (space-separated ids per line)
//   node compare.js text INPUT EXPECTED.jsonl GOT    (GOT: {"text":...} per line)
// A last argument "null" reads INPUT as NUL-terminated records instead of lines.
'use strict';
const fs = require('fs');

function readLines(file, sep = 0x0a) {
  const s = fs.readFileSync(file);
  const out = [];
  let start = 0;
  for (let i = 0; i < s.length; i++) {
    if (s[i] === sep) {
      out.push(s.subarray(start, i));
      start = i + 1;
    }
  }
  if (start < s.length) out.push(s.subarray(start));
  return out;
}

const clip = (s, n = 300) => (s.length > n ? s.slice(0, n) + `... (${s.length} chars)` : s);

function main() {
  const [mode, inputFile, expectFile, gotFile, records] = process.argv.slice(2);
  if (!['ids', 'text'].includes(mode) || !gotFile) {
    console.error('usage: node compare.js ids|text INPUT EXPECTED GOT');
    process.exit(2);
  }
  const input = readLines(inputFile, records === 'null' ? 0 : 0x0a);
  const expect = readLines(expectFile).map((b) => b.toString('utf8'));
  const got = readLines(gotFile).map((b) => b.toString('utf8'));
  const n = Math.max(expect.length, got.length);
  for (let i = 0; i < n; i++) {
    let e = expect[i];
    let g = got[i];
    if (mode === 'text') {
      e = e === undefined ? e : JSON.parse(e);
      try {
        g = g === undefined ? g : JSON.parse(g).text;
      } catch (err) {
        g = `(not JSON: ${g})`;
      }
    }
    if (e !== g) {
      const text = input[i] ? input[i].toString('utf8') : '(no input line)';
      const raw = input[i] ? input[i].toString('hex') : '';
      console.error(`MISMATCH at ${records === 'null' ? 'record' : 'line'} ${i + 1} of ${n} (${mode})`);
      console.error(`  input:    ${clip(JSON.stringify(text))}`);
      if (raw.length <= 200) console.error(`  bytes:    ${raw}`);
      console.error(`  expected: ${clip(e === undefined ? '(missing line)' : JSON.stringify(e))}`);
      console.error(`  got:      ${clip(g === undefined ? '(missing line)' : JSON.stringify(g))}`);
      process.exit(1);
    }
  }
  console.log(`${mode}: ${n} lines identical`);
}

main();
