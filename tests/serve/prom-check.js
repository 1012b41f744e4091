// The daemon's metrics as a real Prometheus server sees them. Sends a known
// set of requests to a fresh daemon (completions and chat, streaming and
// not, and requests that fail), counting statuses and the tokens each
// response reports in `usage`; waits for a scrape that started after the
// last response; then asks Prometheus' HTTP API (/api/v1/query) for the
// counters and histogram counts and requires them to equal the clients'
// counts exactly: requests by endpoint and code, tokens, finish reasons,
// the per-request prompt and generation length histograms.
//
// usage: node prom-check.js DAEMON_URL PROMETHEUS_URL MODEL_NAME JOB
'use strict';
const assert = require('assert');
const { post: streamPost, parse, summarize } = require('./sse-client.js');

const [base, prom, model, job] = process.argv.slice(2);
const CMPL = '/v1/completions', CHAT = '/v1/chat/completions';

const counted = { requests: {}, prompt: 0, completion: 0, withTokens: 0, admitted: 0, cached: 0, hits: 0, finished: {} };
function countFinish(reason) {
  counted.finished[reason] = (counted.finished[reason] || 0) + 1;
}
function countRequest(path, status) {
  const k = `${path} ${status}`;
  counted.requests[k] = (counted.requests[k] || 0) + 1;
}
function countUsage(u) {
  assert.strictEqual(u.total_tokens, u.prompt_tokens + u.completion_tokens);
  counted.prompt += u.prompt_tokens;
  counted.completion += u.completion_tokens;
  counted.admitted++;
  if (u.completion_tokens > 0) counted.withTokens++;
  const cached = u.prompt_tokens_details.cached_tokens;
  assert.ok(Number.isInteger(cached) && cached >= 0 && cached < u.prompt_tokens, `cached_tokens ${cached}`);
  counted.cached += cached;
  if (cached > 0) counted.hits++;
}

