"""Check the page "Try the translator" in headless Chromium and Firefox against the PyTorch
translator, and the two browsers against each other.

    python book/check_translator.py [SITE] [--page book/translator.html] [--quick]
                                    [--browsers chromium,firefox] [--own DIR] [--shots DIR]
    python book/check_translator.py --harness [--benchmark results/translator-page-cpu.json]

SITE is a built book (default book/_build/html); `--harness` checks the page's files
(book/_static/translator, with the exported model in model/) on a one-element page of its own, so
no book build is needed. The page is served on 127.0.0.1 by book/serve.py's server (cross-origin
isolated and gzip-compressed, as `make serve` serves it; the page runs on one thread here), and
driven through its documented contract, `window.attentionDerived`, in each browser in turn
(book/browsers.py: Chromium over the DevTools protocol, Firefox over WebDriver BiDi):

* tokens: the page's source ids and tokens equal `tok.encode(text, add_eos=True)` and
  `tok.tokens(text, add_eos=True)` on all 1,000 sentences of test_2016_flickr;
* greedy translations equal PyTorch's (results/multi30k-cpu-30min.samples.json) on at least 99% of
  them, and beam search (the manifest's beam and length penalty) PyTorch's `beam_search` one
  sentence at a time on the first 100;
* attention: every layer and head of the three kinds within 1e-4 of PyTorch's on 20 sentences,
  teacher-forced on the page's own output;
* bad input: empty and blank text, a sentence past the length limit, a lone surrogate, emoji,
  Cyrillic and right-to-left text, typed HTML (shown as text, never run), a second click while a
  translation runs, query strings the page does not know (`?view=toString`), and the page opened
  from a file (one line saying how to serve it);
* the file picker: files that are not an exported translator (a file missing, a file that is not
  JSON, a graph that does not parse, a file of another size or SHA-256 than the manifest lists, a
  manifest of an older format) each get a message naming the file; the page's own model files
  open, translate as ONNX Runtime does in Python, and opened ten times in a row leave only the
  last one's sessions alive, the runtime's memory growing no more (measured before and after
  each); `--own DIR` opens the exported translator in DIR the same way;
* the page's console shows no error, no script throws, nothing is loaded from another host, and
  no request fails;
* with two browsers: Firefox's tokens, greedy and beam outputs and attention weights are those of
  Chromium, bit for bit.

`--quick` checks 100 sentences instead of 1,000 (beam against PyTorch on 20). `--benchmark FILE`
also measures, in each browser, one thread each: every byte the page transferred until it was
ready (as the server sent it, compressed), the time until `ready`, and for each of 100 test
sentences the time from the click on Translate to the drawn maps (search, the maps pass and
drawing) beside PyTorch's greedy search of the same sentence; and the page's memory; it writes
FILE. Exits non-zero on any failure. Needs the package (torch) and the data for the references.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
STATIC = HERE / "_static" / "translator"


def _load(name: str):
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


check_site = _load("check_site")
browsers = _load("browsers")
serve = _load("serve")
BROWSERS = ("chromium", "firefox")

HARNESS = """<!doctype html><html><head><meta charset="utf-8"><title>translator</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="_static/translator/translator.css"></head><body>
<div id="ad-translator" data-examples='["Ein Hund rennt."]'><p class="ad-loading">Loading</p></div>
<script src="_static/translator/boot.js"></script></body></html>"""


def harness_site(tmp: Path) -> tuple[Path, str]:
    """A site of one page that holds the translator, with the page's files copied beside it."""
    shutil.copytree(STATIC, tmp / "_static" / "translator")
    (tmp / "index.html").write_text(HARNESS, encoding="utf-8")
    return tmp, "index.html"


class Page:
    """The translator's page in one browser (book/browsers.py)."""

    def __init__(self, browser, url: str):
        self.browser, self.url = browser, url
        self.t0 = time.perf_counter()
        browser.goto(url)

    def js(self, expression: str):
        return self.browser.evaluate(expression)

    def call(self, expression: str):
        """The value of an async expression, or {'error': message} when it rejects."""
        return self.js(f"(async () => {{ try {{ return await ({expression}); }} "
                       "catch (e) { return {error: String(e && e.message), "
                       "isError: e instanceof Error}; } })()")

    def wait_ready(self) -> float:
        for _ in range(1200):
            if self.js("!!(window.attentionDerived && window.attentionDerived.ready)"):
                break
            time.sleep(0.05)
        result = self.call("window.attentionDerived.ready.then(() => true)")
        if result is not True:
            raise RuntimeError(f"the page's translator did not load: {result}")
        return time.perf_counter() - self.t0


class Checks:
    def __init__(self):
        self.failures: list[str] = []
        self.notes: list[str] = []
        self.prefix = ""

    def check(self, ok: bool, what: str) -> None:
        line = ("ok   " if ok else "FAIL ") + self.prefix + what
        (self.notes if ok else self.failures).append(line)
        print(line, flush=True)


def references(n: int):
    """The shipped translator, its tokenizer, the test sentences and PyTorch's greedy outputs."""
    import torch

    from transformer_lib import load_translator
    from transformer_lib.data import load_multi30k, records_dir
    torch.set_num_threads(1)
    model, tok, _ = load_translator()
    german = [de for de, _ in load_multi30k("test_2016_flickr")][:n]
    samples = json.loads((records_dir() / "multi30k-cpu-30min.samples.json").read_text())
    return model, tok, german, samples["greedy"][:n], samples["length_penalty"]


