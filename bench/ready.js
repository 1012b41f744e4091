#!/usr/bin/env node
// Load to ready of `qwen3d serve`: the time from spawning it to its first
// /health 200, polled every 5 ms. With --cold, every start is paired with one
// after `sync` and dropping the kernel's page cache (writing 3 to
// /proc/sys/vm/drop_caches, which needs root): the model files, the prepared
// weights, the tokenizer and qwen3d itself then come from the disk, as on a
// first start after a boot. The prepared-weights cache is left as it is:
// run one start first (the script does) so that every measured start finds it.
// Cold and warm starts alternate, so drift on a shared machine falls on both.
// Never asserts on speed.
//
// Usage (from a build tree):
//   node ../bench/ready.js --qwen3d ./qwen3d --model DIR [--model DIR ...] \
//       [--runs 5] [--threads 2] [--cold] [--port 18700]
// report.js uses readyOnce() and dropPageCache() for its --serve-model rows.
'use strict';

const { spawn, spawnSync } = require('child_process');
const fs = require('fs');
const http = require('http');
const os = require('os');
const path = require('path');

// Milliseconds from spawning `serve` to the first /health 200, or null when it exits first or takes over a minute.
function readyOnce(bin, model, port, threads = '2') {
  return new Promise((resolve) => {
    const t0 = process.hrtime.bigint();
    const child = spawn(bin, ['serve', '--model', model, '--port', String(port), '--threads', String(threads)],
      { stdio: ['ignore', 'ignore', 'ignore'] });
    let done = false;
    const finish = (ms) => {
      if (done) return;
      done = true;
      child.kill('SIGTERM');
      child.on('exit', () => resolve(ms));
    };
    child.on('exit', () => { if (!done) { done = true; resolve(null); } });
    const poll = () => {
      if (done) return;
      const req = http.get({ host: '127.0.0.1', port, path: '/health', timeout: 1000 }, (res) => {
        res.resume();
        if (res.statusCode === 200) finish(Number(process.hrtime.bigint() - t0) / 1e6);
        else setTimeout(poll, 5);
      });
      req.on('error', () => setTimeout(poll, 5));
      req.on('timeout', () => req.destroy());
    };
    setTimeout(() => finish(null), 60000);
    poll();
  });
}

// Writes dirty pages back, then drops the page cache, dentries and inodes; throws when not allowed.
function dropPageCache() {
  const s = spawnSync('sync');
  if (s.status !== 0) throw new Error('sync failed');
  try {
    fs.writeFileSync('/proc/sys/vm/drop_caches', '3\n');
  } catch (e) {
    throw new Error(`cannot drop the page cache (writing /proc/sys/vm/drop_caches needs root): ${e.code || e.message}`);
  }
}

// The middle value, or the mean of the two middle ones; nulls (failed runs) are left out.
const median = (a) => {
  const s = a.filter((x) => x !== null).sort((x, y) => x - y), m = s.length >> 1;
  if (!s.length) return null;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

const show = (ms) => ms.map((x) => (x === null ? 'failed' : x.toFixed(0))).join(', ');

// Rows of a markdown table for each model: warm starts, and with COLD page-cache-dropped starts, alternated.
async function readyRows(bin, models, runs, threads, cold, port) {
  const rows = [];
  for (const model of models) {
    await readyOnce(bin, model, port, threads); // makes the prepared-weights cache if it is missing
    const warm = [], dropped = [];
    for (let i = 0; i < runs; i++) {
      if (cold) {
        dropPageCache();
        dropped.push(await readyOnce(bin, model, port, threads));
      }
      warm.push(await readyOnce(bin, model, port, threads));
    }
    const row = (what, ms) => `| ${model} | ${threads} | ${what} | ${median(ms) === null ? '-' : median(ms).toFixed(0)} | ${show(ms)} |`;
    if (cold) rows.push(row('cold: page cache dropped', dropped));
    rows.push(row('warm: files in the page cache', warm));
  }
  return rows;
}

const tableHead = ['| model | threads | start | ready ms, median | all starts, ms |', '| --- | --- | --- | --- | --- |'];

// The sentence under the table.
const readyNote = (runs, threads, cold) =>
  `qwen3d serve --threads ${threads}, spawn to the first /health 200, ${runs} start(s) of each kind after one ` +
  'start that makes the prepared-weights cache if missing' + (cold ? '; cold (page cache dropped) and warm starts alternated.' : '.');

// The CPU's model name, for the machine line above a table.
const cpuName = () => (fs.readFileSync('/proc/cpuinfo', 'utf8').match(/^model name\s*:\s*(.*)$/m) || [])[1] || os.arch();

// The kernel level in `qwen3d inspect`'s text: its "kernels" line (the level
// this machine selects, which also keys the prepared-weights cache).
const kernelLevel = (inspectText) => ((inspectText || '').split('\n').find((l) => l.startsWith('kernels ')) || 'kernels -').trim();

module.exports = { readyOnce, dropPageCache, readyRows, tableHead, readyNote, median, cpuName, kernelLevel };

if (require.main === module) {
  const fail = (msg) => {
    process.stderr.write(`ready: ${msg}\n`);
    process.exit(1);
  };
  const o = { models: [], runs: 5, threads: '2', cold: false, port: 18700 };
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i++) {
    const v = () => (i + 1 < argv.length ? argv[++i] : fail(`${argv[i]} needs a value`));
    switch (argv[i]) {
      case '--qwen3d': o.bin = v(); break;
      case '--model': o.models.push(v()); break;
      case '--runs': o.runs = Number(v()); break;
      case '--threads': o.threads = v(); break;
      case '--cold': o.cold = true; break;
      case '--port': o.port = Number(v()); break;
      default: fail(`unknown argument "${argv[i]}"`);
    }
  }
  if (!o.bin || !o.models.length) fail('--qwen3d BIN and at least one --model DIR are required');
  if (!Number.isInteger(o.runs) || o.runs < 1) fail('--runs wants a whole number, at least 1');
  if (!Number.isInteger(o.port) || o.port < 1 || o.port > 65535) fail('--port wants a TCP port');
  if (!/^\d+$/.test(o.threads)) fail('--threads wants a whole number');
  readyRows(o.bin, o.models, o.runs, o.threads, o.cold, o.port).then((rows) => {
    const level = kernelLevel(spawnSync(o.bin, ['inspect', '--model', o.models[0]], { encoding: 'utf8' }).stdout);
    process.stdout.write([`Machine: ${cpuName()}, ${os.cpus().length} logical CPUs, Linux ${os.release()}.`,
      `Kernel level (qwen3d inspect): ${level}.`, '',
      ...tableHead, ...rows, '', readyNote(o.runs, o.threads, o.cold),
      '', 'Command:', '', '    node ' + [path.relative(process.cwd(), process.argv[1]), ...argv].join(' '), ''].join('\n'));
  }, (e) => fail(e && e.message ? e.message : e));
}