async function plain(path, body, method = 'POST') {
  const r = await fetch(base + path, {
    method,
    headers: body === undefined ? {} : { 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
    signal: AbortSignal.timeout(30000),
  });
  const text = await r.text();
  countRequest(path, r.status);
  let json = null;
  try { json = JSON.parse(text); } catch (_) { /* not JSON */ }
  if (r.status === 200) {
    countUsage(json.usage);
    countFinish(json.choices[0].finish_reason);
  }
  return { status: r.status, json, text };
}

async function streamed(path, body) {
  const r = await streamPost(base, path, { ...body, stream: true, stream_options: { include_usage: true } },
    { timeoutMs: 30000 });
  assert.ok(r.complete && r.status === 200, `stream ${path}: ${r.status} ${r.error}`);
  countRequest(path, r.status);
  const s = summarize(parse(r.raw));
  assert.ok(s.usage, 'a usage chunk');
  countUsage(s.usage);
  countFinish(s.finish);
  return s;
}

async function query(expr) {
  const r = await fetch(`${prom}/api/v1/query?query=${encodeURIComponent(expr)}`, { signal: AbortSignal.timeout(10000) });
  const j = await r.json();
  assert.strictEqual(j.status, 'success', `query ${expr}: ${JSON.stringify(j)}`);
  return j.data.result;
}

// The single value of an instant query (0 when it selects nothing).
async function scalar(expr) {
  const res = await query(expr);
  assert.ok(res.length <= 1, `${expr} selects ${res.length} series`);
  return res.length ? Number(res[0].value[1]) : 0;
}

// The daemon's scrape target (null until Prometheus' discovery has set it up).
async function target() {
  const r = await fetch(`${prom}/api/v1/targets?state=active`, { signal: AbortSignal.timeout(10000) });
  return (await r.json()).data.activeTargets.find((x) => x.labels.job === job) || null;
}

// Waits, bounded, for a successful scrape that began after time T (ms since the epoch).
async function scrapedAfter(t, ms) {
  const deadline = Date.now() + ms;
  for (;;) {
    const tg = await target();
    if (tg && tg.health === 'up' && Date.parse(tg.lastScrape) > t) return;
    assert.ok(Date.now() < deadline, `no successful scrape within ${ms} ms: ${JSON.stringify(tg)}`);
    await new Promise((res) => setTimeout(res, 200));
  }
}

(async () => {
  // Discovery applies new targets after a few seconds: first see the daemon scraped.
  await scrapedAfter(0, 30000);
  const chat = (content, extra = {}) => ({
    model, messages: [{ role: 'user', content }], max_tokens: 12, temperature: 0, ...extra,
  });
  // Successful requests: 3 + 2 completions, 2 + 2 chats, streaming and not.
  await plain(CMPL, { model, prompt: 'Hello world', max_tokens: 8, temperature: 0 });
  await plain(CMPL, { prompt: 'The quick brown fox', max_tokens: 13, temperature: 0 });
  await plain(CMPL, { prompt: [9707, 1879, 11], max_tokens: 5 });
  await streamed(CMPL, { model, prompt: 'Once upon a time,', max_tokens: 17, temperature: 0 });
  await streamed(CMPL, { prompt: '1, 2, 3,', max_tokens: 9, temperature: 0.8, seed: 7 });
  await plain(CHAT, chat('Name a color.'));
  await plain(CHAT, chat('Count to three.', { chat_template_kwargs: { enable_thinking: false } }));
  await streamed(CHAT, chat('Say hi.'));
  await streamed(CHAT, chat('A word, please.', { max_tokens: 20, chat_template_kwargs: { enable_thinking: false } }));
  // Two prompts sharing 80 token ids, longer than the prefix cache's minimum: the second reuses them.
  const shared = Array.from({ length: 80 }, (_, i) => 1000 + 7 * i);
  await plain(CMPL, { prompt: [...shared, 11, 12], max_tokens: 3, temperature: 0 });
  await streamed(CMPL, { prompt: [...shared, 13], max_tokens: 3, temperature: 0 });
  assert.strictEqual(counted.cached, shared.length, 'the second shared-prefix prompt reports its cached tokens');
  // Failures: each is counted under its endpoint and status, and never reaches a session.
  assert.strictEqual((await plain(CMPL, '{"prompt": ')).status, 400);
  assert.strictEqual((await plain(CMPL, { prompt: 'x', temperature: 7 })).status, 400);
  assert.strictEqual((await plain(CMPL, { model: 'no-such-model', prompt: 'x' })).status, 404);
  assert.strictEqual((await plain(CMPL, undefined, 'GET')).status, 405);
  assert.strictEqual((await plain(CHAT, { messages: [] })).status, 400);
  assert.strictEqual((await plain('/v1/nothing', undefined, 'GET')).status, 404);
  const tEnd = Date.now();

  // A scrape that began after the last response has seen all of them.
  await scrapedAfter(tEnd + 50, 15000);

  const results = [];
  const expect = async (expr, want) => {
    const got = await scalar(expr);
    assert.strictEqual(got, want, `${expr}: Prometheus has ${got}, the clients counted ${want}`);
    results.push(`${expr} = ${got}`);
  };
  const sel = `job="${job}"`;
  await expect(`up{${sel}}`, 1);
  // Every qwen3d_ series is labelled with the served model's name (design.md section 3).
  const msel = `${sel},model_name="${model}"`;
  const endpoints = { [CMPL]: CMPL, [CHAT]: CHAT, '/v1/nothing': 'other' };
  for (const [k, n] of Object.entries(counted.requests)) {
    const [path, code] = k.split(' ');
    await expect(`qwen3d_requests_total{${msel},endpoint="${endpoints[path]}",code="${code}"}`, n);
  }
  // No other endpoint/code pair of the generation endpoints exists.
  const series = await query(`qwen3d_requests_total{${msel},endpoint=~"/v1/(chat/)?completions"}`);
  const known = Object.keys(counted.requests).filter((k) => !k.startsWith('/v1/nothing'));
  assert.strictEqual(series.length, known.length, `series: ${JSON.stringify(series.map((s) => s.metric))}`);
  await expect(`qwen3d_prompt_tokens_total{${msel}}`, counted.prompt);
  await expect(`qwen3d_generation_tokens_total{${msel}}`, counted.completion);
  await expect(`qwen3d_time_to_first_token_seconds_count{${msel}}`, counted.withTokens);
  await expect(`qwen3d_time_to_first_token_seconds_bucket{${msel},le="+Inf"}`, counted.withTokens);
  await expect(`qwen3d_inter_token_latency_seconds_count{${msel}}`, counted.completion - counted.withTokens);
  await expect(`qwen3d_queue_wait_seconds_count{${msel}}`, counted.admitted);
  // One decode row per token after a request's first, in the steps' batch sizes.
  await expect(`qwen3d_batch_size_sum{${msel}}`, counted.completion - counted.withTokens);
  await expect(`qwen3d_prefill_tokens_per_step_count{${msel}} - qwen3d_batch_size_count{${msel}}`, 0);
  // Each step's duration under its kind: decode-only steps are those that fed no prompt token.
  const steps = await scalar(`qwen3d_prefill_tokens_per_step_count{${msel}}`);
  const decodeSteps = await scalar(`qwen3d_prefill_tokens_per_step_bucket{${msel},le="0"}`);
  assert.ok(steps - decodeSteps >= 1, `${steps} steps, ${decodeSteps} of them decode-only: no prompt was fed`);
  await expect(`qwen3d_step_seconds_count{${msel},kind="decode"}`, decodeSteps);
  await expect(`qwen3d_step_seconds_bucket{${msel},kind="prompt",le="+Inf"}`, steps - decodeSteps);
  await expect(`qwen3d_step_seconds_count{${msel},kind="prompt"}`, steps - decodeSteps);
  const promptSeconds = await scalar(`qwen3d_step_seconds_sum{${msel},kind="prompt"}`);
  assert.ok(promptSeconds > 0, `qwen3d_step_seconds_sum{kind="prompt"} ${promptSeconds}: prompt steps take time`);
  results.push(`qwen3d_step_seconds_sum{kind="prompt"} = ${promptSeconds}`);
  const generation = Object.entries(counted.requests).filter(([k]) => k.startsWith(CMPL) || k.startsWith(CHAT))
    .reduce((a, [, n]) => a + n, 0);
  await expect(`qwen3d_request_duration_seconds_count{${msel}}`, generation);
  await expect(`qwen3d_request_duration_seconds_bucket{${msel},le="+Inf"}`, generation);
  await expect(`qwen3d_prefix_cache_hits_total{${msel}}`, counted.hits);
  await expect(`qwen3d_prefix_cache_misses_total{${msel}}`, counted.admitted - counted.hits);
  await expect(`qwen3d_prefix_cache_tokens_total{${msel}}`, counted.cached);
  await expect(`qwen3d_prefix_cache_evictions_total{${msel}}`, 0);
  const cacheBytes = await scalar(`qwen3d_prefix_cache_bytes{${msel}}`);
  assert.ok(cacheBytes > 0, `qwen3d_prefix_cache_bytes ${cacheBytes}: the cache keeps the shared prompts`);
  results.push(`qwen3d_prefix_cache_bytes = ${cacheBytes}`);
  await expect(`qwen3d_sessions_active{${msel}}`, 0);
  await expect(`qwen3d_requests_waiting{${msel}}`, 0);
  for (const reason of ['stop', 'length', 'tool_calls', 'cancelled', 'error'])
    await expect(`qwen3d_request_finished_total{${msel},finished_reason="${reason}"}`, counted.finished[reason] || 0);
  await expect(`qwen3d_request_prompt_tokens_count{${msel}}`, counted.admitted);
  await expect(`qwen3d_request_prompt_tokens_sum{${msel}}`, counted.prompt);
  await expect(`qwen3d_request_generation_tokens_count{${msel}}`, counted.admitted);
  await expect(`qwen3d_request_generation_tokens_sum{${msel}}`, counted.completion);
  await expect(`qwen3d_request_generation_tokens_bucket{${msel},le="+Inf"}`, counted.admitted);
  await expect(`qwen3d_request_decode_seconds_count{${msel}}`, counted.withTokens);
  await expect(`qwen3d_kv_cache_usage_ratio{${msel}}`, 0);
  await expect(`qwen3d_build_info{${msel}}`, 1);
  // The histograms are usable as histograms: a median TTFT within the buckets.
  const q = await scalar(`histogram_quantile(0.5, qwen3d_time_to_first_token_seconds_bucket{${msel}})`);
  assert.ok(q > 0 && q <= 60, `median TTFT from the buckets: ${q}`);
  results.push(`histogram_quantile(0.5, ttft) = ${q}`);
  for (const r of results) console.log(`ok - ${r}`);
  console.log(`prom-check: ${results.length} queries equal the clients' counts ` +
    `(${counted.admitted} generations, ${counted.prompt} prompt and ${counted.completion} completion tokens)`);
})().catch((e) => {
  console.error(`prom-check: ${e && e.stack ? e.stack : e}`);
  process.exit(1);
});