def check_tokens(page: Page, tok, german: list[str], checks: Checks) -> list:
    got = page.call(f"{json.dumps(german)}.map(t => window.attentionDerived.tokenize(t))")
    same = sum(g["ids"] == tok.encode(t, add_eos=True)
               and g["tokens"] == tok.tokens(t, add_eos=True) for g, t in zip(got, german))
    checks.check(same == len(german), f"tokens equal the package's on {same} of {len(german)}")
    return got


def translate_all(page: Page, texts: list[str], beam: int) -> list[dict]:
    out = []
    for i in range(0, len(texts), 50):
        batch = json.dumps(texts[i:i + 50])
        out += page.call(f"(async () => {{ const r = []; for (const t of {batch}) {{ "
                         f"const x = await window.attentionDerived.translate(t, {{beam: {beam}}}); "
                         "r.push({translation: x.translation, target_ids: x.target_ids, "
                         "ms: x.milliseconds.total}); } return r; })()")
    return out


def check_translations(page, model, tok, german, greedy, alpha, n_beam, checks) -> dict:
    from transformer_lib.export import translate_one
    got = translate_all(page, german, 1)
    same = sum(g["translation"] == ref for g, ref in zip(got, greedy))
    checks.check(same >= 0.99 * len(german),
                 f"greedy translations equal PyTorch's on {same} of {len(german)} (99% needed)")
    for i, (g, ref) in enumerate(zip(got, greedy)):
        if g["translation"] != ref:
            print("     " + why_different(model, tok, german[i], g["target_ids"]))
    beam_size = page.js("window.attentionDerived.book.manifest.beam_size")
    beams = translate_all(page, german, beam_size)
    ref = [translate_one(model, tok, t, beam_size, alpha) for t in german[:n_beam]]
    same = sum(g["target_ids"] == r for g, r in zip(beams, ref))
    checks.check(same == n_beam, f"beam {beam_size} (alpha {alpha}) equals PyTorch's on {same} "
                                 f"of {n_beam}")
    return {"greedy": [g["target_ids"] for g in got], "beam": [g["target_ids"] for g in beams]}


def why_different(model, tok, text: str, page_ids: list[int]) -> str:
    """Where the page's greedy output leaves PyTorch's, and PyTorch's logits there: the margin of
    its choice over the page's (a margin near 0 is a tie that rounding decides)."""
    import torch

    from transformer_lib.export import translate_one
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


def check_attention(page, model, tok, german: list[str], checks: Checks) -> list:
    import torch

    from transformer_lib.export import keeping_weights
    worst, pages = 0.0, []
    for text in german:
        got = page.call(f"window.attentionDerived.translate({json.dumps(text)}, {{beam: 1}})")
        pages.append(got["attention"])
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
    return pages


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
    page.js("(() => { document.getElementById('ad-source').value = 'Zwei Hunde spielen im "
            "Schnee.'; const b = document.getElementById('ad-translate'); "
            "b.click(); b.click(); b.click(); return true; })()")
    wait_status(page)
    checks.check(page.js("window.attentionDerived.runs") == runs + 1,
                 "three quick clicks start one translation")
    checks.check(page.js("document.getElementById('ad-output').textContent.length > 0"),
                 "the translation is shown in #ad-output")


BUSY = ("Translating", "Opening", "Loading", "Checking")


def wait_status(page: Page, selector: str = "#ad-status") -> str:
    for _ in range(600):
        text = page.js(f"(document.querySelector({json.dumps(selector)}) || {{}}).textContent "
                       "|| ''")
        if not text.startswith(BUSY):
            return text
        time.sleep(0.05)
    return text


def wait_opened(page: Page) -> str:
    """The file picker's message once the page has finished with the files it was given."""
    page.call("window.attentionDerived.loading.catch(() => null)")
    return wait_status(page, "#ad-own-status")


def choose(page: Page, files: list[Path]) -> str:
    """Give the file picker `files` and return the message it shows."""
    # an input given the files it holds already fires no change event: empty it first
    page.js("window.attentionDerived.loading = null; "
            "document.getElementById('ad-files').value = ''; true")
    # absolute paths: the browser resolves a relative one against its own working directory
    # (make browser-check names the site book/_build/html), and then cannot read the file
    page.browser.set_files("#ad-files", [Path(f).resolve() for f in files])
    for _ in range(200):                      # the input's change event starts the loading
        if page.js("window.attentionDerived.loading !== null"):
            return wait_opened(page)
        time.sleep(0.05)
    raise RuntimeError(f"the file picker did not start opening {[f.name for f in files]}")


