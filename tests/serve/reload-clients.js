// Streams that run through a SIGHUP (tests/serve_keys.sh): opens N streaming
// completions with KEY, prints "open" once every one has its 200 headers,
// then reads each to its end and requires a complete stream: the framing
// (sse-client.js parse), [DONE], a finish_reason, usage.completion_tokens
// equal to the chunks' tokens and to max_tokens unless it stopped early.
// Prints one line per stream and exits 1 if any was dropped or refused.
//
// Usage: node reload-clients.js BASE KEY N MAX_TOKENS
'use strict';
const { post, parse, summarize } = require('./sse-client.js');

const [base, key, nText, maxText] = process.argv.slice(2);
const n = Number(nText), maxTokens = Number(maxText);

async function main() {
  let open = 0;
  const runs = [];
  for (let i = 0; i < n; i++) {
    runs.push(post(base, '/v1/completions', {
      prompt: `stream ${i} runs through a reload`, max_tokens: maxTokens, temperature: 0, stream: true,
      stream_options: { include_usage: true },
    }, {
      headers: { Authorization: `Bearer ${key}`, 'X-Request-Id': `reload-${i}` },
      timeoutMs: 120000,
      onHeaders: () => { if (++open === n) console.log('open'); },
    }));
  }
  const results = await Promise.all(runs);
  let bad = 0;
  results.forEach((r, i) => {
    try {
      if (r.status !== 200) throw new Error(`status ${r.status}: ${r.raw.slice(0, 200)}`);
      if (!r.complete) throw new Error(`dropped: ${r.error}`);
      const s = summarize(parse(r.raw));
      if (s.error) throw new Error(`error event: ${JSON.stringify(s.error)}`);
      if (!['stop', 'length'].includes(s.finish)) throw new Error(`finish_reason ${s.finish}`);
      if (!s.usage || s.usage.completion_tokens < 1) throw new Error(`usage ${JSON.stringify(s.usage)}`);
      if (s.finish === 'length' && s.usage.completion_tokens !== maxTokens)
        throw new Error(`length after ${s.usage.completion_tokens} of ${maxTokens} tokens`);
      console.log(`stream ${i}: complete, ${s.usage.completion_tokens} tokens, ${s.finish}`);
    } catch (e) {
      bad++;
      console.log(`stream ${i}: FAILED: ${e.message}`);
    }
  });
  process.exit(bad ? 1 : 0);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
