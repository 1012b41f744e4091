// A named-check runner for the daemon's client-side test scripts: each check
// is an async function; failures are collected, not thrown, so one run reports
// every check. finish(label) prints "ok"/"not ok" lines and a count, and exits
// 1 if any check failed.
'use strict';

// An error's message with the first two frames of its stack: enough to
// find the line, short enough that a log's tail holds every failure.
function brief(e) {
  if (!e || !e.stack) return String(e);
  let frames = 0;
  return e.stack.split('\n').filter((l) => !/^\s+at /.test(l) || frames++ < 2).join('\n');
}

function checks() {
  let failures = 0;
  const results = [];
  async function check(name, fn) {
    try {
      await fn();
      results.push(`ok - ${name}`);
    } catch (e) {
      failures++;
      results.push(`not ok - ${name}: ${brief(e)}`);
    }
  }
  function finish(label) {
    for (const r of results) console.log(r);
    console.log(`${label}: ${results.length - failures} passed, ${failures} failed`);
    process.exit(failures ? 1 : 0);
  }
  return { check, finish };
}

module.exports = { checks };