def broken_exports(model_dir: Path, tmp: Path) -> dict[str, tuple[Path, list[str]]]:
    """Sets of files that are not an export the page can run, each with the words its message
    must hold: {what: (folder, words)}."""
    from transformer_lib.export import FILES
    manifest = json.loads((model_dir / "manifest.json").read_text())
    sets = {}

    def folder(name: str, change: dict[str, bytes], relist: bool = False, words=()):
        out = tmp / name
        out.mkdir()
        for f in FILES:
            data = change.get(f)
            (out / f).write_bytes(data if data is not None else (model_dir / f).read_bytes())
        if relist:                                  # a manifest that lists the changed files
            m = json.loads((out / "manifest.json").read_text())
            for f, data in change.items():
                if f != "manifest.json":
                    m["files"][f] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            (out / "manifest.json").write_text(json.dumps(m))
        sets[name] = (out, list(words))

    one = tmp / "one"
    one.mkdir()
    (one / "manifest.json").write_text("{}")
    sets["a file alone"] = (one, ["missing", "weights.bin"])
    text = {f: b"hello, not a translator" for f in FILES}
    folder("text in every file", text, words=["manifest.json is not JSON"])
    folder("a graph that does not parse", {"encoder.onnx": b"\x08\x07 not a graph " * 40},
           relist=True, words=["encoder.onnx is not an ONNX graph"])
    folder("a cut weights file", {"weights.bin": b"12345678"},
           words=["weights.bin is 8 bytes", f"{manifest['files']['weights.bin']['bytes']:,}"])
    size = manifest["files"]["tokenizer.json"]["bytes"]
    tokenizer = (model_dir / "tokenizer.json").read_bytes()
    folder("a file of another export", {"tokenizer.json": tokenizer[:size - 1] + b" "},
           words=["tokenizer.json", "SHA-256"])
    old = dict(manifest, format="attention-derived/web-translator-1")
    folder("an older format", {"manifest.json": json.dumps(old).encode()},
           words=["older transformer_lib", "export the translator again"])
    return sets


# Run before the page's scripts: keeps every WebAssembly.Memory the page creates (ONNX Runtime's
# heap is one, made by its JavaScript), so that the heap's size can be read: a heap grows when the
# runtime needs more memory and never shrinks, so sessions that are not released show as growth.
MEMORY_PROBE = """(() => {
  const memories = [];
  WebAssembly.Memory = new Proxy(WebAssembly.Memory, {
    construct(target, args, newTarget) {
      const memory = Reflect.construct(target, args, newTarget);
      memories.push(memory);
      return memory;
    } });
  Object.defineProperty(window, "__wasmMemories", { value: memories });
})();"""
HEAP = "Math.max(0, ...(window.__wasmMemories || []).map(m => m.buffer.byteLength))"
OPENS = 10                  # translators opened in a row (the record gives the first five too)


def check_files(page: Page, model_dir: Path, own: Path | None, checks: Checks,
                record: dict | None = None) -> None:
    """The file picker: sets of files that are not a translator, then the page's own model files
    opened ten times (sessions released, memory measured), then (with `own`) another one."""
    import torch  # noqa: F401  (the references' thread setting)

    from transformer_lib.export import FILES, OnnxTranslator, translate_one
    from transformer_lib.text import SubwordTokenizer
    with tempfile.TemporaryDirectory() as tmp:
        for what, (folder, words) in broken_exports(model_dir, Path(tmp)).items():
            message = choose(page, sorted(folder.iterdir()))
            checks.check(all(w in message for w in words), f"file picker, {what}: {message!r}")
    box = page.js("(document.querySelector('#ad-own-status').closest('details.ad-own') || "
                  "{querySelector: () => null}).querySelector('summary')?.textContent || ''")
    checks.check(box == "Open your own translator",
                 f"the file picker's messages are shown inside its box ({box!r})")
    checks.check(page.js("window.attentionDerived.translator === window.attentionDerived.book"),
                 "after the failed opens the book's translator is still the one in use")
    before, heap_before = page.browser.memory(), page.js(HEAP)
    sizes, heaps, live = [], [], []
    for _ in range(OPENS):
        choose(page, [model_dir / name for name in FILES])
        live.append(page.js("window.attentionDerived.liveSessions"))
        sizes.append(page.browser.memory())
        heaps.append(page.js(HEAP))
    got = page.call("window.attentionDerived.translate('ein hund rennt', {beam: 1})")
    checks.check(live == [6] * OPENS, f"{OPENS} translators opened in a row leave the book's 3 "
                                      f"sessions and the last one's 3 alive: {live}")
    checks.check(isinstance(got, dict) and got.get("target_ids") == translate_one(
        OnnxTranslator(model_dir), SubwordTokenizer.load(model_dir / "tokenizer.json"),
        "ein hund rennt"), f"the reopened translator translates: {str(got)[:80]}")
    mb = [round(h / 2**20) for h in heaps]
    # While a translator opens, the one it replaces is still alive (it stays in use if the new
    # one fails), so the heap grows to hold the book's and two more, in steps that its allocator
    # chooses; then it stops. Kept sessions would grow it by a translator at every open: the last
    # five opens may not add as much as the first did.
    checks.check(heaps[-1] - heaps[4] < heaps[0] - heap_before,
                 f"the runtime's WebAssembly heap: {heap_before / 2**20:.0f} MB with the book's "
                 f"translator, after each of {OPENS} opens {mb} MB: it stops growing "
                 f"(the browser's processes: {before / 2**20:.0f} MB, then "
                 f"{[round(s / 2**20) for s in sizes]} MB)")
    if record is not None:
        record["memory"] = {
            "what": f"the book's translator loaded, then the page's own model files opened {OPENS} "
                    "times in a row with the file picker: ONNX Runtime's WebAssembly heap (its "
                    "WebAssembly.Memory's size; it grows, never shrinks) and the proportional set "
                    "size (Linux Pss) of all the browser's processes, before and after each open",
            "heap_mb_before": round(heap_before / 2**20, 1),
            "heap_mb_after_each_open": [round(h / 2**20, 1) for h in heaps],
            "processes_mb_before": round(before / 2**20, 1),
            "processes_mb_after_each_open": [round(s / 2**20, 1) for s in sizes],
            "live_sessions_after_each_open": live}
    page.call("window.attentionDerived.load(null)")
    checks.check(page.js("window.attentionDerived.liveSessions") == 3,
                 "back to the book's translator, its 3 sessions alone are alive")
    if own is None:
        return
    names = json.loads(page.js("JSON.stringify(window.attentionDerived.files)"))
    message = choose(page, [own / name for name in names])
    loaded = page.call("window.attentionDerived.loading.then(t => t.manifest.d_model)")
    text = (json.loads((own / "manifest.json").read_text()).get("examples") or ["ein hund"])[0]
    got = page.call(f"window.attentionDerived.translate({json.dumps(text)}, {{beam: 1}})")
    tok = SubwordTokenizer.load(own / "tokenizer.json")
    ref = translate_one(OnnxTranslator(own), tok, text)
    ids = got.get("target_ids") if isinstance(got, dict) else got
    checks.check(ids == ref, f"the file picker opened {own.name} (d_model {loaded}: {message!r}); "
                             f"its translation of {text!r} equals ONNX Runtime's in Python: "
                             f"{str(got)[:80]}")
    check_languages(page, own, json.loads((own / "manifest.json").read_text()), checks)
    with tempfile.TemporaryDirectory() as tmp:   # the same files, said to be Hebrew→English
        other = Path(tmp) / "he-en"
        shutil.copytree(own, other)
        manifest = json.loads((other / "manifest.json").read_text())
        manifest["languages"] = {"source": "he", "target": "en"}
        (other / "manifest.json").write_text(json.dumps(manifest))
        choose(page, [other / name for name in names])
        page.call("window.attentionDerived.loading.then(() => true)")
        check_languages(page, other, manifest, checks)
    page.call("window.attentionDerived.load(null)")


