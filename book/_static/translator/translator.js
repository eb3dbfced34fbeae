// The page "Try the translator" (book/translator.md): the book's German->English Transformer (or a
// translator the reader exported, in whatever languages its manifest names), run in the reader's
// browser by ONNX Runtime Web (WebAssembly) from the graphs that
// transformer_lib.export writes, with the tokenizer's own tokenizer.json read by tokenizers.js.
// Greedy and beam search are chapter 15's algorithms, step for step, on the decoder step graph with
// its key/value cache; the prefix graph, run once over the chosen translation, gives the attention
// weights of every position. The attention explorer draws
// every layer and head of the three kinds of attention with plain SVG. Nothing is loaded from
// another host: the runtime and the model are files of the site.
//
// The contract a script (or a test) can use, documented on the page:
//   window.attentionDerived.ready          Promise: the book's translator and tokenizer loaded
//   window.attentionDerived.translate(text, {beam: 1 | 4})
//       -> Promise of {translation, source_ids, source_tokens, target_ids, target_tokens,
//                      attention: {encoder, decoder, cross}}, each attention [layer][head][query][key]
//   window.attentionDerived.load(files)    Promise: open an exported translator (File objects);
//                                          the sessions of the one it replaces are released
//   window.attentionDerived.liveSessions   ONNX Runtime sessions not yet released
import * as ort from "./vendor/ort.wasm.min.mjs";
import { Tokenizer } from "./vendor/tokenizers.min.mjs";

const HERE = new URL(".", import.meta.url);
const FORMAT = "attention-derived/web-translator-2";
const MODEL_FILES = ["manifest.json", "tokenizer.json", "encoder.onnx", "decoder_step.onnx",
                     "decoder.onnx", "weights.bin"];
const PARAMS = new URLSearchParams(location.search);
const SVG = "http://www.w3.org/2000/svg";

// One thread unless the page is cross-origin isolated (make serve sends the headers; GitHub Pages
// does not): WebAssembly threads need SharedArrayBuffer, which only an isolated page has.
ort.env.wasm.wasmPaths = new URL("vendor/", HERE).href;
ort.env.wasm.numThreads = self.crossOriginIsolated
  ? Math.min(16, Math.max(1, Math.floor(Number(PARAMS.get("threads"))) ||
                             Math.min(4, navigator.hardwareConcurrency || 1)))
  : 1;
ort.env.logLevel = "error";

// ------------------------------------------------------------------------------------------------
// Loading an exported translator: six files, read by name, each checked against the size and
// SHA-256 that its manifest lists before it is used, so that the files of two exports (or a file
// cut short) are never run together. Every message names the file.
let liveSessions = 0;

function parseJson(name, buffer) {
  try {
    return JSON.parse(new TextDecoder().decode(buffer));
  } catch (e) {
    throw new Error(`${name} is not JSON (${e.message}): it is not the ${name} of an export`);
  }
}

function formatBytes(n) { return Number(n).toLocaleString("en-US"); }

async function verify(name, data, listed) {
  if (data.byteLength !== listed.bytes) {
    throw new Error(`${name} is ${formatBytes(data.byteLength)} bytes; manifest.json says ` +
                    `${formatBytes(listed.bytes)}: the files come from different exports, or one ` +
                    "was cut short. Export the translator again and open all six files.");
  }
  if (!self.crypto?.subtle) return;          // only outside a secure context (plain http)
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", data));
  const hex = Array.from(digest, b => b.toString(16).padStart(2, "0")).join("");
  if (hex !== listed.sha256) {
    throw new Error(`${name} is not the file that manifest.json lists (its SHA-256 differs): ` +
                    "the files come from different exports. Export the translator again and " +
                    "open all six files.");
  }
}

