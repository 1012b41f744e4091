// Prompt-prefix reuse of `qwen3d serve`, with the prefix cache on and off in
// one run, on Node's built-in modules alone.
//
// Two daemons of the same build stay loaded side by side (an idle one uses
// no CPU): "on" with its defaults, "off" with --no-prefix-cache. Each first
// serves one warm-up request that shares no token with what follows. Each
// round runs every part on both, "on" first in even rounds and "off" first
// in odd ones, each round with texts of its own.
//
// Part "prefix": N (5) requests in a row to /v1/completions, text prompts of
// a shared prefix of P (1,200) words and a distinct tail of T (20) words. The
// words are common English words that are one token each with their leading
// space, so the prefix is P tokens and the tails part at their first token.
// Per request: prompt tokens, usage.prompt_tokens_details.cached_tokens
// (where the daemon reports it), the shared length (below), TTFT as the
// client sees it and the daemon's timings.prompt_ms. Per daemon: the cold
// TTFT of request 1, the p50 of requests 2..N and their ratio (target with
// the cache on: <= 0.1).
//
// Part "chat": a conversation of K (10) turns through /v1/chat/completions,
// the daemon rendering the Qwen3 template: a system prompt of S (150) words,
// then per turn the whole history (earlier user messages, and the assistant
// messages as the client received them) plus a new user message of U (20)
// words; greedy, max_tokens G (64). Once with chat_template_kwargs.
// enable_thinking true and once false. Per turn: prompt tokens, cached_tokens,
// the shared length, what the turn loses against the previous prompt
// (previous prompt tokens minus cached_tokens, and minus the shared length),
// how many more tokens a cache of the previous reply's ids would match, TTFT
// and the daemon's timings. The template drops earlier turns' think blocks, and with
// enable_thinking false the previous prompt ends in an empty think block the
// next prompt does not repeat; the "lost" columns show what that costs. The
// daemon caches the rows of rendered prompts, not of generated ids; the
// "+reply ids" column is the gain a cache of the previous prompt followed by
// its reply's ids would add (the reply's text tokenized again, which may
// differ from the generated ids).
//
// Shared length: the longest common prefix, in token ids, of a prompt and
// any earlier prompt sent to the same daemon, at most the prompt minus one
// token (the last prompt token is always fed for its logits): what a cache
// of every prompt's rows, without eviction, can reuse. The client computes it
// with `qwen3d tokenize` on the texts it sent; for chat it renders the
// template itself (system, user and assistant messages, no tools) and checks
// each rendered length against usage.prompt_tokens (a mismatch is printed).
// With the cache on, cached_tokens should equal it, unless the cache's byte
// budget evicted the entry.
//
// usage:
//   node bench/prefix-bench.js --qwen3d BIN --model DIR [--threads T] [--part prefix|chat|both]
//     [--rounds R (1)] [--prefix-words P (1200)] [--tail-words T (20)] [--requests N (5)]
//     [--turns K (10)] [--system-words S (150)] [--user-words U (20)] [--gen G (64)] [--json]
// The model folder needs a tokenizer (`qwen3d synth --tokenizer DIR`).
// Speed is reported, never asserted.
'use strict';
const path = require('path');
const { execFileSync } = require('child_process');
const hc = require('./http-common');
const { median, fmt: f } = hc;

// Common English words, each one token of the Qwen3 tokenizer with a leading space.
const WORDS = ('time person year way day thing man world life hand part child eye woman place work week case ' +
  'point government company number group problem fact house water money story month lot right study book job ' +
  'word business issue side kind head service friend power hour game line end member law car city community ' +
  'name president team minute idea body information back parent face others level office door health art war ' +
  'history party result change morning reason research girl guy moment air teacher force education river ' +
  'garden window table paper music market letter light voice field price stone bridge road sound heart summer ' +
  'winter spring evening island village forest mountain ocean season answer question picture color animal ' +
  'plant energy machine report model system program order plan design value process signal figure record')
  .split(' ');

// Tokens generated per request of the prefix part: only its TTFT counts.
const PREFIX_GEN = 8;

