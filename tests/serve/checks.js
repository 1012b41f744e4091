// A named-check runner for the daemon's client-side test scripts: each check
// is an async function; failures are collected, not thrown, so one run reports
// every check. finish(label) prints "ok"/"not ok" lines and a count, and exits
// 1 if any check failed.
'use strict';

function checks() {
  let failures = 0;
  const results = [];
  async function check(name, fn) {
    try {
      await fn();
      results.push(`ok - ${name}`);
    } catch (e) {
      failures++;
      results.push(`not ok - ${name}: ${e && e.stack ? e.stack : e}`);
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