async function loadTranslator(read) {
  const manifest = parseJson("manifest.json", await read("manifest.json"));
  if (manifest?.format !== FORMAT) {
    const old = String(manifest?.format).startsWith("attention-derived/web-translator-");
    throw new Error(`manifest.json is not an exported translator of format ${FORMAT} ` +
                    `(it says ${JSON.stringify(manifest?.format)})` +
                    (old ? ": an older transformer_lib wrote it; export the translator again" : ""));
  }
  const unlisted = MODEL_FILES.slice(1).filter(name => !manifest.files?.[name]);
  if (unlisted.length) {
    throw new Error(`manifest.json does not list ${unlisted.join(", ")}: export the translator again`);
  }
  const data = {};
  await Promise.all(MODEL_FILES.slice(1).map(async name => {
    data[name] = new Uint8Array(await read(name));
    await verify(name, data[name], manifest.files[name]);
  }));
  const tokenizerJson = parseJson("tokenizer.json", data["tokenizer.json"]);
  const options = { executionProviders: ["wasm"], graphOptimizationLevel: "all",
                    externalData: [{ path: "weights.bin", data: data["weights.bin"] }] };
  // Each session reads its own copy of the weights: ONNX Runtime Web mounts the external data for
  // one InferenceSession.create and unmounts it after, and its SessionOptions offer no way to
  // share initializers between sessions (the C API's AddInitializer and prepacked-weights
  // container are not in it; see onnxruntime-web's lib/wasm/wasm-core-impl.ts, createSession).
  const sessions = [];
  try {
    for (const name of ["encoder.onnx", "decoder_step.onnx", "decoder.onnx"]) {
      try {
        sessions.push(await ort.InferenceSession.create(data[name], options));
        liveSessions++;
      } catch (e) {
        throw new Error(`${name} is not an ONNX graph this page can run (${e.message})`);
      }
    }
  } catch (e) {
    await releaseAll(sessions);
    throw e;
  }
  try {
    return new Translator(manifest, tokenizerJson, ...sessions);
  } catch (e) {
    await releaseAll(sessions);
    throw new Error(`tokenizer.json is not a tokenizer this page can read (${e.message})`);
  }
}

async function releaseAll(sessions) {
  for (const session of sessions) {
    await session.release();
    liveSessions--;
  }
}

async function fetchFile(base, name) {
  const response = await fetch(new URL(name, base));
  if (!response.ok) throw new Error(`could not load ${name} (HTTP ${response.status})`);
  return response.arrayBuffer();
}

function fromFiles(files) {
  const byName = new Map([...files].map(f => [f.name, f]));
  const missing = MODEL_FILES.filter(name => !byName.has(name));
  if (missing.length) {
    throw new Error(`These files are not an exported translator: ${missing.join(", ")} ` +
                    `${missing.length === 1 ? "is" : "are"} missing (an export holds ` +
                    `${MODEL_FILES.join(", ")}; python -m transformer_lib.export writes them)`);
  }
  return name => byName.get(name).arrayBuffer();
}

function languageName(code) {
  try {
    return new Intl.DisplayNames(["en"], { type: "language" }).of(code) || code;
  } catch {
    return code;
  }
}

// ------------------------------------------------------------------------------------------------
// The translator: tokenizer, the two graphs, greedy and beam search.
class Translator {
  constructor(manifest, tokenizerJson, encoder, step, decoder) {
    this.manifest = manifest;
    this.special = manifest.special_ids;
    const languages = manifest.languages || { source: "de", target: "en" };
    this.languages = { source: languages.source, target: languages.target,
                       sourceName: languageName(languages.source),
                       targetName: languageName(languages.target) };
    // The package spells a typed "<eos>" out as characters (its tokenizer encodes special tokens
    // as text); tokenizers.js does the same when the file lists no added tokens.
    this.tokenizer = new Tokenizer({ ...tokenizerJson, added_tokens: [] }, {});
    this.pieces = [];
    for (const [piece, id] of Object.entries(tokenizerJson.model.vocab)) this.pieces[id] = piece;
    this.encoder = encoder;
    this.step = step;
    this.decoder = decoder;
    this.released = false;
  }

  async release() {                   // the three sessions' WebAssembly memory, back to the runtime
    if (this.released) return;
    this.released = true;
    await releaseAll([this.encoder, this.step, this.decoder]);
  }

  // The most tokens the decoder writes for a source of S ids: the package's
  // decoding.max_new_tokens, S + source_plus within at_most, with the manifest's numbers.
  maxNewTokens(S) {
    const limit = this.manifest.max_new_tokens;
    return Math.min(S + limit.source_plus, limit.at_most);
  }