# What the page shows of a translator's languages: the labels of the text box and the output,
# the sentence about the model, the direction each is written in, and the example buttons.
LANGUAGES_SHOWN = """(() => {
  const text = s => (document.querySelector(s) || {}).textContent || '';
  const source = document.getElementById('ad-source');
  const output = document.getElementById('ad-output');
  return {source: text('.ad-source-label'), about: text('.ad-about'),
          dirs: [source.dir, output.dir], langs: [source.lang, output.lang],
          examples: [...document.querySelectorAll('.ad-example')].map(b => b.textContent)};
})()"""
LANGUAGE_NAMES = {"de": "German", "en": "English", "fr": "French", "he": "Hebrew"}
RIGHT_TO_LEFT = {"he"}


def check_languages(page: Page, folder: Path, manifest: dict, checks: Checks) -> None:
    """The page names the languages of the translator it opened (its manifest's), writes each
    side in its direction, and offers the manifest's example sentences."""
    src, tgt = manifest["languages"]["source"], manifest["languages"]["target"]
    got = page.js(LANGUAGES_SHOWN)
    name, target = LANGUAGE_NAMES[src], LANGUAGE_NAMES[tgt]
    dirs = ["rtl" if code in RIGHT_TO_LEFT else "ltr" for code in (src, tgt)]
    checks.check(got["source"] == f"{name} sentence:" and f"{name}\u2192{target}" in got["about"]
                 and got["langs"] == [src, tgt] and got["dirs"] == dirs
                 and all(any(e in b for b in got["examples"]) for e in manifest["examples"]),
                 f"{folder.name}, {src}→{tgt}: labelled {got['source']!r}, "
                 f"{got['about'][:60]!r}, written {got['dirs']}, examples "
                 f"{[e[:20] for e in got['examples']]}")


def check_query_strings(browser, base: str, checks: Checks) -> None:
    """Query strings the page does not know are ignored: the page loads, translates the text it
    was given and draws its maps, with no exception."""
    browser.events()
    for query in ("view=toString", "view=__proto__&layer=x&head=-3", "beam=7&threads=1e9"):
        page = Page(browser, f"{base}&{query}&text=Ein%20Hund%20rennt.")
        page.wait_ready()
        drawn = False
        for _ in range(200):
            drawn = page.js("!!document.querySelector('#ad-explorer svg') && "
                            "document.getElementById('ad-output').textContent.length > 0")
            if drawn:
                break
            time.sleep(0.05)
        errors = browser.events()["errors"]
        checks.check(drawn and not errors, f"?{query}: ignored, the sentence translated and "
                                           f"drawn ({errors[:1]})")


# Type TEXT, click Translate, wait for the maps; returns the page's timings (or its error).
def click(page: Page, text: str):
    return page.js(CLICK.replace("TEXT", json.dumps(text)))


