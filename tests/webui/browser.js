// Headless Chromium (the Debian package) driven by puppeteer-core, for the
// web UI's tests and screenshots. The flags keep Chromium from opening any
// connection of its own (updates, sync, field trials, QUIC probes): the
// machines these run on reach no network beyond loopback. Every launch
// gets a fresh profile folder, removed on close.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const puppeteer = require('puppeteer-core');

const CHROMIUM = process.env.QD_CHROMIUM || '/usr/bin/chromium';

async function launch() {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'qwen3d-chromium-'));
  const browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    userDataDir: profile,
    args: [
      '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
      '--disable-default-apps', '--disable-extensions', '--metrics-recording-only', '--no-default-browser-check',
      '--disable-dev-shm-usage', '--password-store=basic', '--use-mock-keychain',
    ],
    protocolTimeout: 120000,
  });
  const close = browser.close.bind(browser);
  browser.close = async () => {
    try {
      await close();
    } finally {
      fs.rmSync(profile, { recursive: true, force: true });
    }
  };
  return browser;
}

// A new page whose console errors, page errors and CSP violations are kept in page.problems.
async function openPage(browser, width = 1280, height = 800) {
  const page = await browser.newPage();
  await page.setViewport({ width, height });
  page.problems = [];
  page.on('console', (m) => {
    if (m.type() === 'error' || /Content[- ]Security[- ]Policy|Trusted Type/i.test(m.text()))
      page.problems.push(`console ${m.type()}: ${m.text()}`);
  });
  page.on('pageerror', (e) => page.problems.push(`page error: ${e.message}`));
  // securitypolicyviolation events, recorded in the page before any script runs.
  await page.evaluateOnNewDocument(() => {
    window.__cspViolations = [];
    document.addEventListener('securitypolicyviolation', (e) =>
      window.__cspViolations.push(`${e.violatedDirective} ${e.blockedURI}`));
  });
  return page;
}

module.exports = { launch, openPage, CHROMIUM };