const usage = hc.makeUsage('prefix-bench',
  'usage: node prefix-bench.js --qwen3d BIN --model DIR [--threads T] [--part prefix|chat|both]\n' +
  '         [--rounds R] [--prefix-words P] [--tail-words T] [--requests N]\n' +
  '         [--turns K] [--system-words S] [--user-words U] [--gen G] [--json]');

function parseArgs(argv) {
  const o = hc.parseOptions(argv, {
    ints: { '--threads': 'threads', '--system-words': 'systemWords' },
    pos: { '--rounds': 'rounds', '--prefix-words': 'prefixWords', '--tail-words': 'tailWords', '--requests': 'requests',
      '--turns': 'turns', '--user-words': 'userWords', '--gen': 'gen' },
    strs: { '--qwen3d': 'qwen3d', '--model': 'model', '--part': 'part' },
    flags: { '--json': 'json' },
  }, { threads: 0, rounds: 1, prefixWords: 1200, tailWords: 20, requests: 5, turns: 10, systemWords: 150,
    userWords: 20, gen: 64, part: 'both', json: false, qwen3d: null, model: null }, usage);
  if (!o.qwen3d || !o.model) usage('give --qwen3d and --model (the cache is turned off by starting a daemon)');
  if (!['prefix', 'chat', 'both'].includes(o.part)) usage(`--part must be prefix, chat or both, not '${o.part}'`);
  if (o.requests > WORDS.length) usage(`--requests is at most ${WORDS.length}`);
  if (!hc.serveHasOption(o.qwen3d, '--no-prefix-cache')) usage(`${o.qwen3d} has no prefix cache (--no-prefix-cache)`);
  return o;
}

// ---- texts ----------------------------------------------------------------------

// N words, the first LEAD (an index into WORDS), the rest from a xorshift32
// stream seeded by SEED; each with its leading space.
function words(n, lead, seed) {
  if (n === 0) return '';
  let x = (seed * 2654435761 + 1) >>> 0 || 1;
  const out = [WORDS[lead % WORDS.length]];
  for (let i = 1; i < n; i++) {
    x ^= x << 13; x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5; x >>>= 0;
    out.push(WORDS[x % WORDS.length]);
  }
  return out.map((w) => ` ${w}`).join('');
}

// The Qwen3 template for system, user and assistant messages without tools,
// with the generation prompt: assistant messages before the last user
// message lose their think block, as the template does.
function renderChat(messages, enableThinking) {
  let s = '';
  messages.forEach((m, i) => {
    if (m.role === 'system' && i === 0) {
      s += `<|im_start|>system\n${m.content}<|im_end|>\n`;
    } else if (m.role === 'assistant') {
      const c = m.content.includes('</think>') ? m.content.split('</think>').pop().replace(/^\n+/, '') : m.content;
      s += `<|im_start|>assistant\n${c}<|im_end|>\n`;
    } else {
      s += `<|im_start|>${m.role}\n${m.content}<|im_end|>\n`;
    }
  });
  return s + '<|im_start|>assistant\n' + (enableThinking ? '' : '<think>\n\n</think>\n\n');
}

// Token ids of TEXTS, by `qwen3d tokenize` in one call (special tokens recognized, as the daemon does).
function tokenizeAll(o, texts) {
  if (texts.some((t) => t.includes('\0'))) throw new Error('a text holds a NUL byte; it cannot be tokenized with --null');
  const out = execFileSync(o.qwen3d, ['tokenize', '--model', o.model, '--null', '--json'],
    { input: texts.map((t) => `${t}\0`).join(''), encoding: 'utf8', maxBuffer: 256 << 20 });
  const ids = out.split('\n').filter(Boolean).map((l) => JSON.parse(l).ids);
  if (ids.length !== texts.length) throw new Error(`qwen3d tokenize gave ${ids.length} results for ${texts.length} texts`);
  return ids;
}