# What a reader sees of the explorer: the row and column labels of the large map, its axis
# titles, the hover line of a row, and where each thumbnail is.
EXPLORER = """(() => {
  const texts = sel => [...document.querySelectorAll(sel)].map(t => t.textContent);
  const res = window.attentionDerived.lastResult;
  const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.right, r.width]; };
  return {rows: texts('.ad-map-rows text'), cols: texts('.ad-map-cells text'),
          axes: texts('.ad-axis'), how: texts('.ad-how').join(' '),
          thumbs: [...document.querySelectorAll('.ad-thumb')].map(box),
          rowsBox: box(document.querySelector('.ad-map-rows') || document.body),
          cells: (c => c ? [c.scrollWidth, c.clientWidth] : [0, 0])(
            document.querySelector('.ad-map-cells')),
          scrollWidth: document.documentElement.scrollWidth,
          innerWidth: document.documentElement.clientWidth,         // without a scroll bar
          targets: res.target_tokens, sources: res.source_tokens};
})()"""


def hover(page: Page, selector: str) -> str:
    """Point at the first element matching `selector` and return the hover line."""
    return page.js(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); "
                   "e.dispatchEvent(new PointerEvent('pointerover', {bubbles: true})); "
                   "return document.querySelector('.ad-hover').textContent; })()")


def check_reading(page: Page, checks: Checks) -> None:
    """Issue 68's explorer: rows named by the token each step wrote, axis titles on every map,
    hover lines in words, the line view, warnings, greedy/beam re-translating, the snapshots'
    labelled slider."""
    text = "Zwei Männer trinken Kaffee in einem kleinen Café."
    click(page, text)
    for kind in ("cross", "decoder", "encoder"):
        page.js(f"document.querySelector('.ad-tabs [data-kind={kind}]').click(); true")
        got = page.js(EXPLORER)
        t, src = got["targets"], got["sources"]
        steps = [f"{a} \u2192 {b}" for a, b in zip(t[:-1], t[1:])]
        rows, cols = ((src, src) if kind == "encoder" else
                      (steps, src if kind == "cross" else t[:-1]))
        axes = " ".join(got["axes"])
        checks.check(got["rows"] == rows and got["cols"] == cols and "query" in axes and
                     "key" in axes, f"{kind}: rows {got['rows'][:2]}..., columns "
                                    f"{got['cols'][:2]}..., axes {got['axes']}")
    page.js("document.querySelector('.ad-tabs [data-kind=cross]').click(); true")
    line = hover(page, ".ad-map-cells rect[data-q='2']")
    row = hover(page, ".ad-map-rows text[data-row='2']")
    col = hover(page, ".ad-map-cells text[data-col='1']")
    checks.check(line.startswith("Writing ") and " gives " in line and row.startswith("Writing ")
                 and "reads" in row
                 and "is read most by the step writing" in col,
                 f"hover lines: {line!r}, {row!r}, {col!r}")
    page.js("document.querySelector('.ad-modes [data-mode=lines]').click(); true")
    n_lines = page.js("document.querySelectorAll('.ad-lines line').length")
    hover(page, ".ad-lines text[data-row='1']")
    shown = page.js("[...document.querySelectorAll('.ad-lines line')]"
                    ".filter(l => l.style.display !== 'none').map(l => l.dataset.q)")
    page.js("document.querySelectorAll('.ad-head-toggle')[1].click(); true")
    two = page.js("new Set([...document.querySelectorAll('.ad-lines line')].map(l => "
                  "l.getAttribute('stroke'))).size")
    checks.check(n_lines > 0 and shown and set(shown) == {"1"} and two == 2,
                 f"line view: {n_lines} lines, pointing at row 1 keeps {len(shown)} of its own, "
                 f"two heads overlaid in {two} colours")
    page.js("document.querySelector('.ad-modes [data-mode=grid]').click(); true")
    cases = {"Собака бежит по зелёной траве.": ("raw bytes", "length limit"),
             "Ein Hund 🐕 rennt 😀": ("raw bytes",),
             "Ein Mann spielt abends Gitarre auf der Straße.": ()}
    for sentence, wanted in cases.items():
        click(page, sentence)
        said = page.js("[...document.querySelectorAll('#ad-warnings li')].map(l => l.textContent)")
        ok = all(any(w in s for s in said) for w in wanted) and (bool(wanted) or not said)
        checks.check(ok, f"warnings for {sentence!r}: {[s[:50] for s in said]}")
    runs = page.js("window.attentionDerived.runs")
    beam = page.js("window.attentionDerived.book.manifest.beam_size")
    page.js(f"(() => {{ const s = document.getElementById('ad-beam'); s.value = '{beam}'; "
            "s.dispatchEvent(new Event('change')); return true; })()")
    message = wait_status(page)
    checks.check(page.js("window.attentionDerived.runs") == runs + 1 and "Beam" in message,
                 f"choosing beam search translates again: {message!r}")
    page.js("(() => { const s = document.getElementById('ad-beam'); s.value = '1'; "
            "s.dispatchEvent(new Event('change')); return true; })()")
    wait_status(page)
    learn = page.js("(document.querySelector('.ad-example-learn') || {}).textContent || ''")
    if learn:
        page.js("document.querySelector('.ad-example-learn').click(); true")
        wait_status(page)
        for _ in range(100):
            if page.js("!!document.getElementById('ad-epoch')"):
                break
            time.sleep(0.05)
        slider = page.js("(() => { const s = document.getElementById('ad-epoch'); "
                         "if (!s) return null; "
                         "const l = document.querySelector('label[for=ad-epoch]'); return "
                         "[l && l.textContent, s.getAttribute('aria-label'), "
                         "document.querySelector('.ad-epoch-value').textContent]; })()")
        checks.check("watch a head learn" in learn and slider and slider[0] == "Epoch"
                     and slider[1] and "BLEU" in slider[2],
                     f"the marked example {learn[:30]!r}... opens the slider {slider}")


