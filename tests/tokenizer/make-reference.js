// Builds the tokenizer test corpus (corpus.js) into OUTDIR and runs the
// reference implementation, Hugging Face's `tokenizers`, over it:
//   corpus.txt          one text per line (raw bytes; some lines are invalid UTF-8)
//   corpus.ids          the reference's ids, one line per corpus line
//   corpus.text.jsonl   the text decoding those ids must give: the file's
//                       normalizer applied to the line (invalid bytes replaced
//                       by U+FFFD as the string conversion does), as JSON
//   docs/NAME           multi-line documents, encoded whole; NAME.ids, NAME.text
//   docs.bin            the documents as NUL-terminated records; docs.ids and
//                       docs.text.jsonl their ids and texts, one line each
//   decode.txt          random id sequences (partial UTF-8 sequences, special
//                       tokens); decode.text.jsonl the reference's decoding
// Usage: node make-reference.js TOKENIZER_JSON OUTDIR
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require('tokenizers');
const { build, rng } = require('./corpus.js');

async function main() {
  const [tokFile, out] = process.argv.slice(2);
  if (!tokFile || !out) throw new Error('usage: node make-reference.js TOKENIZER_JSON OUTDIR');
  const tok = Tokenizer.fromFile(tokFile);
  const norm = tok.getNormalizer();
  const normalize = (s) => (norm ? norm.normalizeString(s) : s);
  const { lines, docs } = build();
  fs.mkdirSync(path.join(out, 'docs'), { recursive: true });

  const nl = Buffer.from([0x0a]);
  fs.writeFileSync(path.join(out, 'corpus.txt'), Buffer.concat(lines.flatMap((b) => [b, nl])));
  // Node's UTF-8 decoding replaces each maximal invalid subsequence by one
  // U+FFFD, as Rust's String::from_utf8_lossy does.
  const texts = lines.map((b) => b.toString('utf8'));
  const ids = [];
  for (let i = 0; i < texts.length; i += 2000) {
    const encs = await tok.encodeBatch(texts.slice(i, i + 2000));
    for (const e of encs) ids.push(e.getIds());
  }
  fs.writeFileSync(path.join(out, 'corpus.ids'), ids.map((x) => x.join(' ') + '\n').join(''));

  // The round trip decode(encode(x)) == normalize(x) holds for this corpus;
  // check it on the reference too, so a failure of ours is ours.
  const expect = texts.map(normalize);
  const decoded = await tok.decodeBatch(ids, false);
  for (let i = 0; i < texts.length; i++) {
    if (decoded[i] !== expect[i])
      throw new Error(`reference round trip differs on corpus line ${i + 1}: ${JSON.stringify(texts[i]).slice(0, 200)}`);
  }
  fs.writeFileSync(path.join(out, 'corpus.text.jsonl'), expect.map((s) => JSON.stringify(s) + '\n').join(''));

  // Documents: each on its own, and all of them as NUL-terminated records.
  const docIds = [];
  const docTexts = [];
  for (const d of docs) {
    if (d.bytes.includes(0)) throw new Error(`document ${d.name} holds a NUL byte`);
    const text = d.bytes.toString('utf8');
    const e = await tok.encode(text);
    fs.writeFileSync(path.join(out, 'docs', d.name), d.bytes);
    fs.writeFileSync(path.join(out, 'docs', d.name + '.ids'), e.getIds().join(' ') + '\n');
    const back = await tok.decode(e.getIds(), false);
    if (back !== normalize(text)) throw new Error(`reference round trip differs on document ${d.name}`);
    fs.writeFileSync(path.join(out, 'docs', d.name + '.text'), Buffer.from(back, 'utf8'));
    docIds.push(e.getIds().join(' ') + '\n');
    docTexts.push(JSON.stringify(back) + '\n');
  }
  fs.writeFileSync(path.join(out, 'docs.bin'), Buffer.concat(docs.flatMap((d) => [d.bytes, Buffer.from([0])])));
  fs.writeFileSync(path.join(out, 'docs.ids'), docIds.join(''));
  fs.writeFileSync(path.join(out, 'docs.text.jsonl'), docTexts.join(''));

  // Decoding: sequences of single-byte tokens (which split and break UTF-8
  // sequences), ordinary tokens and special tokens.
  const r = rng(7);
  const vocab = tok.getVocab(true);
  const byteTokens = [];
  for (const [t, id] of Object.entries(vocab)) if ([...t].length === 1 && id < 151643) byteTokens.push(id);
  const n = tok.getVocabSize(true);
  const cases = [];
  for (let k = 0; k < 600; k++) {
    const len = 1 + r.int(24);
    const seq = [];
    for (let i = 0; i < len; i++) {
      const x = r.int(10);
      if (x < 6) seq.push(r.pick(byteTokens));
      else if (x < 9) seq.push(r.int(151643));
      else seq.push(151643 + r.int(n - 151643));
    }
    cases.push(seq);
  }
  const dec = await tok.decodeBatch(cases, false);
  const decSkip = await tok.decodeBatch(cases, true);
  fs.writeFileSync(path.join(out, 'decode.txt'), cases.map((c) => c.join(' ') + '\n').join(''));
  fs.writeFileSync(path.join(out, 'decode.text.jsonl'), dec.map((s) => JSON.stringify(s) + '\n').join(''));
  fs.writeFileSync(path.join(out, 'decode.skip.jsonl'), decSkip.map((s) => JSON.stringify(s) + '\n').join(''));

  const bytes = lines.reduce((a, b) => a + b.length + 1, 0);
  console.log(`reference: ${lines.length} lines (${bytes} bytes), ${docs.length} documents, ${cases.length} decode cases`);
}

main().catch((e) => {
  console.error('make-reference: ' + e.message);
  process.exit(1);
});
