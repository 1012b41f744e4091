// Two origins for tests/serve_cors.sh: one tiny HTTP server per origin on
// loopback (ports picked by the kernel), each serving the same blank page
// at /. Prints "PORT_A PORT_B" on one line once both listen, then serves
// until killed. Pages from them are "another origin" for the daemon, which
// listens on a port of its own.
'use strict';
const http = require('http');

function serve() {
  return new Promise((resolve) => {
    const s = http.createServer((req, res) => {
      res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8' });
      res.end('<!doctype html><title>other origin</title><p>cors test page</p>');
    });
    s.listen(0, '127.0.0.1', () => resolve(s.address().port));
  });
}

Promise.all([serve(), serve()]).then(([a, b]) => console.log(`${a} ${b}`));
