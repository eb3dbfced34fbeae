"""Check the page "Try the translator" in headless Chromium against the PyTorch translator.

    python book/check_translator.py [SITE] [--page book/translator.html] [--quick]
    python book/check_translator.py --harness [--benchmark results/translator-page-cpu.json]

SITE is a built book (default book/_build/html); `--harness` checks the page's files
(book/_static/translator, with the exported model in model/) on a one-element page of its own, so
no book build is needed. The page is served over HTTP on 127.0.0.1 (book/check_site.py's server and
DevTools client) and driven through its documented contract, `window.attentionDerived`:

* tokens: the page's source ids and tokens equal `tok.encode(text, add_eos=True)` and
  `tok.tokens(text, add_eos=True)` on all 1,000 sentences of test_2016_flickr;
* greedy translations equal PyTorch's (results/multi30k-cpu-30min.samples.json) on at least 99% of
  them, and beam search (the manifest's beam and length penalty) PyTorch's `beam_search` one
  sentence at a time on the first 100;
* attention: every layer and head of the three kinds within 1e-4 of PyTorch's on 20 sentences,
  teacher-forced on the page's own output;
* bad input: empty and blank text, a sentence past the length limit, a lone surrogate, emoji,
  Cyrillic and right-to-left text, typed HTML (shown as text, never run), a second click while a
  translation runs, a set of files that is not an exported translator, and the page opened from a
  file (one line saying how to serve it);
* `--own DIR`: the file picker opens the exported translator in DIR, and its translation equals
  what ONNX Runtime gives in Python for the same files.

`--quick` checks 100 sentences instead of 1,000 (and beam on 20). `--benchmark FILE` also measures,
one thread each: the time until `ready`, every byte the page loaded, and the median greedy latency
per test sentence in the page against PyTorch eager on the same machine; it writes FILE.
Exits non-zero on any failure. Needs the package (torch) and the data for the references.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
STATIC = HERE / "_static" / "translator"
BRIDGE = HERE / "browsers" / "bridge.mjs"        # Firefox, over WebDriver BiDi (puppeteer-core)
_spec = importlib.util.spec_from_file_location("check_site", HERE / "check_site.py")
check_site = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("check_site", check_site)
_spec.loader.exec_module(check_site)

HARNESS = """<!doctype html><html><head><meta charset="utf-8"><title>translator</title>
<link rel="stylesheet" href="_static/translator/translator.css"></head><body>
<div id="ad-translator" data-examples='["Ein Hund rennt."]'><p class="ad-loading">Loading</p></div>
<script src="_static/translator/boot.js"></script></body></html>"""


def harness_site(tmp: Path) -> tuple[Path, str]:
    """A site of one page that holds the translator, with the page's files copied beside it."""
    shutil.copytree(STATIC, tmp / "_static" / "translator")
    (tmp / "index.html").write_text(HARNESS, encoding="utf-8")
    return tmp, "index.html"