  source(text) {
    if (typeof text !== "string") throw new Error("text must be a string");
    if (!text.trim()) {
      throw new Error(`Type a ${this.languages.sourceName} sentence first: the text is empty.`);
    }
    if (/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(^|[^\uD800-\uDBFF])[\uDC00-\uDFFF]/.test(text)) {
      throw new Error("The text holds a lone UTF-16 surrogate, which is no character: remove it.");
    }
    const encoded = this.tokenizer.encode(text, { add_special_tokens: false });
    const ids = [...encoded.ids, this.special.eos];
    const limit = this.manifest.max_source_tokens;
    if (ids.length > limit) {
      throw new Error(`The sentence is ${ids.length} tokens long (end of sentence included); ` +
                      `this translator reads at most ${limit}, the length of its positional table.`);
    }
    return { ids, tokens: [...encoded.tokens, this.pieces[this.special.eos]] };
  }

  text(ids) {
    const cut = ids.indexOf(this.special.eos);
    const special = new Set(Object.values(this.special));
    const kept = (cut < 0 ? ids : ids.slice(0, cut)).filter(i => !special.has(i));
    return this.tokenizer.decode(kept, { skip_special_tokens: false });
  }

  async encode(ids) {
    const src = new ort.Tensor("int64", BigInt64Array.from(ids, BigInt), [1, ids.length]);
    const out = await this.encoder.run({ src });
    return { memory: out.memory, attention: out.encoder_attention, keys: out.memory_keys,
             values: out.memory_values };
  }

  // One decoder step with the cache: the newest token of each of B hypotheses -> logits (B, V) and
  // the cache one position longer (null: no position decoded yet).
  async decodeStep(tokens, encoded, cache) {
    const B = tokens.length, [N, , h, , dk] = encoded.keys.dims;
    const empty = () => new ort.Tensor("float32", new Float32Array(0), [N, B, h, 0, dk]);
    const out = await this.step.run({
      token: new ort.Tensor("int64", BigInt64Array.from(tokens, BigInt), [B, 1]),
      past_keys: cache ? cache.keys : empty(), past_values: cache ? cache.values : empty(),
      memory_keys: encoded.keys, memory_values: encoded.values });
    return { logits: out.logits.data, V: out.logits.dims[1],
             cache: { keys: out.present_keys, values: out.present_values } };
  }

  // The decoder over B prefixes of one length: logits (B, V) of the next token, and the weights.
  async decode(prefixes, memory) {
    const B = prefixes.length, T = prefixes[0].length;
    const tgt = new ort.Tensor("int64", BigInt64Array.from(prefixes.flat(), BigInt), [B, T]);
    const out = await this.decoder.run({ tgt, memory });
    return { logits: out.logits.data, V: out.logits.dims[1], self: out.decoder_attention,
             cross: out.cross_attention };
  }

  banned(V) {                        // chapter 15: a decoder never writes padding or bos
    const banned = new Uint8Array(V);
    banned[this.special.pad] = 1;
    if (this.special.bos !== this.special.eos) banned[this.special.bos] = 1;
    return banned;
  }

  // The next-token logits of B hypotheses: the step graph (its cache in `state`), or the prefix
  // graph over the whole hypotheses (`prefix`, for measuring the two against each other).
  async next(hypotheses, encoded, state, prefix) {
    if (prefix) return this.decode(hypotheses, encoded.memory);
    const out = await this.decodeStep(hypotheses.map(y => y[y.length - 1]), encoded, state.cache);
    state.cache = out.cache;
    return out;
  }

  async greedy(encoded, maxNew, prefix) {
    const ys = [this.special.bos], state = {};
    for (let t = 0; t < maxNew; t++) {
      const { logits, V } = await this.next([ys], encoded, state, prefix);
      const banned = this.banned(V);
      let best = -1;
      for (let v = 0; v < V; v++) {
        if (!banned[v] && (best < 0 || logits[v] > logits[best])) best = v;
      }
      ys.push(best);
      if (best === this.special.eos) break;
    }
    return ys;
  }