function lcp(a, b) {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

// What a cache of every earlier prompt's rows could reuse of IDS.
function sharedWithEarlier(ids, earlier) {
  const best = earlier.reduce((m, e) => Math.max(m, lcp(ids, e)), 0);
  return Math.min(best, Math.max(ids.length - 1, 0));
}

// ---- the parts ----------------------------------------------------------------------

async function stream(d, pathName, body) {
  return hc.streamRequest(d.url, pathName, { model: d.name, temperature: 0, stream: true,
    stream_options: { include_usage: true }, ...body });
}

function requestRecord(r) {
  const t = r.timings || {};
  return { prompt_tokens: r.usage.prompt_tokens, cached_tokens: hc.cachedTokens(r.usage), ttft_ms: r.ttft_ms,
    daemon_ttft_ms: t.ttft_ms, queue_ms: t.queue_ms, prompt_ms: t.prompt_ms, completion_tokens: r.usage.completion_tokens };
}

// N requests in a row sharing a prefix; records each request's text and figures.
async function prefixPart(o, d, round) {
  const prefix = words(o.prefixWords, 1 + round, 1000 + round);
  const out = [];
  for (let i = 0; i < o.requests; i++) {
    const prompt = prefix + words(o.tailWords, i, 5000 + 100 * round + i);
    const r = await stream(d, '/v1/completions', { prompt, max_tokens: PREFIX_GEN });
    out.push({ request: i + 1, text: prompt, ...requestRecord(r) });
  }
  return out;
}

// A K-turn chat; records each turn's rendered prompt, reply and figures.
async function chatPart(o, d, round, enableThinking) {
  const lead = 1 + o.rounds + 2 * round + (enableThinking ? 0 : 1);
  const messages = [{ role: 'system', content: `You are a helpful assistant.${words(o.systemWords, lead, 9000 + lead)}` }];
  const out = [];
  for (let t = 0; t < o.turns; t++) {
    messages.push({ role: 'user', content: `${words(o.userWords, t, 20000 + 100 * lead + t).slice(1)}?` });
    const rendered = renderChat(messages, enableThinking);
    const r = await stream(d, '/v1/chat/completions', { messages, max_tokens: o.gen,
      chat_template_kwargs: { enable_thinking: enableThinking } });
    const reply = { role: 'assistant', content: r.text };
    if (r.reasoning) reply.reasoning_content = r.reasoning;
    messages.push(reply);
    out.push({ turn: t + 1, text: rendered, reply: r.text, finish: r.finish, ...requestRecord(r) });
  }
  return out;
}

// Fills in each record's ids-derived fields against everything sent to the daemon before it.
function analyse(o, daemonLog) {
  const texts = [];
  for (const rec of daemonLog) {
    texts.push(rec.text);
    if (rec.reply !== undefined) texts.push(`${rec.reply}<|im_end|>`);
  }
  const ids = tokenizeAll(o, texts);
  const earlier = [];
  let k = 0, prev = null;
  for (const rec of daemonLog) {
    const mine = ids[k++];
    const replyIds = rec.reply !== undefined ? ids[k++] : null;
    rec.rendered_tokens = mine.length;
    rec.shared = sharedWithEarlier(mine, earlier);
    if (rec.turn > 1 && prev) {
      const withPrev = lcp(mine, prev.ids);
      rec.prev_prompt_tokens = prev.ids.length;
      rec.lost_vs_shared = prev.ids.length - withPrev;
      rec.lost_vs_cached = rec.cached_tokens === null ? null : prev.ids.length - rec.cached_tokens;
      rec.reply_ids_gain = lcp(mine, prev.ids.concat(prev.replyIds)) - withPrev;
    }
    earlier.push(mine);
    prev = rec.turn ? { ids: mine, replyIds } : null;
    delete rec.text;
  }
}

// ---- output --------------------------------------------------------------------------

const n = (x) => (x === null || x === undefined ? '-' : String(x));

function prefixSummary(recs) {
  const cold = recs[0].ttft_ms;
  const warm = median(recs.slice(1).map((r) => r.ttft_ms));
  return { cold_ttft_ms: cold, warm_ttft_ms_p50: warm, warm_over_cold: warm / cold };
}

// With the cache on, cached_tokens should equal the shared length from the
// second turn on; with it off, 0. Null where the daemon does not report it.
function chatSummary(recs, cacheOn) {
  const last = recs[recs.length - 1];
  const later = recs.slice(1);
  return {
    ttft_ms_turn1: recs[0].ttft_ms, ttft_ms_turn2: recs.length > 1 ? recs[1].ttft_ms : NaN, ttft_ms_last: last.ttft_ms,
    ttft_ms_p50_turns_2_on: median(later.map((r) => r.ttft_ms)),
    ttft_last_over_turn2: recs.length > 1 ? last.ttft_ms / recs[1].ttft_ms : NaN,
    cached_as_expected: later.some((r) => r.cached_tokens === null) ? null
      : later.every((r) => r.cached_tokens === (cacheOn ? r.shared : 0)),
    render_mismatches: recs.filter((r) => r.rendered_tokens !== r.prompt_tokens).length,
    lost_vs_shared: later.map((r) => r.lost_vs_shared),
  };
}

function printPrefix(log, label, round, recs, s) {
  log(`\nprefix, cache ${label}, round ${round + 1}:`);
  log('| request | prompt tokens | cached_tokens | shared | TTFT ms | daemon: ttft_ms | queue_ms | prompt_ms |');
  log('| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |');
  for (const r of recs)
    log(`| ${r.request} | ${r.prompt_tokens} | ${n(r.cached_tokens)} | ${r.shared} | ${f(r.ttft_ms, 0)} | ` +
      `${f(r.daemon_ttft_ms, 0)} | ${f(r.queue_ms, 0)} | ${f(r.prompt_ms, 0)} |`);
  log(`cold TTFT ${f(s.cold_ttft_ms, 0)} ms, p50 of requests 2-${recs.length} ${f(s.warm_ttft_ms_p50, 0)} ms: ` +
    `${f(s.warm_over_cold, 3)}x` + (label === 'on' ? ` (target <= 0.1: ${s.warm_over_cold <= 0.1 ? 'met' : 'missed'})` : ''));
}

function printChat(log, label, round, thinking, recs, s) {
  log(`\nchat, cache ${label}, enable_thinking ${thinking}, round ${round + 1}:`);
  log('| turn | prompt tokens | cached_tokens | shared | prev - cached | prev - shared | +reply ids | ' +
    'TTFT ms | daemon: ttft_ms | queue_ms | prompt_ms | reply tokens |');
  log('| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |');
  for (const r of recs) {
    log(`| ${r.turn} | ${r.prompt_tokens}${r.rendered_tokens !== r.prompt_tokens
      ? ` (rendered here: ${r.rendered_tokens})` : ''} | ${n(r.cached_tokens)} | ${r.shared} | ${n(r.lost_vs_cached)} | ` +
      `${n(r.lost_vs_shared)} | ${n(r.reply_ids_gain)} | ${f(r.ttft_ms, 0)} | ${f(r.daemon_ttft_ms, 0)} | ` +
      `${f(r.queue_ms, 0)} | ${f(r.prompt_ms, 0)} | ` +
      `${r.completion_tokens} |`);
  }
  log(`TTFT turn 2 ${f(s.ttft_ms_turn2, 0)} ms, turn ${recs.length} ${f(s.ttft_ms_last, 0)} ms ` +
    `(${f(s.ttft_last_over_turn2, 2)}x), p50 of turns 2-${recs.length} ${f(s.ttft_ms_p50_turns_2_on, 0)} ms; ` +
    `cached_tokens == ${label === 'on' ? 'shared' : '0'} on every later turn: ${s.cached_as_expected === null
      ? 'not reported' : s.cached_as_expected ? 'yes' : 'no'}` +
    (s.render_mismatches ? `; ${s.render_mismatches} turn(s) where this script's render disagrees with the daemon's` : ''));
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const t0 = performance.now();
  const extra = o.threads ? ['--threads', String(o.threads)] : [];
  const modes = [{ label: 'on', args: extra }, { label: 'off', args: [...extra, '--no-prefix-cache'] }];
  const results = [];
  try {
    for (const m of modes) {
      m.daemon = await hc.startDaemon(o.qwen3d, o.model, m.args);
      m.log = [];
    }
    // Warm-up: a prompt of the prefix part's length that starts with a word
    // (WORDS[0]) no prefix starts with; nothing later shares its ids.
    const warmup = words(o.prefixWords + o.tailWords, 0, 1);
    for (const m of modes) {
      const r = await stream(m.daemon, '/v1/completions', { prompt: warmup, max_tokens: 4 });
      m.log.push({ warmup: true, text: warmup, ...requestRecord(r) });
    }
    for (let round = 0; round < o.rounds; round++) {
      const order = round % 2 === 0 ? modes : modes.slice().reverse();
      for (const m of order) {
        if (o.part !== 'chat') {
          const recs = await prefixPart(o, m.daemon, round);
          m.log.push(...recs);
          results.push({ part: 'prefix', cache: m.label, round, recs });
        }
        if (o.part !== 'prefix') {
          for (const thinking of [true, false]) {
            const recs = await chatPart(o, m.daemon, round, thinking);
            m.log.push(...recs);
            results.push({ part: 'chat', cache: m.label, round, enable_thinking: thinking, recs });
          }
        }
      }
    }
  } finally {
    for (const m of modes) await hc.stopDaemon(m.daemon);
  }
  for (const m of modes) analyse(o, m.log);
  const info = hc.machineInfo(o.qwen3d, o.model);
  const meta = { cpu: info.cpu, kernels: info.kernels, threads: modes[0].daemon.threads, model: path.resolve(o.model),
    geometry: info.geometry, prefix_words: o.prefixWords, tail_words: o.tailWords, requests: o.requests,
    turns: o.turns, system_words: o.systemWords, user_words: o.userWords, gen: o.gen, rounds: o.rounds,
    cached_tokens_reported: results.some((x) => x.recs.some((r) => r.cached_tokens !== null)) };
  // With --json, stdout has the JSON lines and the tables go to stderr.
  const log = o.json ? console.error : console.log;
  log(`${meta.cpu}, kernels ${meta.kernels}, ${meta.threads} threads, model ${meta.model}` +
    (meta.geometry ? ` (${meta.geometry})` : ''));
  if (!meta.cached_tokens_reported)
    log('the daemon does not report usage.prompt_tokens_details.cached_tokens: its columns show "-"');
  for (const x of results) {
    x.summary = x.part === 'prefix' ? prefixSummary(x.recs) : chatSummary(x.recs, x.cache === 'on');
    if (o.json) console.log(JSON.stringify({ mode: x.part, cache: x.cache, round: x.round + 1,
      enable_thinking: x.enable_thinking, ...x.summary, records: x.recs }));
    if (x.part === 'prefix') printPrefix(log, x.cache, x.round, x.recs, x.summary);
    else printChat(log, x.cache, x.round, x.enable_thinking, x.recs, x.summary);
  }
  const med = (part, cache, key, pred = () => true) => median(results.filter((x) => x.part === part &&
    x.cache === cache && pred(x)).map((x) => x.summary[key]));
  const summary = { mode: 'prefix-bench-summary', meta, wall_s: (performance.now() - t0) / 1000 };
  if (o.part !== 'chat') {
    summary.prefix_warm_over_cold_on = med('prefix', 'on', 'warm_over_cold');
    summary.prefix_warm_over_cold_off = med('prefix', 'off', 'warm_over_cold');
    summary.prefix_target_met = summary.prefix_warm_over_cold_on <= 0.1;
    log(`\nprefix, median over rounds of (p50 TTFT of requests 2-${o.requests}) / (cold TTFT): cache on ` +
      `${f(summary.prefix_warm_over_cold_on, 3)} (target <= 0.1: ${summary.prefix_target_met ? 'met' : 'missed'}), ` +
      `cache off ${f(summary.prefix_warm_over_cold_off, 3)}`);
  }
  if (o.part !== 'prefix') {
    for (const th of [true, false]) {
      const key = `chat_thinking_${th}`;
      for (const c of ['on', 'off'])
        summary[`${key}_ttft_last_over_turn2_${c}`] = med('chat', c, 'ttft_last_over_turn2', (x) => x.enable_thinking === th);
      log(`chat, enable_thinking ${th}: TTFT of turn ${o.turns} / turn 2: cache on ` +
        `${f(summary[`${key}_ttft_last_over_turn2_on`], 2)}, cache off ${f(summary[`${key}_ttft_last_over_turn2_off`], 2)}`);
    }
  }
  if (o.json) console.log(JSON.stringify(summary));
  console.error(`prefix-bench took ${f(summary.wall_s, 0)} s`);
}

main().catch((e) => {
  console.error(`prefix-bench: ${e && e.stack ? e.stack : e}`);
  process.exit(1);
});