class Page:
    """One page in headless Chromium, with its network traffic counted."""

    def __init__(self, dt, url: str):
        self.dt, self.url = dt, url
        dt.call("Network.enable")
        dt.call("Runtime.enable")
        dt.call("Page.enable")
        self.t0 = time.perf_counter()
        dt.call("Page.navigate", url=url)
        dt.wait_for("Page.loadEventFired")

    def js(self, expression: str):
        return self.dt.evaluate(expression)

    def call(self, expression: str):
        """The value of an async expression, or {'error': message} when it rejects."""
        return self.js(f"(async () => {{ try {{ return await ({expression}); }} "
                       "catch (e) { return {error: String(e && e.message), "
                       "isError: e instanceof Error}; } })()")

    def wait_ready(self) -> float:
        for _ in range(600):
            if self.js("!!(window.attentionDerived && window.attentionDerived.ready)"):
                break
            time.sleep(0.05)
        result = self.call("window.attentionDerived.ready.then(() => true)")
        if result is not True:
            raise RuntimeError(f"the page's translator did not load: {result}")
        return time.perf_counter() - self.t0

    def bytes_loaded(self) -> dict[str, int]:
        """Bytes of every response the page received, by URL (Network.loadingFinished)."""
        urls, sizes = {}, {}
        for event in self.dt.events:
            p = event.get("params", {})
            if event["method"] == "Network.responseReceived":
                urls[p["requestId"]] = p["response"]["url"]
            elif event["method"] == "Network.dataReceived":
                sizes[p["requestId"]] = sizes.get(p["requestId"], 0) + p["dataLength"]
        return {urls.get(k, k): v for k, v in sizes.items()}

    def exceptions(self) -> list[str]:
        return [e["params"]["exceptionDetails"].get("text", "") + " " + str(
            e["params"]["exceptionDetails"].get("exception", {}).get("description", ""))[:200]
                for e in self.dt.events if e["method"] == "Runtime.exceptionThrown"]

    def console_errors(self) -> list[str]:
        return [" ".join(str(a.get("value", a.get("description", ""))) for a in
                         e["params"].get("args", []))[:200]
                for e in self.dt.events if e["method"] == "Runtime.consoleAPICalled"
                and e["params"].get("type") == "error"]

    def set_files(self, selector: str, paths: list[str]) -> None:
        "Choose `paths` in the file input `selector`, as a reader does."
        doc = self.dt.call("DOM.getDocument")
        node = self.dt.call("DOM.querySelector", nodeId=doc["root"]["nodeId"], selector=selector)
        self.dt.call("DOM.setFileInputFiles", nodeId=node["nodeId"], files=paths)

    def goto(self, url: str) -> None:
        self.dt.call("Page.navigate", url=url)
        self.dt.wait_for("Page.loadEventFired")