def check_layout(name: str, base: str, checks: Checks, shots: Path | None) -> None:
    """The page at 1280 and 390 px wide, light and dark: nothing wider than the screen, all eight
    thumbnails in view, the map's row labels in view; the dark colours keep the map's contrast
    and the chosen head's outline visible. Screenshots into `shots`."""
    long = ("Ein älterer Mann mit grauem Bart und blauer Mütze sitzt auf einer Holzbank neben "
            "zwei Kindern, die im Park mit einem roten Ball spielen.")
    for dark in (False, True):
        browser = browsers.open_browser(name, dark=dark)
        try:
            for width, height in ((1280, 900), (390, 844)):
                browser.viewport(width, height)
                page = Page(browser, base)
                page.wait_ready()
                for text in ("Ein kleiner Hund rennt mit einem Ball über die Wiese.", long):
                    click(page, text)
                    got = page.js(EXPLORER)
                    inside = [left >= -1 and right <= got["innerWidth"] + 1 and w > 20
                              for left, right, w in got["thumbs"]]
                    what = (f"{'dark' if dark else 'light'}, {width} px, "
                            f"{len(got['sources'])} tokens")
                    # on a wide screen the large map is whole in view; on a phone a long
                    # sentence's may scroll sideways, its row labels staying in view
                    whole = got["cells"][0] <= got["cells"][1] + 1
                    checks.check(got["scrollWidth"] <= got["innerWidth"] + 1 and len(inside) == 8
                                 and all(inside) and got["rowsBox"][1] <= got["innerWidth"] + 1
                                 and (whole or width < 1280),
                                 f"{what}: page {got['scrollWidth']} px wide in "
                                 f"{got['innerWidth']}, {sum(inside)} of {len(inside)} "
                                 "thumbnails in view, row labels "
                                 f"end at {got['rowsBox'][1]:.0f} px, the map's cells "
                                 f"{got['cells'][0]} px in {got['cells'][1]} px")
                    if shots:
                        shots.mkdir(parents=True, exist_ok=True)
                        stem = f"{name}-{width}-{'dark' if dark else 'light'}"
                        browser.screenshot(shots / f"{stem}-{'long' if text == long else 'short'}"
                                                   ".png")
                        if text != long:                      # the line view, two heads
                            page.js("document.querySelector('.ad-modes [data-mode=lines]')"
                                    ".click(); document.querySelectorAll('.ad-head-toggle')[2]"
                                    ".click(); true")
                            browser.screenshot(shots / f"{stem}-lines.png")
                            page.js("document.querySelector('.ad-modes [data-mode=grid]')"
                                    ".click(); true")
            if dark:
                colours = page.js(DARK_COLOURS)
                contrast = (colours["outline"] + 0.05) / (colours["page"] + 0.05)
                checks.check(colours["low"] < 0.1 and contrast >= 3 and colours["high"] > 0.5,
                             f"dark: weight 0 drawn at luminance {colours['low']:.2f} on a page "
                             f"of {colours['page']:.2f}, weight 1 at {colours['high']:.2f}, the "
                             f"chosen head's outline at {colours['outline']:.2f} (contrast "
                             f"{contrast:.1f})")
        finally:
            browser.close()


# The luminance of the dark map's colours: the lowest and highest weight (the scale's two ends,
# read off a thumbnail's pixels), the page's background and the chosen thumbnail's outline.
DARK_COLOURS = r"""(() => {
  const lum = ([r, g, b]) => [r, g, b].map(c => { c /= 255; return c <= 0.03928 ? c / 12.92 :
                                           ((c + 0.055) / 1.055) ** 2.4; })
                            .reduce((s, c, i) => s + c * [0.2126, 0.7152, 0.0722][i], 0);
  const rgb = text => (text.match(/\d+(\.\d+)?/g) || [0, 0, 0]).slice(0, 3).map(Number);
  const canvas = document.querySelector('.ad-thumb-map');
  const px = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
  let low = 1, high = 0;
  for (let i = 0; i < px.length; i += 4) { const l = lum([px[i], px[i + 1], px[i + 2]]);
    low = Math.min(low, l); high = Math.max(high, l); }
  let bg = getComputedStyle(document.body).backgroundColor;
  const chosen = document.querySelector('.ad-thumb[aria-pressed=true]');
  return {low, high, page: lum(rgb(bg)), outline: lum(rgb(getComputedStyle(chosen).outlineColor))};
})()"""


def check_from_file(browser, site: Path, rel: str, checks: Checks) -> None:
    browser.goto((site / rel).resolve().as_uri())
    text = browser.evaluate("(document.querySelector('.ad-unavailable') || {}).textContent || ''")
    checks.check("make serve" in text,
                 f"opened from a file, the page says how to serve it: {text[:60]!r}")


