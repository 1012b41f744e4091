// Raw-socket checks of the connection limits of `qwen3d serve`, for
// tests/serve_limits.sh. Prints one line and exits 0 when the check holds,
// 1 (with the reason) when it does not.
//
//   node limits-client.js idle PORT MIN_S MAX_S
//     A connection that sends half a request and then nothing is closed by
//     the server after between MIN_S and MAX_S seconds.
//   node limits-client.js conn-limit PORT N
//     With N idle connections open (the limit), a request on one more gets
//     no answer while they stay open. Once the server has closed them for
//     idleness (all in one go: the case where it used to stop accepting for
//     good), and again once the client closes N new ones itself, a new
//     connection is served within 3 s.
'use strict';
const net = require('net');

const [mode, portArg, a, b] = process.argv.slice(2);
const port = Number(portArg);
const fail = (msg) => {
  console.log(`FAIL: ${msg}`);
  process.exit(1);
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function connect() {
  return new Promise((resolve, reject) => {
    const s = net.connect(port, '127.0.0.1', () => resolve(s));
    s.on('error', reject);
  });
}

// Sends a GET /health and resolves with the bytes received until the server
// closes, or null when nothing arrived within MS.
function request(s, ms) {
  return new Promise((resolve) => {
    let got = '';
    const t = setTimeout(() => resolve(got || null), ms);
    s.on('data', (d) => (got += d.toString()));
    s.on('close', () => {
      clearTimeout(t);
      resolve(got);
    });
    s.on('error', () => {});
    s.write('GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
  });
}

async function idle() {
  const s = await connect();
  const t0 = Date.now();
  s.write('GET /health HTTP/1.1\r\nHost: x\r\n');
  const secs = await new Promise((resolve) => {
    const t = setTimeout(() => resolve(null), (Number(b) + 5) * 1000);
    s.on('close', () => {
      clearTimeout(t);
      resolve((Date.now() - t0) / 1000);
    });
    s.on('error', () => {});
    s.resume();
  });
  if (secs === null) fail(`an idle connection was still open after ${Number(b) + 5} s`);
  if (secs < Number(a) || secs > Number(b)) fail(`an idle connection was closed after ${secs} s, not in ${a}..${b} s`);
  console.log(`idle connection closed after ${secs.toFixed(1)} s`);
}

// Opens N connections that send nothing; resolves with them and a promise
// that settles once the server has closed them all.
async function holdIdle(n) {
  const held = [];
  for (let i = 0; i < n; i++) held.push(await connect());
  const closed = Promise.all(held.map((s) => new Promise((r) => {
    s.on('close', r);
    s.on('error', () => {});
    s.resume();
  })));
  return { held, closed };
}

// A request on a new connection must be served within 3 s.
async function servedAgain(what) {
  const t0 = Date.now();
  const s = await connect();
  const got = await request(s, 3000);
  if (!got || !got.startsWith('HTTP/1.1 200'))
    fail(`${what}, a new request got ${JSON.stringify(got)} within 3 s`);
  return Date.now() - t0;
}

async function connLimit() {
  const n = Number(a);
  let { held, closed } = await holdIdle(n);
  await sleep(300);
  // Over the limit: MHD closes the first connection past it and leaves the
  // next ones in the kernel's backlog; either way, no answer.
  const over = await connect().catch(() => null);
  if (over) {
    const got = await request(over, 1000);
    if (got && got.startsWith('HTTP/1.1 200')) fail(`a request beyond ${n} open connections was served`);
    over.destroy();
  }
  const idleWait = new Promise((r) => setTimeout(() => r('timeout'), 15000));
  if ((await Promise.race([closed, idleWait])) === 'timeout') fail(`the ${n} idle connections were not closed in 15 s`);
  const ms1 = await servedAgain(`after the server closed ${n} idle connections`);
  ({ held, closed } = await holdIdle(n));
  await sleep(300);
  for (const s of held) s.destroy();
  const ms2 = await servedAgain(`after the client closed ${n} connections`);
  console.log(`connection limit ${n}: a request beyond it waited; served again ${ms1} ms after the server ` +
              `closed the idle ones, ${ms2} ms after the client closed its own`);
}

(mode === 'idle' ? idle() : mode === 'conn-limit' ? connLimit() : Promise.reject(new Error(`unknown mode ${mode}`)))
  .then(() => process.exit(0))
  .catch((e) => fail(e.message));