class BridgePage(Page):
    """The same page in another browser, driven by puppeteer-core over WebDriver BiDi
    (book/browsers/bridge.mjs, one JSON line a request): Firefox, which has no DevTools protocol."""

    def __init__(self, browser: str, executable: str, url: str):
        self.proc = subprocess.Popen(["node", str(BRIDGE), browser, executable],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.url, self.n = url, 0
        self.t0 = time.perf_counter()
        self.request("goto", url=url)

    def request(self, op: str, **args):
        self.n += 1
        self.proc.stdin.write(json.dumps({"id": self.n, "op": op, **args}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the {op!r} request ended the browser bridge (rc "
                               f"{self.proc.poll()})")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"{op}: {answer['error']}")
        return answer["value"]

    def js(self, expression: str):
        return self.request("eval", expression=expression)

    def bytes_loaded(self) -> dict[str, int]:
        sizes: dict[str, int] = {}
        for r in self.request("log")["responses"]:
            sizes[r["url"]] = sizes.get(r["url"], 0) + r["bytes"]
        return sizes

    def exceptions(self) -> list[str]:
        return [e[:200] for e in self.request("log")["exceptions"]]

    def console_errors(self) -> list[str]:
        return [e[:200] for e in self.request("log")["console"]]

    def set_files(self, selector: str, paths: list[str]) -> None:
        self.request("files", selector=selector, paths=paths)

    def goto(self, url: str) -> None:
        self.request("goto", url=url)

    def close(self) -> None:
        try:
            self.request("close")
            self.proc.wait(timeout=30)
        except (RuntimeError, OSError, subprocess.TimeoutExpired):
            pass
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


class Checks:
    def __init__(self):
        self.failures: list[str] = []
        self.notes: list[str] = []
        self.outputs: dict[str, list] = {}      # target ids, greedy and beam: browsers compared

    def check(self, ok: bool, what: str) -> None:
        (self.notes if ok else self.failures).append(("ok   " if ok else "FAIL ") + what)
        print(("ok   " if ok else "FAIL ") + what, flush=True)


def references(n: int, n_beam: int):
    """The shipped translator, its tokenizer, the test sentences and PyTorch's outputs."""
    import torch

    from transformer_lib import load_translator
    from transformer_lib.data import load_multi30k, records_dir
    from transformer_lib.export import translate_one
    torch.set_num_threads(1)
    model, tok, _ = load_translator()
    german = [de for de, _ in load_multi30k("test_2016_flickr")][:n]
    samples = json.loads((records_dir() / "multi30k-cpu-30min.samples.json").read_text())
    return model, tok, german, samples["greedy"][:n], samples["length_penalty"], translate_one


def check_tokens(page: Page, tok, german: list[str], checks: Checks) -> None:
    got = page.call(f"{json.dumps(german)}.map(t => window.attentionDerived.tokenize(t))")
    same = sum(g["ids"] == tok.encode(t, add_eos=True)
               and g["tokens"] == tok.tokens(t, add_eos=True) for g, t in zip(got, german))
    checks.check(same == len(german), f"tokens equal the package's on {same} of {len(german)}")


def translate_all(page: Page, texts: list[str], beam: int) -> list[dict]:
    out = []
    for i in range(0, len(texts), 50):
        batch = json.dumps(texts[i:i + 50])
        out += page.call(f"(async () => {{ const r = []; for (const t of {batch}) {{ "
                         f"const x = await window.attentionDerived.translate(t, {{beam: {beam}}}); "
                         "r.push({translation: x.translation, target_ids: x.target_ids, "
                         "ms: x.milliseconds.total}); } return r; })()")
    return out


def check_translations(page, model, tok, german, greedy, alpha, translate_one, n_beam, checks):
    got = translate_all(page, german, 1)
    checks.outputs["greedy"] = [g["target_ids"] for g in got]
    same = sum(g["translation"] == ref for g, ref in zip(got, greedy))
    checks.check(same >= 0.99 * len(german),
                 f"greedy translations equal PyTorch's on {same} of {len(german)} (99% needed)")
    for i, (g, ref) in enumerate(zip(got, greedy)):
        if g["translation"] != ref:
            print("     " + why_different(model, tok, german[i], g["target_ids"], translate_one))
    beam_size = page.js("window.attentionDerived.book.manifest.beam_size")
    got = translate_all(page, german[:n_beam], beam_size)
    checks.outputs["beam"] = [g["target_ids"] for g in got]
    ref = [translate_one(model, tok, t, beam_size, alpha) for t in german[:n_beam]]
    same = sum(g["target_ids"] == r for g, r in zip(got, ref))
    checks.check(same == n_beam, f"beam {beam_size} (alpha {alpha}) equals PyTorch's on {same} "
                                 f"of {n_beam}")
    return got


def why_different(model, tok, text: str, page_ids: list[int], translate_one) -> str:
    """Where the page's greedy output leaves PyTorch's, and PyTorch's logits there: the margin of
    its choice over the page's (a margin near 0 is a tie that rounding decides)."""
    import torch
    ref = translate_one(model, tok, text)
    p = next((k for k, (a, b) in enumerate(zip(ref, page_ids)) if a != b), None)
    if p is None:
        return f"{text!r}: the same ids as PyTorch one sentence at a time (the record was batched)"
    with torch.no_grad():
        src = torch.tensor([tok.encode(text, add_eos=True)])
        logits = model.decode(torch.tensor([ref[:p]]), model.encode(src))[0, -1]
    margin = float(logits[ref[p]] - logits[page_ids[p]])
    return (f"{text!r}: step {p}, PyTorch {tok.tokenizer.id_to_token(ref[p])!r} over the page's "
            f"{tok.tokenizer.id_to_token(page_ids[p])!r} by {margin:.2e} in logits")


def check_attention(page, model, tok, german: list[str], checks: Checks) -> None:
    import torch

    from transformer_lib.export import keeping_weights
    worst = 0.0
    for text in german:
        got = page.call(f"window.attentionDerived.translate({json.dumps(text)}, {{beam: 1}})")
        src = torch.tensor([got["source_ids"]])
        tgt = torch.tensor([got["target_ids"][:-1]])
        with torch.no_grad(), keeping_weights(model):
            model(src, tgt)
            ref = {"encoder": [m.self_attn.attn_weights[0] for m in model.encoder.layers],
                   "decoder": [m.self_attn.attn_weights[0] for m in model.decoder.layers],
                   "cross": [m.cross_attn.attn_weights[0] for m in model.decoder.layers]}
        for kind, layers in ref.items():
            page_w = torch.tensor(got["attention"][kind])                  # (N, h, Q, K)
            worst = max(worst, float((page_w - torch.stack(layers)).abs().max()))
    checks.check(worst < 1e-4, f"attention within 1e-4 of PyTorch's on {len(german)} sentences "
                               f"(largest difference {worst:.1e})")


BAD = {  # text -> what the promise must do: "reject" or "translate"
    "": "reject", "   \n ": "reject", "Hund " * 300: "reject", "Ein Hund \ud800 rennt": "reject",
    "Ein Hund 🐕 rennt 😀": "translate", "Собака бежит по траве.": "translate",
    "כלב רץ על הדשא": "translate", "مرحبا بالعالم": "translate",
    '<img src=x onerror="window.__injected=1"><script>window.__injected=2</script>': "translate",
}


def check_bad_input(page: Page, checks: Checks) -> None:
    for text, want in BAD.items():
        got = page.call(f"window.attentionDerived.translate({json.dumps(text)}, {{beam: 1}})")
        if want == "reject":
            ok = isinstance(got, dict) and got.get("isError") and got.get("error")
            checks.check(bool(ok), f"{text[:20]!r}... rejected with an Error: "
                                   f"{(got or {}).get('error')}")
        else:
            checks.check(isinstance(got, dict) and isinstance(got.get("translation"), str),
                         f"{text[:20]!r}... translated: {(got or {}).get('translation', got)!r}")
    long_text = "Hund " * 300
    page.js(f"document.getElementById('ad-source').value = {json.dumps(long_text)}; "
            "document.getElementById('ad-translate').click(); true")
    message = wait_status(page)
    checks.check("at most" in message and "tokens" in message,
                 f"the page names the length limit: {message!r}")
    typed = '<b id="typed">bold</b><img src=x onerror="window.__injected=1">'
    page.js(f"document.getElementById('ad-source').value = {json.dumps(typed)}; "
            "document.getElementById('ad-translate').click(); true")
    wait_status(page)
    injected = page.js("[window.__injected === undefined, !document.getElementById('typed'), "
                       "document.querySelectorAll('#ad-output *').length]")
    checks.check(injected == [True, True, 0],
                 f"typed HTML is shown as text, never run ({injected})")
    runs = page.js("window.attentionDerived.runs")
    page.js("document.getElementById('ad-source').value = 'Zwei Hunde spielen im Schnee.'; "
            "const b = document.getElementById('ad-translate'); "
            "b.click(); b.click(); b.click(); true")
    wait_status(page)
    checks.check(page.js("window.attentionDerived.runs") == runs + 1,
                 "three quick clicks start one translation")
    checks.check(page.js("document.getElementById('ad-output').textContent.length > 0"),
                 "the translation is shown in #ad-output")


def wait_status(page: Page) -> str:
    for _ in range(400):
        text = page.js("document.getElementById('ad-status').textContent")
        if not text.startswith(("Translating", "Opening", "Loading")):
            return text
        time.sleep(0.05)
    return text


def check_files(page: Page, own: Path | None, checks: Checks) -> None:
    """The file picker: a set of files that is not a translator, then (with `own`) a real one."""
    tmp = Path(tempfile.mkdtemp())
    (tmp / "manifest.json").write_text("{}")
    page.set_files("#ad-files", [str(tmp / "manifest.json")])
    time.sleep(0.2)
    message = wait_status(page)
    checks.check("missing" in message and "weights.bin" in message,
                 f"files that are not a translator: {message!r}")
    if own is None:
        return
    from transformer_lib.export import OnnxTranslator, translate_one
    from transformer_lib.text import SubwordTokenizer
    names = json.loads(page.js("JSON.stringify(window.attentionDerived.files)"))
    files = [str(own / name) for name in names]
    page.set_files("#ad-files", files)
    time.sleep(0.2)
    loaded = page.call("window.attentionDerived.loading.then(t => t.manifest.d_model)")
    text = "ein hund rennt"
    got = page.call(f"window.attentionDerived.translate({json.dumps(text)}, {{beam: 1}})")
    tok = SubwordTokenizer.load(own / "tokenizer.json")
    ref = translate_one(OnnxTranslator(own), tok, text)
    ids = got.get("target_ids") if isinstance(got, dict) else got
    checks.check(ids == ref, f"the file picker opened {own.name} (d_model {loaded}); its "
                             f"translation equals ONNX Runtime's in Python: {str(ids)[:60]}")
    page.call("window.attentionDerived.load(null)")


def check_from_file(page: Page, site: Path, rel: str, checks: Checks) -> None:
    page.goto((site / rel).resolve().as_uri())
    text = page.js("(document.querySelector('.ad-unavailable') || {}).textContent || ''")
    checks.check("make serve" in text,
                 f"opened from a file, the page says how to serve it: {text[:60]!r}")


def benchmark(page: Page, ready_s: float, german: list[str], model, tok, translate_one,
              path: Path) -> None:
    import torch

    from transformer_lib.benchmarking import cpu_model
    from transformer_lib.engineering import git_commit
    page_ms, prefix_ms, torch_ms = [], [], []
    for i, text in enumerate(german):               # side by side, the order alternating
        for who in (("step", "prefix", "torch") if i % 2 == 0 else ("torch", "prefix", "step")):
            if who == "torch":
                t0 = time.perf_counter()
                translate_one(model, tok, text)
                torch_ms.append(1000 * (time.perf_counter() - t0))
            else:
                got = page.call(f"window.attentionDerived.translate({json.dumps(text)}, "
                                f"{{decoder: '{who}'}})")
                (page_ms if who == "step" else prefix_ms).append(got["milliseconds"]["search"])
    loaded = page.bytes_loaded()
    record = {"what": "the page 'Try the translator' in headless Chromium against PyTorch eager: "
                      "greedy search, one sentence at a time, one thread each; the page with its "
                      "decoder step graph (key/value cache) and with its prefix graph",
              "cpu": cpu_model(), "torch": torch.__version__, "git_commit": git_commit(),
              "chromium": page.js("navigator.userAgent"),
              "threads": {"page": page.js("window.attentionDerived.threads"),
                          "pytorch": torch.get_num_threads()},
              "sentences": len(german), "seconds_until_ready": round(ready_s, 3),
              "bytes_loaded": sum(loaded.values()),
              "bytes_by_file": {k.rsplit("/", 1)[-1]: v for k, v in sorted(loaded.items())},
              "median_ms": {"page_step": round(statistics.median(page_ms), 2),
                            "page_prefix": round(statistics.median(prefix_ms), 2),
                            "pytorch": round(statistics.median(torch_ms), 2)},
              "median_ratio_per_sentence": {
                  "page_step_to_pytorch": round(statistics.median(
                      p / t for p, t in zip(page_ms, torch_ms)), 3),
                  "page_prefix_to_step": round(statistics.median(
                      p / t for p, t in zip(prefix_ms, page_ms)), 3)}}
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record, indent=1))