def clicks(page: Page, texts: list[str], model, tok) -> dict:
    """For each text: the page's time from the click on Translate to the drawn maps, and PyTorch's
    greedy search of the same sentence (one thread), the two in alternating order; and the page's
    search with its prefix graph instead of its cached step."""
    from transformer_lib.export import translate_one
    page.js("document.getElementById('ad-beam').value = '1'; true")
    rows = []
    for i, text in enumerate(texts):
        row = {}
        for who in (("page", "torch") if i % 2 == 0 else ("torch", "page")):
            if who == "torch":
                t0 = time.perf_counter()
                translate_one(model, tok, text)
                row["pytorch"] = 1000 * (time.perf_counter() - t0)
            else:
                row.update(page.js(CLICK.replace("TEXT", json.dumps(text))))
        got = page.call(f"window.attentionDerived.translate({json.dumps(text)}, "
                        "{decoder: 'prefix'})")
        row["search_prefix"] = got["milliseconds"]["search"]
        rows.append(row)
    return rows


# Type `TEXT`, click Translate, and wait for the page's event that its maps are drawn.
CLICK = """(async () => {
  const root = document.getElementById('ad-translator');
  document.getElementById('ad-source').value = TEXT;
  const drawn = new Promise(r => root.addEventListener('attention-derived:drawn',
                                                      e => r(e.detail), {once: true}));
  document.getElementById('ad-translate').click();
  return await drawn;
})()"""


def median(rows: list[dict], key: str) -> float:
    return round(statistics.median(r[key] for r in rows), 2)


def loaded_bytes(handler, site: Path) -> dict:
    """What the server sent while the page loaded: on the wire (compressed, headers included) and
    as files, by file."""
    files = {}
    for r in handler.sent:
        name = r["path"].split("?")[0].lstrip("/") or "index.html"
        path = site / name
        entry = files.setdefault(name, {"requests": 0, "wire": 0, "file": 0, "gzip": False})
        entry["requests"] += 1
        entry["wire"] += r["bytes"]
        entry["file"] += path.stat().st_size if path.is_file() else 0
        entry["gzip"] = entry["gzip"] or r["encoding"] == "gzip"
    wire = sum(f["wire"] for f in files.values())
    weights = [f for name, f in files.items() if name.endswith("/weights.bin")]
    return {"bytes_on_the_wire": wire,
            "bytes_of_the_files": sum(f["file"] for f in files.values()),
            # a host that compresses by content type may send the weights (octet-stream) as
            # they are: the same load with weights.bin's file size in place of its gzip
            "bytes_on_the_wire_with_weights_bin_uncompressed":
                wire + sum(f["file"] - f["wire"] for f in weights),
            "by_file": dict(sorted(files.items(), key=lambda kv: -kv[1]["wire"]))}


def check_browser(name: str, site: Path, rel: str, base: str, handler, refs, n_beam: int,
                  checks: Checks, own: Path | None, bench: dict | None,
                  shots: Path | None) -> dict:
    """Every check in browser `name`; returns its outputs for the comparison across browsers."""
    model, tok, german, greedy, alpha = refs
    checks.prefix = f"[{name}] "
    browser = browsers.open_browser(name)
    browser.preload(MEMORY_PROBE)
    outputs = {}
    try:
        handler.sent.clear()
        page = Page(browser, base)
        ready = page.wait_ready()
        checks.check(True, f"{browser.version}: ready after {ready:.1f} s")
        time.sleep(0.5)                        # what the page fetches after ready (snapshots)
        load = loaded_bytes(handler, site)
        if bench is not None:
            bench.update(version=browser.version, seconds_until_ready=round(ready, 3), **load)
        outputs["tokens"] = check_tokens(page, tok, german, checks)
        outputs.update(check_translations(page, model, tok, german, greedy, alpha, n_beam, checks))
        outputs["attention"] = check_attention(page, model, tok, german[:20], checks)
        if bench is not None:
            rows = clicks(page, german, model, tok)
            bench.update(sentences=len(rows), median_ms={
                key: median(rows, key) for key in ("click_to_maps", "search", "maps", "draw",
                                                   "search_prefix", "pytorch")},
                median_ratio_per_sentence={
                    "click_to_maps_to_pytorch": round(statistics.median(
                        r["click_to_maps"] / r["pytorch"] for r in rows), 3),
                    "search_to_pytorch": round(statistics.median(
                        r["search"] / r["pytorch"] for r in rows), 3),
                    "search_prefix_to_search": round(statistics.median(
                        r["search_prefix"] / r["search"] for r in rows), 3)})
        check_bad_input(page, checks)
        check_files(page, site / "_static" / "translator" / "model", own, checks, bench)
        events = browser.events()
        origin = base.split("/", 3)[:3]
        foreign = [u for u in events["requests"]
                   if u.split("/", 3)[:3] != origin and not u.startswith(("data:", "blob:"))]
        checks.check(not foreign, f"nothing loaded from another host ({foreign[:3]})")
        checks.check(not events["errors"], f"no JavaScript exception ({events['errors'][:2]})")
        checks.check(not events["console"], f"no error on the console ({events['console'][:2]})")
        failed = [(r["status"], r["path"]) for r in handler.sent
                  if r["status"] >= 400 and r["path"] != "/favicon.ico"]
        checks.check(not failed, f"no failed request to the server ({failed[:3]})")
        check_reading(page, checks)
        events = browser.events()
        checks.check(not events["errors"] and not events["console"],
                     f"the explorer's checks: no exception, no console error "
                     f"({(events['errors'] + events['console'])[:2]})")
        check_query_strings(browser, base, checks)
        check_from_file(browser, site, rel, checks)
    finally:
        browser.close()
    try:
        check_layout(name, base, checks, shots)
    finally:
        checks.prefix = ""
    return outputs