  // Beam search for one sentence, chapter 15's _beam_step with B = 1 (its steps 2-6).
  async beam(encoded, maxNew, K, alpha, prefix) {
    const lp = n => Math.pow((5 + n) / 6, alpha);
    let tokens = Array.from({ length: K }, () => [this.special.bos]);
    let scores = Array.from({ length: K }, (_, k) => (k === 0 ? 0 : -Infinity));
    let finished = [], count = 0;
    const state = {};
    for (let t = 1; t <= maxNew; t++) {
      const { logits, V } = await this.next(tokens, encoded, state, prefix);
      const banned = this.banned(V);
      const cand = new Float64Array(K * V);            // step 2: beam score + token log-prob
      for (let k = 0; k < K; k++) {
        const row = logits.subarray(k * V, (k + 1) * V);
        let max = -Infinity, sum = 0;
        for (let v = 0; v < V; v++) max = Math.max(max, row[v]);
        for (let v = 0; v < V; v++) sum += Math.exp(row[v] - max);
        const logZ = max + Math.log(sum);
        for (let v = 0; v < V; v++) cand[k * V + v] = banned[v] ? -Infinity : scores[k] + row[v] - logZ;
      }
      const top = topk(cand, Math.min(2 * K, K * V));
      const eos = top.map(i => i % V === this.special.eos);
      let notEos = 0;
      top.forEach((i, j) => {                          // step 3 (and 6 at the last step): finish
        if (!eos[j]) notEos++;
        const finish = (eos[j] && j < K) || (t === maxNew && !eos[j] && notEos <= K);
        if (finish && Number.isFinite(cand[i])) {
          finished.push({ tokens: [...tokens[Math.floor(i / V)], i % V], score: cand[i] / lp(t) });
          count++;
        }
      });
      finished = finished.map((f, order) => ({ ...f, order }))
        .sort((a, b) => b.score - a.score || a.order - b.order).slice(0, K);
      const live = top.filter((_, j) => !eos[j]).slice(0, K);     // step 4: the best K go on
      while (live.length < K) live.push(null);
      const parents = live.map(i => (i === null ? 0 : Math.floor(i / V)));
      tokens = live.map((i, j) => [...tokens[parents[j]], i === null ? this.special.pad : i % V]);
      if (state.cache) state.cache = reorder(state.cache, parents);  // each row follows its beam
      scores = live.map(i => (i === null ? -Infinity : cand[i]));
      const bestPossible = Math.max(...scores) / lp(maxNew);      // step 5: done?
      if (count >= K || (finished.length && finished[0].score >= bestPossible)) break;
    }
    return finished[0].tokens;
  }

  async translate(text, { beam = 1, decoder = "step" } = {}) {
    if (beam !== 1 && beam !== this.manifest.beam_size) {
      throw new Error(`beam must be 1 (greedy) or ${this.manifest.beam_size}, got ${beam}`);
    }
    if (decoder !== "step" && decoder !== "prefix") {
      throw new Error(`decoder must be "step" or "prefix", got ${JSON.stringify(decoder)}`);
    }
    if (this.released) throw new Error("This translator was closed: another one was opened.");
    const src = this.source(text);
    const started = performance.now();
    const encoded = await this.encode(src.ids), prefix = decoder === "prefix";
    const maxNew = this.maxNewTokens(src.ids.length);
    let ids = beam === 1 ? await this.greedy(encoded, maxNew, prefix)
                         : await this.beam(encoded, maxNew, beam, this.manifest.length_penalty,
                                           prefix);
    const eos = ids.indexOf(this.special.eos);
    if (eos >= 0) ids = ids.slice(0, eos + 1);
    const searched = performance.now();
    const inputs = ids.slice(0, -1);                  // what the decoder read: bos .. before eos
    const { self, cross } = await this.decode([inputs], encoded.memory);
    const mapped = performance.now();
    return {
      translation: this.text(ids),
      source_ids: src.ids, source_tokens: src.tokens,
      target_ids: ids, target_tokens: ids.map(i => this.pieces[i]),
      attention: { encoder: nested(encoded.attention), decoder: nested(self), cross: nested(cross) },
      max_new_tokens: maxNew,
      milliseconds: { search: searched - started, maps: mapped - searched,
                      total: performance.now() - started },
    };
  }
}

// The cache rows of the hypotheses `parents` (decoder.reorder_cache): (N, B, h, P, d_k) tensors.
function reorder(cache, parents) {
  const pick = tensor => {
    const [N, B, h, P, dk] = tensor.dims, row = h * P * dk, out = new Float32Array(tensor.data.length);
    for (let n = 0; n < N; n++) {
      parents.forEach((p, j) => out.set(tensor.data.subarray((n * B + p) * row, (n * B + p + 1) * row),
                                        (n * B + j) * row));
    }
    return new ort.Tensor("float32", out, [N, B, h, P, dk]);
  };
  return { keys: pick(cache.keys), values: pick(cache.values) };
}

