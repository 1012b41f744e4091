// A strict server-sent-events client for the serve tests, on Node's http
// module (not fetch) so that a response cut short is seen as such: `complete`
// is true only when the chunked body ended with its terminating chunk.
//
// post(base, path, body, opts) resolves to
//   { status, headers, raw, complete, error, t0, tHeaders, events: [{ t, data }] }
// with times from performance.now(). opts.abortAfterEvents = N destroys the
// socket once N events arrived; opts.abortAfterMs = T destroys it T ms after
// the response headers. opts.timeoutMs bounds the whole request.
// opts.onHeaders(headers) and opts.onEvent() report progress as it happens.
//
// parse(raw) checks the framing: every event is exactly one "data: " line
// followed by a blank line, every payload but the last is JSON, the last is
// [DONE] and nothing follows it. It returns the parsed chunks and throws on
// the first violation.
'use strict';
const http = require('http');
const { StringDecoder } = require('string_decoder');

const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity });

function post(base, path, body, opts = {}) {
  const url = new URL(path, base);
  const payload = Buffer.from(typeof body === 'string' ? body : JSON.stringify(body));
  return new Promise((resolve) => {
    const out = { status: 0, headers: {}, raw: '', complete: false, error: null, events: [], t0: performance.now() };
    const dec = new StringDecoder('utf8');
    let buf = '', settled = false, timer = null;
    const done = () => {
      if (settled) return;
      settled = true;
      if (timer) clearTimeout(timer);
      out.raw += dec.end();
      resolve(out);
    };
    const req = http.request({
      host: url.hostname, port: url.port, path: url.pathname, method: 'POST', agent,
      headers: { 'Content-Type': 'application/json', 'Content-Length': payload.length, ...(opts.headers || {}) },
    }, (res) => {
      out.status = res.statusCode;
      out.headers = res.headers;
      out.tHeaders = performance.now();
      if (opts.onHeaders) opts.onHeaders(res.headers);
      if (opts.abortAfterMs !== undefined)
        setTimeout(() => { out.error = 'aborted by the client'; req.destroy(); done(); }, opts.abortAfterMs);
      res.on('data', (part) => {
        const s = dec.write(part);
        out.raw += s;
        buf += s;
        let k;
        while ((k = buf.indexOf('\n\n')) >= 0) {
          out.events.push({ t: performance.now(), data: buf.slice(0, k) });
          if (opts.onEvent) opts.onEvent();
          buf = buf.slice(k + 2);
        }
        if (opts.abortAfterEvents !== undefined && out.events.length >= opts.abortAfterEvents && !settled) {
          out.error = 'aborted by the client';
          req.destroy();
          done();
        }
      });
      res.on('error', (e) => { out.error = out.error || `the response was cut short: ${e.message}`; });
      res.on('close', () => {
        out.complete = res.complete && !out.error;
        if (!res.complete && !out.error) out.error = 'the response was cut short';
        done();
      });
    });
    req.on('error', (e) => { out.error = out.error || String(e); done(); });
    timer = setTimeout(() => { out.error = out.error || 'timed out'; req.destroy(); done(); }, opts.timeoutMs || 60000);
    req.end(payload);
  });
}

function parse(raw) {
  if (!raw.endsWith('\n\n')) throw new Error(`the stream does not end with a blank line: ...${JSON.stringify(raw.slice(-80))}`);
  const events = raw.slice(0, -2).split('\n\n');
  if (events[events.length - 1] !== 'data: [DONE]')
    throw new Error(`the last event is not [DONE]: ${JSON.stringify(events[events.length - 1].slice(0, 200))}`);
  const chunks = [];
  for (let i = 0; i < events.length - 1; i++) {
    const ev = events[i];
    if (!ev.startsWith('data: ') || ev.includes('\n'))
      throw new Error(`event ${i} is not one data line: ${JSON.stringify(ev.slice(0, 200))}`);
    let j;
    try { j = JSON.parse(ev.slice(6)); } catch (e) {
      throw new Error(`event ${i} is not JSON: ${JSON.stringify(ev.slice(0, 200))}`);
    }
    chunks.push(j);
  }
  return chunks;
}

// The text, finish reason, usage and error of a parsed completion or chat stream.
function summarize(chunks) {
  let text = '', reasoning = '', finish = null, usage = null, error = null, contentChunks = 0;
  for (const j of chunks) {
    if (j.error) { error = j.error; continue; }
    if (j.usage) usage = j.usage;
    if (!j.choices || !j.choices.length) continue;
    const c = j.choices[0];
    if (c.delta) {
      if (c.delta.content) { text += c.delta.content; contentChunks++; }
      if (c.delta.reasoning_content) { reasoning += c.delta.reasoning_content; contentChunks++; }
    } else if (c.text) {
      text += c.text;
      contentChunks++;
    }
    if (c.finish_reason) finish = c.finish_reason;
  }
  return { text, reasoning, finish, usage, error, contentChunks };
}

module.exports = { post, parse, summarize };