def compare(outputs: dict, checks: Checks) -> None:
    """Every browser's outputs against the first's."""
    (first, a), *others = outputs.items()
    for name, b in others:
        for key in ("tokens", "greedy", "beam", "attention"):
            same = sum(x == y for x, y in zip(a[key], b[key]))
            what = {"tokens": "source tokens", "greedy": "greedy translations",
                    "beam": "beam translations", "attention": "attention weights (every layer, "
                                                              "head and kind)"}[key]
            checks.check(same == len(a[key]) == len(b[key]),
                         f"{name}'s {what} are {first}'s, bit for bit, on {same} of {len(a[key])}")


def run(site: Path, rel: str, quick: bool = False, own: Path | None = None,
        bench: Path | None = None, names: tuple[str, ...] = BROWSERS,
        shots: Path | None = None, describe: str | None = None) -> Checks:
    checks = Checks()
    present = []
    for name in names:
        if browsers.find(name) is None:
            why = (browsers.firefox_driver_missing() if name == "firefox" else None) or \
                f"no {name} found (Debian: apt-get install " \
                f"{'chromium' if name == 'chromium' else 'firefox-esr'})"
            checks.check(False, f"[{name}] {why}")
        else:
            present.append(name)
    if not present:
        return checks
    n, n_beam = (100, 20) if quick else (1000, 100)
    refs = references(n)
    server, handler = serve.serve_in_thread(site)
    base = f"http://127.0.0.1:{server.server_address[1]}/{rel}?threads=1"
    record = {name: {} for name in present} if bench else None
    outputs = {}
    try:
        for name in present:
            load = os.getloadavg()                   # the machine may be shared: say how busy
            outputs[name] = check_browser(name, site, rel, base, handler, refs, n_beam, checks,
                                          own, record[name] if bench else None, shots)
            if bench:
                record[name]["load_average"] = {"before": [round(x, 2) for x in load],
                                                "after": [round(x, 2) for x in os.getloadavg()]}
    finally:
        server.shutdown()
    if len(outputs) > 1:
        compare(outputs, checks)
    if bench:
        write_benchmark(bench, record, describe or (
            "book/check_translator.py's harness page" if rel == "index.html"
            else "the built book (make book)"), rel, checks)
    return checks


def write_benchmark(path: Path, by_browser: dict, site: str, rel: str, checks: Checks) -> None:
    import torch

    from transformer_lib.benchmarking import cpu_model
    from transformer_lib.engineering import git_commit
    record = {
        "what": "the page 'Try the translator' in headless Chromium and Firefox, beside PyTorch "
                "eager on the same machine, one thread each: every byte the server sent until the "
                "page was ready, the seconds until then, and per test sentence the time from the "
                "click on Translate to the drawn maps (greedy search on the decoder step graph, "
                "the maps pass on the prefix graph, drawing, the next frame) against PyTorch's "
                "greedy search (translate_one, key/value cache); the page's search with its prefix "
                "graph instead; the page's memory before and after opening translators in a row",
        "page": rel, "site": site,
        "served_by": "book/serve.py (make serve): cross-origin isolated, gzip-compressed; the "
                     "page on one thread (?threads=1)",
        "cpu": cpu_model(), "cores": os.cpu_count(), "machine": platform.platform(),
        "torch": torch.__version__, "git_commit": git_commit(),
        "threads": {"page": 1, "pytorch": torch.get_num_threads()},
        "load_average": "os.getloadavg() (1, 5 and 15 minutes) before and after each browser's "
                        "checks: other work on the machine shares its cores with the page and "
                        "PyTorch alike",
        "checks": {"passed": len(checks.notes), "failed": len(checks.failures)},
        "browsers": by_browser,
    }
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record, indent=1)[:3000])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("site", nargs="?", default=str(HERE / "_build" / "html"))
    p.add_argument("--page", default="book/translator.html")
    p.add_argument("--harness", action="store_true", help="check the page's files on a page of "
                   "their own (no book build needed)")
    p.add_argument("--quick", action="store_true", help="100 sentences instead of 1,000")
    p.add_argument("--own", help="an exported translator to open with the file picker")
    p.add_argument("--benchmark", help="also measure, and write the record to this file")
    p.add_argument("--browsers", default=",".join(BROWSERS),
                   help="which browsers, comma-separated (default: chromium,firefox)")
    p.add_argument("--shots", help="a folder for screenshots at 1280 and 390 px")
    p.add_argument("--describe", help="what SITE is, for the benchmark's record")
    args = p.parse_args(argv)
    names = tuple(b.strip() for b in args.browsers.split(",") if b.strip())
    if not set(names) <= set(BROWSERS):
        p.error(f"--browsers takes {', '.join(BROWSERS)}")
    with tempfile.TemporaryDirectory() as tmp:
        site, rel = harness_site(Path(tmp)) if args.harness else (Path(args.site), args.page)
        checks = run(site, rel, args.quick, Path(args.own) if args.own else None,
                     Path(args.benchmark) if args.benchmark else None, names,
                     Path(args.shots) if args.shots else None, args.describe)
    print(f"translator page: {len(checks.notes)} checks passed, {len(checks.failures)} failed")
    return 1 if checks.failures else 0


if __name__ == "__main__":
    sys.exit(main())
