// A browser driven by npm's puppeteer-core (book/browser/package-lock.json pins it), for checks
// written in Python (book/browsers.py): one JSON request per line on stdin, one JSON answer per
// line on stdout, {id, value} or {id, error}. Firefox is driven over WebDriver BiDi, which
// puppeteer-core speaks to it; it downloads no browser, the executable is given.
//
//   {"id": 1, "op": "launch", "browser": "firefox", "executable": "/usr/bin/firefox-esr",
//    "width": 1280, "height": 900, "dark": false}         -> {version, pid}
//   {"op": "goto", "url": ...}                             the page, after its load event
//   {"op": "evaluate", "expression": ...}                  its value (a Promise is awaited)
//   {"op": "upload", "selector": "#ad-files", "files": [paths]}    a file input's files
//   {"op": "viewport", "width": 390, "height": 844}
//   {"op": "screenshot", "path": ..., "fullPage": true}
//   {"op": "preload", "script": ...}                       run in every document before its own
//   {"op": "events"}     console errors, uncaught exceptions, request URLs since the last call
//   {"op": "close"}
import readline from "node:readline";
import puppeteer from "puppeteer-core";

let browser = null, page = null, kind = null;
let events = { console: [], errors: [], requests: [] };

async function launch({ browser: name, executable, width = 1280, height = 900, dark = false }) {
  kind = name;
  const options = { browser: kind, executablePath: executable, headless: true,
                    defaultViewport: { width, height } };
  if (kind === "firefox") {
    // 0: dark, 1: light (the page's prefers-color-scheme)
    options.extraPrefsFirefox = { "layout.css.prefers-color-scheme.content-override": dark ? 0 : 1 };
  } else {
    options.args = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    ...(dark ? ["--force-dark-mode"] : [])];
  }
  browser = await puppeteer.launch(options);
  page = await browser.newPage();
  page.on("console", m => {
    if (m.type() === "error" || m.type() === "assert") events.console.push(m.text());
  });
  page.on("pageerror", e => events.errors.push(String(e && e.message || e)));
  page.on("request", r => events.requests.push(r.url()));
  if (kind !== "firefox") await page.setViewport({ width, height });
  return { version: await browser.version(), pid: browser.process().pid };
}

async function viewport({ width, height }) {
  if (kind === "firefox") {
    // puppeteer-core's setViewport also sends emulation.setScreenOrientationOverride, which
    // Firefox ESR 140 does not know: the BiDi command alone.
    await page.mainFrame().browsingContext.setViewport({ viewport: { width, height } });
  } else {
    await page.setViewport({ width, height });
  }
  return page.evaluate("[innerWidth, innerHeight]");
}

const OPS = {
  launch,
  viewport,
  goto: async ({ url }) => { await page.goto(url, { waitUntil: "load", timeout: 120000 }); return url; },
  evaluate: ({ expression }) => page.evaluate(expression),
  upload: async ({ selector, files }) => {
    const input = await page.$(selector);
    if (!input) throw new Error(`no element ${selector}`);
    await input.uploadFile(...files);
    return files.length;
  },
  screenshot: async ({ path, fullPage = true }) => { await page.screenshot({ path, fullPage }); return path; },
  preload: async ({ script }) => { await page.evaluateOnNewDocument(script); return true; },
  events: () => { const out = events; events = { console: [], errors: [], requests: [] }; return out; },
  close: async () => { if (browser) await browser.close(); browser = null; return true; },
};

const lines = readline.createInterface({ input: process.stdin });
let chain = Promise.resolve();                 // one request at a time, in order
lines.on("line", line => {
  chain = chain.then(async () => {
    const request = JSON.parse(line);
    let answer;
    try {
      const value = await OPS[request.op](request);
      answer = { id: request.id, value: value === undefined ? null : value };
    } catch (e) {
      answer = { id: request.id, error: String(e && e.message || e) };
    }
    process.stdout.write(JSON.stringify(answer) + "\n");
    if (request.op === "close") process.exit(0);
  });
});
lines.on("close", async () => { await chain; if (browser) await browser.close(); process.exit(0); });