BROWSERS = ("chromium", "firefox")


def find_firefox(explicit: str | None = None) -> str | None:
    for name in ([explicit] if explicit else []) + ["/usr/bin/firefox-esr", "firefox-esr",
                                                     "firefox"]:
        found = shutil.which(name) if name else None
        if found:
            return found
    return None


def bridge_ready() -> str | None:
    "Why the Firefox bridge cannot run (None when it can): Node.js and puppeteer-core (npm ci)."
    if shutil.which("node") is None:
        return "no Node.js (Debian: apt-get install nodejs)"
    if not (BRIDGE.parent / "node_modules" / "puppeteer-core").is_dir():
        return f"puppeteer-core is not installed (npm ci --prefix {BRIDGE.parent})"
    return None


def open_page(browser: str, url: str, stack: contextlib.ExitStack, executable: str | None = None):
    """The page at `url` in `browser`: Chromium through its DevTools protocol, Firefox through
    the puppeteer-core bridge. Everything started is stopped when `stack` closes."""
    if browser == "chromium":
        exe = check_site.find_chromium(executable)
        if exe is None:
            raise LookupError("no Chromium found (Debian: apt-get install chromium)")
        profile = Path(tempfile.mkdtemp())
        stack.callback(shutil.rmtree, profile, ignore_errors=True)
        proc, ws = check_site.start_chromium(exe, profile)
        stack.callback(proc.kill)
        return Page(check_site.DevTools(ws), url)
    exe = find_firefox(executable)
    if exe is None:
        raise LookupError("no Firefox found (Debian: apt-get install firefox-esr)")
    why = bridge_ready()
    if why:
        raise LookupError(why)
    page = BridgePage("firefox", exe, url)
    stack.callback(page.close)
    return page