// Indices of the k largest values, largest first; ties keep the lower index first.
function topk(values, k) {
  const best = [];
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (best.length === k && !(v > values[best[k - 1]])) continue;
    let j = best.length < k ? best.length : k - 1;
    best[j] = i;
    while (j > 0 && values[best[j - 1]] < v) { [best[j - 1], best[j]] = [best[j], best[j - 1]]; j--; }
  }
  return best;
}

// A (N, 1, h, Q, K) tensor of weights as [layer][head][query][key] plain arrays.
function nested(tensor) {
  const [N, , h, Q, K] = tensor.dims, d = tensor.data;
  return Array.from({ length: N }, (_, n) => Array.from({ length: h }, (_, m) =>
    Array.from({ length: Q }, (_, q) => Array.from(d.subarray(((n * h + m) * Q + q) * K,
                                                                ((n * h + m) * Q + q + 1) * K)))));
}

// ------------------------------------------------------------------------------------------------
// The page: text box, examples, the explorer.
const KINDS = {
  encoder: { name: "Encoder self-attention", rows: "source", cols: "source",
             read: "each row is a token of the {src} sentence, reading every token of it" },
  decoder: { name: "Decoder self-attention", rows: "target", cols: "target",
             read: "each row is a step of the {tgt} output, reading its own input and those before it" },
  cross: { name: "Cross-attention", rows: "target", cols: "source",
           read: "each row is a step of the {tgt} output, reading the {src} sentence" },
};

// Resolves once the changes made before it are on screen: after the next frame is drawn.
function nextPaint() {
  return new Promise(resolve => requestAnimationFrame(() => setTimeout(resolve, 0)));
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "text") node.textContent = v; else node.setAttribute(k, v);
  }
  node.append(...children);
  return node;
}

function svg(tag, attrs = {}) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}

function colour(w) {                                  // white to the book's blue, by weight
  const t = Math.max(0, Math.min(1, w));
  const mix = (a, b) => Math.round(a + (b - a) * Math.sqrt(t));
  return `rgb(${mix(247, 8)},${mix(251, 48)},${mix(255, 107)})`;
}

function label(token) {                   // a subword as the tokenizer writes it, with its ▁
  return token === undefined ? "?" : token;
}

function heatmap(matrix, rowLabels, colLabels, { cell = 22, labels = true, onHover } = {}) {
  const Q = matrix.length, K = matrix[0].length;
  const left = labels ? 8 + 7 * Math.max(...rowLabels.map(s => s.length), 1) : 0;
  const top = labels ? 8 + 7 * Math.max(...colLabels.map(s => s.length), 1) : 0;
  const right = labels ? Math.ceil(top / 2) : 0;       // room for the last tilted column label
  const root = svg("svg", { width: left + K * cell + right, height: top + Q * cell, role: "img",
                            class: "ad-heatmap" });
  const rows = [];
  for (let q = 0; q < Q; q++) {
    const g = svg("g", { class: "ad-row" });
    for (let k = 0; k < K; k++) {
      const r = svg("rect", { x: left + k * cell, y: top + q * cell, width: cell, height: cell,
                              fill: colour(matrix[q][k]) });
      const tip = svg("title");
      tip.textContent = labels ? `${rowLabels[q]} \u2192 ${colLabels[k]}: ${matrix[q][k].toFixed(3)}` : "";
      r.append(tip);
      g.append(r);
    }
    if (labels) {
      const t = svg("text", { x: left - 4, y: top + q * cell + cell * 0.7, "text-anchor": "end",
                              class: "ad-label" });
      t.textContent = label(rowLabels[q]);
      g.append(t);
    }
    g.addEventListener("mouseenter", () => { rows.forEach(x => x.classList.remove("ad-hot"));
                                             g.classList.add("ad-hot"); if (onHover) onHover(q); });
    rows.push(g);
    root.append(g);
  }
  if (labels) {
    colLabels.forEach((s, k) => {
      const x = left + k * cell + cell * 0.65, y = top - 4;
      const t = svg("text", { x, y, transform: `rotate(-60 ${x} ${y})`, class: "ad-label" });
      t.textContent = label(s);
      root.append(t);
    });
  }
  root.addEventListener("mouseleave", () => rows.forEach(x => x.classList.remove("ad-hot")));
  return root;
}

