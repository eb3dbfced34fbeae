// A browser driven for book/check_translator.py, one JSON request a line on stdin, one JSON answer a
// line on stdout: {"id", "op", ...} -> {"id", "value"} or {"id", "error"}.
//
//   node book/browsers/bridge.mjs firefox /usr/bin/firefox-esr
//
// Ops: goto {url} (waits for the load event), eval {expression} (its value, a promise awaited;
// JSON values only), files {selector, paths} (sets a file input's files, as a reader choosing
// them), log (what the page reported: console errors, uncaught exceptions, and the URL and body
// bytes of every response), close. Puppeteer drives Firefox over WebDriver BiDi; nothing is
// downloaded (puppeteer-core brings no browser).
import readline from "node:readline";
import puppeteer from "puppeteer-core";

const [browserName, executablePath] = process.argv.slice(2);
const browser = await puppeteer.launch({
  browser: browserName, executablePath, headless: true,
  // the machine's closed network: no update checks or telemetry connections
  extraPrefsFirefox: {"app.update.enabled": false, "datareporting.policy.dataSubmissionEnabled": false,
                      "toolkit.telemetry.enabled": false, "network.captive-portal-service.enabled": false},
});
const page = (await browser.pages())[0] || await browser.newPage();
const log = {console: [], exceptions: [], responses: []};
page.on("console", (m) => { if (m.type() === "error") log.console.push(m.text()); });
page.on("pageerror", (e) => log.exceptions.push(String(e && e.message || e)));
page.on("response", async (r) => {
  const entry = {url: r.url(), status: r.status(), bytes: Number(r.headers()["content-length"] || 0)};
  log.responses.push(entry);
  try { entry.bytes = (await r.buffer()).length; } catch { /* a body the browser did not keep */ }
});

const ops = {
  goto: async ({url}) => { await page.goto(url, {waitUntil: "load", timeout: 120000}); return true; },
  eval: async ({expression}) => page.evaluate(expression),
  files: async ({selector, paths}) => { await (await page.$(selector)).uploadFile(...paths); return true; },
  log: async () => log,
  close: async () => { await browser.close(); setTimeout(() => process.exit(0), 10); return true; },
};

const lines = readline.createInterface({input: process.stdin});
for await (const line of lines) {
  const request = JSON.parse(line);
  let answer;
  try {
    answer = {id: request.id, value: (await ops[request.op](request)) ?? null};
  } catch (e) {
    answer = {id: request.id, error: String(e && e.message || e)};
  }
  process.stdout.write(JSON.stringify(answer) + "\n");
}
await browser.close();
