// Clients that send a body over `qwen3d serve`'s --max-body, for
// tests/serve_linger.sh. The daemon answers 413 while they are still
// sending, then reads and drops the rest for a bounded time and amount (a
// lingering close).
//
//   node linger-client.js clients BASE_URL MODEL BYTES
//     Node's fetch (undici) with a body of BYTES of known length and with a
//     streamed (chunked) one, and the official openai client with a prompt
//     of BYTES: each must see the 413 and the API's error object.
//   node linger-client.js flood PORT fast|slow length|chunked LIMIT_S
//     A raw socket that never stops sending: the body is declared with a
//     huge Content-Length or is chunked without end; it is written as fast
//     as the socket takes it, 64 KiB a turn of the event loop (fast), or
//     1 KiB every 20 ms (slow), and the
//     client keeps writing after the server's answer and its end of stream.
//     Holds when the 413 arrived and the server then ended the connection,
//     within LIMIT_S seconds; prints what it saw.
'use strict';
const assert = require('assert');
const net = require('net');

const [mode, ...args] = process.argv.slice(2);

async function clients(base, model, bytes) {
  const OpenAI = require('openai').default || require('openai');
  const { check, finish } = require('./checks.js').checks();
  const url = `${base}/v1/completions`;
  const prompt = 'a'.repeat(bytes);
  const expect413 = async (res) => {
    assert.strictEqual(res.status, 413);
    const j = await res.json();
    assert.strictEqual(j.error.code, 'request_too_large');
    assert.strictEqual(j.error.type, 'invalid_request_error');
  };

  await check(`fetch, ${bytes} bytes with a Content-Length`, async () => {
    const body = JSON.stringify({ model, prompt, max_tokens: 1 });
    await expect413(await fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body }));
  });

  await check(`fetch, ${bytes} bytes streamed (chunked)`, async () => {
    const block = new Uint8Array(64 * 1024).fill(0x61);
    let sent = 0;
    const body = new ReadableStream({
      pull(ctl) {
        if (sent >= bytes) return ctl.close();
        ctl.enqueue(block);
        sent += block.length;
      },
    });
    const res = await fetch(url, {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body, duplex: 'half',
    });
    await expect413(res);
  });

  await check(`openai client, a prompt of ${bytes} bytes`, async () => {
    const c = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 30000 });
    let err = null;
    try {
      await c.completions.create({ model, prompt, max_tokens: 1 });
    } catch (e) {
      err = e;
    }
    assert.ok(err instanceof OpenAI.APIError, `expected an APIError, got ${err}`);
    assert.strictEqual(err.status, 413, `${err}`);
    assert.strictEqual(err.code, 'request_too_large');
  });
  finish('linger clients');
}

function flood(port, speed, framing, limitS) {
  return new Promise((resolve) => {
    const s = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true });
    const t0 = Date.now();
    let got = '', sent = 0, timer = null, done = false;
    const finish = (how) => {
      if (done) return;
      done = true;
      clearInterval(timer);
      clearTimeout(limit);
      s.destroy();
      resolve({ how, got, sent, ms: Date.now() - t0 });
    };
    const limit = setTimeout(() => finish('timeout'), limitS * 1000);
    const block = Buffer.alloc(speed === 'fast' ? 64 * 1024 : 1024, 0x61);
    const chunk = framing === 'chunked'
      ? Buffer.concat([Buffer.from(block.length.toString(16) + '\r\n'), block, Buffer.from('\r\n')])
      : block;
    const write = () => {
      if (done) return false;
      sent += chunk.length;
      return s.write(chunk);
    };
    s.on('connect', () => {
      s.write('POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n' +
              (framing === 'chunked' ? 'Transfer-Encoding: chunked\r\n' : 'Content-Length: 1000000000000\r\n') +
              '\r\n');
      if (speed === 'fast') {
        // One block per turn of the event loop: the answer is read as it
        // comes, not only once the server has cut the connection (a loop
        // of writes the kernel keeps taking would never yield to reads).
        const pump = () => { if (write()) setImmediate(pump); };
        s.on('drain', pump);
        pump();
      } else {
        timer = setInterval(write, 20);
      }
    });
    s.on('data', (d) => { if (got.length < 4096) got += d.toString(); });
    s.on('end', () => {}); // the server's end of stream: go on sending
    s.on('error', (e) => finish(e.code || e.message));
    s.on('close', () => finish('close'));
  });
}

async function main() {
  if (mode === 'clients') return clients(args[0], args[1], Number(args[2]));
  if (mode !== 'flood') throw new Error(`unknown mode ${mode}`);
  const r = await flood(Number(args[0]), args[1], args[2], Number(args[3]));
  const status = r.got.split('\r\n')[0];
  console.log(`flood ${args[1]} ${args[2]}: sent ${r.sent} bytes in ${r.ms} ms, ended by ${r.how}; ` +
              `got ${JSON.stringify(r.got.slice(0, 300))}`);
  if (r.how === 'timeout') throw new Error(`the server still read after ${args[3]} s`);
  if (!status.startsWith('HTTP/1.1 413 ')) throw new Error(`no 413 before the end: ${JSON.stringify(status)}`);
  if (!r.got.includes('"code":"request_too_large"')) throw new Error('the 413 has no API error body');
}

main().catch((e) => {
  console.log(`FAIL: ${e.message}`);
  process.exit(1);
});