class Page {
  constructor(root) {
    this.root = root;
    this.busy = false;
    this.result = null;
    this.view = { kind: Object.hasOwn(KINDS, PARAMS.get("view") ?? "") ? PARAMS.get("view") : "cross",
                  layer: Math.max(0, (Number(PARAMS.get("layer")) || 1) - 1),
                  head: Math.max(0, (Number(PARAMS.get("head")) || 1) - 1) };
    this.build();
  }

  build() {
    const r = this.root;
    r.querySelector(".ad-loading")?.remove();
    this.status = el("p", { id: "ad-status", role: "status", "aria-live": "polite",
                            text: "Loading the translator\u2026" });
    this.source = el("textarea", { id: "ad-source", rows: "2", lang: "de", spellcheck: "false",
                                   "aria-label": "German sentence to translate" });
    this.source.value = PARAMS.get("text") || "";
    this.examples = el("div", { class: "ad-examples" });
    this.beam = el("select", { id: "ad-beam", "aria-label": "search" });
    this.button = el("button", { id: "ad-translate", type: "button", text: "Translate" });
    this.button.disabled = true;
    this.output = el("p", { id: "ad-output", lang: "en" });
    this.outputLabel = el("p", { class: "ad-output-label", text: "English:" });
    this.explorer = el("div", { id: "ad-explorer" });
    this.files = el("input", { id: "ad-files", type: "file", multiple: "",
                               accept: ".json,.onnx,.bin" });
    this.reset = el("button", { id: "ad-book-model", type: "button",
                                text: "Back to the book's translator" });
    this.reset.hidden = true;
    this.ownStatus = el("p", { id: "ad-own-status", role: "status", "aria-live": "polite" });
    this.snapshots = el("div", { id: "ad-snapshots" });
    r.append(
      el("div", { class: "ad-input" }, this.source, this.examples),
      el("div", { class: "ad-controls" }, this.beam, this.button),
      this.outputLabel, this.output, this.status,
      this.explorer, this.snapshots,
      el("details", { class: "ad-own" }, el("summary", { text: "Open your own translator" }),
         el("p", { text: "Select the six files of an exported translator (manifest.json, " +
                         "tokenizer.json, encoder.onnx, decoder_step.onnx, decoder.onnx, " +
                         "weights.bin)." }),
         this.files, this.reset, this.ownStatus));
    this.button.addEventListener("click", () => this.run());
    this.source.addEventListener("keydown", e => {
      if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); this.run(); }
    });
    this.files.addEventListener("change", () => this.open(this.files.files));
    this.reset.addEventListener("click", () => this.open(null));
  }

  describe(t) {
    const m = t.manifest, src = m.source || {}, lang = t.languages;
    this.source.lang = lang.source;
    this.source.setAttribute("aria-label", `${lang.sourceName} sentence to translate`);
    this.output.lang = lang.target;
    this.outputLabel.textContent = `${lang.targetName}:`;
    this.beam.replaceChildren(el("option", { value: "1", text: "greedy" }),
                              el("option", { value: String(m.beam_size),
                                             text: `beam ${m.beam_size}, \u03b1 = ${m.length_penalty}` }));
    if (PARAMS.get("beam") === String(m.beam_size)) this.beam.value = String(m.beam_size);
    const where = src.record ? ` (weights from ${src.record}${src.git_commit ? ", commit " +
      src.git_commit.slice(0, 7) : ""})` : "";
    const threads = ort.env.wasm.numThreads;
    return `Ready: ${m.n_layers} + ${m.n_layers} layers, ${m.n_heads} heads, d_model ${m.d_model}` +
      `${where}; WebAssembly, ${threads} thread${threads === 1 ? "" : "s"}.`;
  }

  setExamples(examples) {
    this.examples.replaceChildren(...examples.map(({ text, note }) => {
      const b = el("button", { type: "button", class: "ad-example", text });
      if (note) b.title = note;
      b.addEventListener("click", () => { this.source.value = text; this.run(); });
      return b;
    }));
  }

  async run() {
    if (this.busy || !api.translator) return;        // a second click starts no second run
    const clicked = performance.now();
    this.busy = true;
    api.runs++;
    this.button.disabled = true;
    this.status.textContent = "Translating\u2026";
    try {
      const beam = Number(this.beam.value) || 1;
      const result = await api.translate(this.source.value, { beam });
      this.result = result;
      this.output.textContent = result.translation;
      this.status.textContent = `${beam === 1 ? "Greedy" : "Beam search"}: ` +
        `${result.target_ids.length - 1} tokens in ${Math.round(result.milliseconds.total)} ms.`;
      const translated = performance.now();
      this.draw();
      this.drawSnapshots();
      await nextPaint();
      const drawn = performance.now(), ms = result.milliseconds;
      // what a reader waits for, from the click to the maps on screen (the checks measure it)
      this.root.dispatchEvent(new CustomEvent("attention-derived:drawn", { detail: {
        click_to_maps: drawn - clicked, search: ms.search, maps: ms.maps,
        draw: drawn - translated } }));
    } catch (e) {
      this.output.textContent = "";
      this.status.textContent = e.message;
      this.explorer.replaceChildren();
      this.root.dispatchEvent(new CustomEvent("attention-derived:drawn",
                                              { detail: { error: e.message } }));
    } finally {
      this.busy = false;
      this.button.disabled = false;
    }
  }

  async open(files) {
    this.button.disabled = true;
    const names = files ? [...files].map(f => f.name).join(", ") : "";
    this.ownStatus.textContent = files ? `Checking and opening ${names}\u2026`
                                       : "Loading the book's translator\u2026";
    try {
      const t = await api.load(files);
      this.status.textContent = this.describe(t);
      this.ownStatus.textContent = files ? `Opened: ${this.status.textContent}` : "";
      this.reset.hidden = !files;
      this.result = null;
      this.output.textContent = "";
      this.explorer.replaceChildren();
      this.snapshots.replaceChildren();
    } catch (e) {
      const said = /[.!?)]$/.test(e.message) ? e.message : `${e.message}.`;
      this.ownStatus.textContent = `${said} ` +
        (api.translator === api.book ? "The book's translator is still the one in use."
                                     : "Your translator opened before is still the one in use.");
    } finally {
      this.button.disabled = !api.translator;
    }
  }

  read(kind) {
    const lang = api.translator.languages;
    return KINDS[kind].read.replaceAll("{src}", lang.sourceName).replaceAll("{tgt}", lang.targetName);
  }

  labels(kind) {
    const res = this.result, k = KINDS[kind];
    const target = res.target_tokens.slice(0, -1);
    return [k.rows === "source" ? res.source_tokens : target,
            k.cols === "source" ? res.source_tokens : target];
  }

  draw() {
    const res = this.result, v = this.view;
    const all = res.attention[v.kind];
    v.layer = Math.min(v.layer, all.length - 1);
    v.head = Math.min(v.head, all[0].length - 1);
    const tabs = el("div", { class: "ad-tabs", role: "tablist" },
      ...Object.entries(KINDS).map(([kind, k]) => {
        const b = el("button", { type: "button", role: "tab", "data-kind": kind, text: k.name,
                                 "aria-selected": String(kind === v.kind) });
        b.addEventListener("click", () => { v.kind = kind; this.draw(); });
        return b;
      }));
    const [rows, cols] = this.labels(v.kind);
    const grid = el("div", { class: "ad-grid" });
    all.forEach((layer, n) => layer.forEach((matrix, m) => {
      const b = el("button", { type: "button", class: "ad-thumb", "data-layer": String(n + 1),
                               "data-head": String(m + 1),
                               "aria-pressed": String(n === v.layer && m === v.head) });
      b.append(heatmap(matrix, rows, cols, { cell: Math.max(2, Math.floor(96 / Math.max(
        matrix.length, matrix[0].length))), labels: false }),
        el("span", { text: `layer ${n + 1}, head ${m + 1}` }));
      b.addEventListener("click", () => { v.layer = n; v.head = m; this.draw(); });
      grid.append(b);
    }));
    const hover = el("p", { class: "ad-hover" });
    const big = heatmap(all[v.layer][v.head], rows, cols, {
      onHover: q => {
        const w = all[v.layer][v.head][q];
        const k = w.indexOf(Math.max(...w));
        hover.textContent = `${label(rows[q])} reads ${label(cols[k])} most (${w[k].toFixed(2)}).`;
      } });
    this.explorer.replaceChildren(tabs,
      el("p", { class: "ad-caption", text: `${KINDS[v.kind].name}, layer ${v.layer + 1}, head ` +
        `${v.head + 1}: ${this.read(v.kind)}. Darker is more weight; each row sums to 1.` }),
      el("div", { class: "ad-views" }, grid, el("div", { class: "ad-big" }, big, hover)));
  }

  drawSnapshots() {
    const snap = api.snapshots;
    this.snapshots.replaceChildren();
    if (!snap || api.translator !== api.book || this.source.value.trim() !== snap.german) return;
    const epochs = snap.weights;
    const slider = el("input", { type: "range", id: "ad-epoch", min: "0",
                                 max: String(epochs.length - 1), value: String(epochs.length - 1) });
    const head = el("select", { id: "ad-snapshot-head", "aria-label": "head" },
      el("option", { value: "mean", text: "mean of the heads" }),
      ...epochs[0].heads.map((_, m) => el("option", { value: String(m), text: `head ${m + 1}` })));
    const view = el("div", { class: "ad-big" });
    const caption = el("p", { class: "ad-caption" });
    const show = () => {
      const e = epochs[Number(slider.value)];
      const matrix = head.value === "mean" ? e.attention : e.heads[Number(head.value)];
      view.replaceChildren(heatmap(matrix, snap.target_tokens, snap.source_tokens));
      caption.textContent = `${e.epoch === null ? "The final weights" : `After epoch ${e.epoch + 1}`}` +
        (e.val_bleu_greedy ? ` (validation BLEU ${e.val_bleu_greedy.toFixed(1)})` : "") +
        `: cross-attention of decoder layer ${snap.layer}, read on the reference translation.`;
    };
    slider.addEventListener("input", show);
    head.addEventListener("change", show);
    this.snapshots.append(el("h3", { text: "Watch a head learn" }),
      el("p", { text: "This sentence is the one whose attention was recorded at every kept epoch " +
                      "of the training run: move the slider through the epochs." }),
      el("div", { class: "ad-controls" }, slider, head), caption, view);
    show();
  }
}