def run(site: Path, rel: str, quick: bool = False, own: Path | None = None,
        bench: Path | None = None, chromium: str | None = None,
        browser: str = "chromium") -> Checks:
    checks = Checks()
    n, n_beam = (100, 20) if quick else (1000, 100)
    model, tok, german, greedy, alpha, translate_one = references(n, n_beam)
    server = check_site.serve(site)
    with contextlib.ExitStack() as stack:
        stack.callback(server.shutdown)
        try:
            page = open_page(browser, f"http://127.0.0.1:{server.server_address[1]}/{rel}",
                             stack, chromium if browser == "chromium" else None)
        except LookupError as e:
            checks.check(False, f"{browser}: {e}")
            return checks
        ready = page.wait_ready()
        checks.check(True, f"{browser}: ready after {ready:.1f} s")
        if bench and browser == "chromium":
            benchmark(page, ready, german, model, tok, translate_one, bench)
        check_tokens(page, tok, german, checks)
        check_translations(page, model, tok, german, greedy, alpha, translate_one, n_beam, checks)
        check_attention(page, model, tok, german[:20], checks)
        check_bad_input(page, checks)
        check_files(page, own, checks)
        origin = f"http://127.0.0.1:{server.server_address[1]}/"
        foreign = [u for u in page.bytes_loaded() if not u.startswith((origin, "data:", "blob:"))]
        checks.check(not foreign, f"nothing loaded from another host ({foreign[:3]})")
        errors = page.exceptions()
        checks.check(not errors, f"no JavaScript exception ({errors[:2]})")
        console = page.console_errors()
        checks.check(not console, f"no error in the console ({console[:2]})")
        failed = [f for f in check_site._Handler.failed]
        checks.check(not failed, f"no failed request to the server ({failed[:3]})")
        check_from_file(page, site, rel, checks)
    return checks


def compare_browsers(results: dict[str, Checks]) -> Checks:
    """The browsers' target ids, greedy and beam, on the same sentences: identical, or the
    sentences where they part."""
    checks = Checks()
    (a, ca), (b, cb) = results.items()
    for kind in ("greedy", "beam"):
        x, y = ca.outputs.get(kind, []), cb.outputs.get(kind, [])
        same = sum(p == q for p, q in zip(x, y))
        checks.check(bool(x) and len(x) == len(y) and same == len(x),
                     f"{kind}: {b}'s translations equal {a}'s on {same} of {len(x)} sentences")
    return checks


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("site", nargs="?", default=str(HERE / "_build" / "html"))
    p.add_argument("--page", default="book/translator.html")
    p.add_argument("--harness", action="store_true", help="check the page's files on a page of "
                   "their own (no book build needed)")
    p.add_argument("--quick", action="store_true", help="100 sentences instead of 1,000")
    p.add_argument("--own", help="an exported translator to open with the file picker")
    p.add_argument("--benchmark", help="also measure (in Chromium), and write the record to this "
                   "file")
    p.add_argument("--browser", choices=(*BROWSERS, "all"), default="all",
                   help="which browser (default: all, then their outputs compared)")
    args = p.parse_args(argv)
    browsers = BROWSERS if args.browser == "all" else (args.browser,)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        site, rel = harness_site(Path(tmp)) if args.harness else (Path(args.site), args.page)
        for browser in browsers:
            results[browser] = run(site, rel, args.quick, Path(args.own) if args.own else None,
                                   Path(args.benchmark) if args.benchmark else None,
                                   browser=browser)
    if len(results) == 2:
        results["both"] = compare_browsers(results)
    failed = sum(len(c.failures) for c in results.values())
    for name, c in results.items():
        print(f"translator page, {name}: {len(c.notes)} checks passed, {len(c.failures)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