// ------------------------------------------------------------------------------------------------
// Start: the contract first, then the page.
const MODEL = new URL("model/", HERE);
let queue = Promise.resolve();
const api = {
  translator: null, book: null, snapshots: null, files: MODEL_FILES,
  runs: 0,                     // translations the page itself started (button, example, Enter)
  threads: ort.env.wasm.numThreads,
  get liveSessions() { return liveSessions; },
  tokenize(text) {                                   // the source ids and tokens, as in Python
    if (!api.translator) throw new Error("The translator has not loaded.");
    return api.translator.source(text);
  },
  translate(text, options = {}) {
    const run = queue.then(() => {
      if (!api.translator) throw new Error("The translator has not loaded.");
      return api.translator.translate(text, { beam: options.beam ?? 1,
                                              decoder: options.decoder ?? "step" });
    });
    queue = run.catch(() => {});
    return run;
  },
  load(files) {
    const run = queue.then(async () => {
      const previous = api.translator;
      api.translator = files ? await loadTranslator(fromFiles(files)) : api.book;
      if (previous && previous !== api.book && previous !== api.translator) await previous.release();
      return api.translator;
    });
    queue = run.catch(() => {});
    api.loading = run;
    return run;
  },
};
window.attentionDerived = api;

const root = document.getElementById("ad-translator");
const page = root ? new Page(root) : null;
api.ready = (async () => {
  const book = await loadTranslator(name => fetchFile(MODEL, name));
  api.book = api.translator = book;
  try { api.snapshots = JSON.parse(new TextDecoder().decode(await fetchFile(MODEL, "snapshots.json"))); }
  catch { api.snapshots = null; }
  return book;
})();
api.loading = api.ready;
api.ready.then(book => {
  if (!page) return;
  page.status.textContent = page.describe(book);
  page.button.disabled = false;
  let examples = [];
  try { examples = JSON.parse(root.dataset.examples || "[]").map(text => ({ text })); } catch { }
  if (api.snapshots) examples.push({ text: api.snapshots.german, note: "watch a head learn" });
  page.setExamples(examples);
  if (page.source.value.trim()) page.run();
}, e => {
  if (page) page.status.textContent = `The translator could not load: ${e.message}`;
});
