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
//   window.attentionDerived.lastResult     what the page's own last translation returned
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

async function loadTranslator(read, beforeSessions = null) {
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
  if (beforeSessions) await beforeSessions();
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

// The direction a language is written in, "rtl" or "ltr": the browser's answer where it has one
// (Intl.Locale's text info), else from the languages whose scripts run right to left.
const RIGHT_TO_LEFT = new Set(["ar", "arc", "ckb", "dv", "fa", "he", "iw", "ku", "ps", "sd", "ug",
                               "ur", "yi"]);
function direction(code) {
  try {
    const locale = new Intl.Locale(code);
    const info = typeof locale.getTextInfo === "function" ? locale.getTextInfo() : locale.textInfo;
    if (info && (info.direction === "rtl" || info.direction === "ltr")) return info.direction;
  } catch { }
  return RIGHT_TO_LEFT.has(String(code).toLowerCase().split("-")[0]) ? "rtl" : "ltr";
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
                       targetName: languageName(languages.target),
                       sourceDir: direction(languages.source),
                       targetDir: direction(languages.target) };
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
    if (!kept.length) return "";                    // (tokenizers.js refuses to decode no ids)
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
// The page: what the model is, the text box, the translation and its warnings, the explorer (a
// grid of every head, the chosen head large or as lines), the snapshots of training, and the box
// that opens a reader's own translator.
const KINDS = {
  encoder: { name: "Encoder self-attention", rows: "source", cols: "source",
             read: "each row is a token of the {src} sentence (a query), reading every token of it " +
                   "(the keys)",
             rowAxis: "query: the {src} token", colAxis: "key: the {src} token it reads" },
  decoder: { name: "Decoder self-attention", rows: "target", cols: "target",
             read: "each row is one step of the decoder (a query), labelled by the token it read " +
                   "and the token it wrote, reading the {tgt} it had read so far (the keys)",
             rowAxis: "query: the {tgt} step (read \u2192 wrote)",
             colAxis: "key: the {tgt} token it reads" },
  cross: { name: "Cross-attention", rows: "target", cols: "source",
           read: "each row is one step of the decoder (a query), labelled by the token it read " +
                 "and the token it wrote, reading the {src} sentence (the keys)",
           rowAxis: "query: the {tgt} step (read \u2192 wrote)",
           colAxis: "key: the {src} token it reads" },
};
const HEAD_COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b",
                      "#e377c2"];
const LINE_FLOOR = 0.05;          // the line view leaves out weights below this
const BYTE_TOKEN = /^<0x[0-9A-F]{2}>$/;

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

function label(token) {                   // a subword as the tokenizer writes it, with its ▁
  return token === undefined ? "?" : token;
}

function mb(bytes) { return (bytes / 1e6).toFixed(1); }

// The colour scale, from the page's background (weight 0) to the map's ink (weight 1), read from
// the CSS custom properties of #ad-translator, so that it follows the theme (light or dark).
function parseColour(text, fallback) {
  const m = /#([0-9a-f]{6})/i.exec(text || "");
  if (!m) return fallback;
  return [0, 2, 4].map(i => parseInt(m[1].slice(i, i + 2), 16));
}

function scale(root) {
  const style = getComputedStyle(root);
  const low = parseColour(style.getPropertyValue("--ad-low"), [247, 251, 255]);
  const high = parseColour(style.getPropertyValue("--ad-high"), [8, 48, 107]);
  return w => {
    const t = Math.sqrt(Math.max(0, Math.min(1, w)));
    return low.map((a, i) => Math.round(a + (high[i] - a) * t));
  };
}

// A small map as a canvas of one pixel per weight, scaled by CSS (image-rendering: pixelated).
function thumbnail(matrix, colour) {
  const Q = matrix.length, K = matrix[0].length;
  const canvas = el("canvas", { width: String(K), height: String(Q), class: "ad-thumb-map" });
  const ctx = canvas.getContext("2d"), image = ctx.createImageData(K, Q);
  for (let q = 0; q < Q; q++) {
    for (let k = 0; k < K; k++) {
      const [r, g, b] = colour(matrix[q][k]), i = 4 * (q * K + k);
      image.data[i] = r; image.data[i + 1] = g; image.data[i + 2] = b; image.data[i + 3] = 255;
    }
  }
  ctx.putImageData(image, 0, 0);
  return canvas;
}

// The large map's layout in `width` pixels: the row labels' width (left), the column labels'
// height (top), the room the last tilted column label takes (right), and the cell: as large as
// fits, from 12 px (below that the labels would overlap) to 22. `fits`: the whole map is in view.
function mapLayout(rowLabels, colLabels, width) {
  const left = 10 + 7 * Math.max(...rowLabels.map(s => s.length), 1);
  const top = 12 + 6.2 * Math.max(...colLabels.map(s => s.length), 1);
  const right = Math.ceil(top * 0.6);
  const K = colLabels.length, room = (width || 600) - left - right - 4;
  const cell = Math.max(12, Math.min(22, Math.floor(room / K)));
  return { left, top, right, cell, fits: K * cell <= room };
}

// The large map: row labels in an SVG of their own that stays in view, and the cells with the
// column labels in a second SVG that scrolls sideways when the map is wider than its room (on a
// phone, a long sentence). The cells shrink to fit the width, down to 12 px.
function heatmap(matrix, rowLabels, colLabels, { width, colour, onHover, axes, name }) {
  const Q = matrix.length, K = matrix[0].length;
  const { left, top, right, cell } = mapLayout(rowLabels, colLabels, width);
  const H = top + Q * cell, W = K * cell + right;
  const rows = svg("svg", { width: left, height: H, viewBox: `0 0 ${left} ${H}`,
                            class: "ad-heatmap ad-rowlabels", "aria-hidden": "true" });
  const cells = svg("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img",
                             class: "ad-heatmap ad-cells", "aria-label": name });
  const rowText = rowLabels.map((s, q) => {
    const t = svg("text", { x: left - 4, y: top + q * cell + cell * 0.7, "text-anchor": "end",
                            class: "ad-label", "data-row": String(q) });
    t.textContent = label(s);
    rows.append(t);
    return t;
  });
  const colText = colLabels.map((s, k) => {
    const x = k * cell + cell * 0.65, y = top - 4;
    const t = svg("text", { x, y, transform: `rotate(-60 ${x} ${y})`, class: "ad-label",
                            "data-col": String(k) });
    t.textContent = label(s);
    cells.append(t);
    return t;
  });
  for (let q = 0; q < Q; q++) {
    for (let k = 0; k < K; k++) {
      const [r, g, b] = colour(matrix[q][k]);
      cells.append(svg("rect", { x: k * cell, y: top + q * cell, width: cell, height: cell,
                                 fill: `rgb(${r},${g},${b})`, "data-q": String(q),
                                 "data-k": String(k) }));
    }
  }
  const rowBox = svg("rect", { x: 0, y: 0, width: K * cell, height: cell, class: "ad-hot-box" });
  const colBox = svg("rect", { x: 0, y: top, width: cell, height: Q * cell, class: "ad-hot-box" });
  rowBox.style.display = colBox.style.display = "none";
  cells.append(rowBox, colBox);
  const hot = (q, k) => {
    rowText.forEach((t, i) => t.classList.toggle("ad-hot", i === q));
    colText.forEach((t, i) => t.classList.toggle("ad-hot", i === k));
    rowBox.style.display = q === null ? "none" : "";
    colBox.style.display = k === null ? "none" : "";
    if (q !== null) rowBox.setAttribute("y", top + q * cell);
    if (k !== null) colBox.setAttribute("x", k * cell);
  };
  const pick = target => {
    const d = target.dataset || {};
    if (d.q !== undefined) return [Number(d.q), Number(d.k)];
    if (d.row !== undefined) return [Number(d.row), null];
    if (d.col !== undefined) return [null, Number(d.col)];
    return null;
  };
  for (const part of [rows, cells]) {
    part.addEventListener("pointerover", e => {
      const at = pick(e.target);
      if (!at) return;
      hot(...at);
      onHover?.(...at);
    });
  }
  const wrap = el("div", { class: "ad-map" }, el("div", { class: "ad-map-rows" }, rows),
                  el("div", { class: "ad-map-cells" }, cells));
  wrap.addEventListener("pointerleave", () => hot(null, null));
  const colAxis = el("div", { class: "ad-axis ad-axis-cols", text: `columns: ${axes[1]} \u2192` });
  colAxis.style.paddingLeft = `${left}px`;
  return el("figure", { class: "ad-big-map" }, colAxis, wrap,
            el("figcaption", { class: "ad-axis ad-axis-rows", text: `\u2191 rows: ${axes[0]}` }));
}

// bertviz's line view: the queries in a column on the left, the keys on the right, a line from
// each query to each key it reads, its opacity the weight; several heads overlaid in colours.
// Pointing at a token on either side keeps only its lines.
function lineView(layer, heads, rowLabels, colLabels, { onHover, name }) {
  const Q = rowLabels.length, K = colLabels.length, pitch = 20;
  const lw = 10 + 7 * Math.max(...rowLabels.map(s => s.length), 1);
  const rw = 10 + 7 * Math.max(...colLabels.map(s => s.length), 1);
  const gap = 150, H = 24 + pitch * Math.max(Q, K), W = lw + gap + rw;
  const root = svg("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img",
                            class: "ad-lines", "aria-label": name });
  const y = i => 18 + pitch * i;
  const lines = [];
  for (const m of heads) {
    for (let q = 0; q < Q; q++) {
      for (let k = 0; k < K; k++) {
        const w = layer[m][q][k];
        if (w < LINE_FLOOR) continue;
        const line = svg("line", { x1: lw, y1: y(q) - 4, x2: lw + gap, y2: y(k) - 4,
                                   stroke: HEAD_COLOURS[m % HEAD_COLOURS.length],
                                   "stroke-opacity": w.toFixed(3), "stroke-width": "2",
                                   "data-q": String(q), "data-k": String(k) });
        lines.push(line);
        root.append(line);
      }
    }
  }
  const texts = [];
  rowLabels.forEach((s, q) => {
    const t = svg("text", { x: lw - 6, y: y(q), "text-anchor": "end", class: "ad-label",
                            "data-row": String(q) });
    t.textContent = label(s);
    texts.push(t);
    root.append(t);
  });
  colLabels.forEach((s, k) => {
    const t = svg("text", { x: lw + gap + 6, y: y(k), class: "ad-label", "data-col": String(k) });
    t.textContent = label(s);
    texts.push(t);
    root.append(t);
  });
  const show = (q, k) => {
    for (const line of lines) {
      const keep = (q === null || line.dataset.q === String(q)) &&
                   (k === null || line.dataset.k === String(k));
      line.style.display = keep ? "" : "none";
    }
    for (const t of texts) {
      t.classList.toggle("ad-hot", (q !== null && t.dataset.row === String(q)) ||
                                   (k !== null && t.dataset.col === String(k)));
    }
  };
  root.addEventListener("pointerover", e => {
    const d = e.target.dataset || {};
    if (d.row !== undefined) { show(Number(d.row), null); onHover?.(Number(d.row), null); }
    if (d.col !== undefined) { show(null, Number(d.col)); onHover?.(null, Number(d.col)); }
  });
  root.addEventListener("pointerleave", () => show(null, null));
  return el("div", { class: "ad-lines-wrap" }, root);
}

// Warnings about what the model was not made for, after a translation.
function warnings(result) {
  const out = [];
  const bytes = result.source_tokens.filter(t => BYTE_TOKEN.test(t)).length;
  if (bytes) {
    out.push(`${bytes} of the ${result.source_tokens.length} pieces of your sentence are raw ` +
             "bytes (<0x..>): characters this model never saw in training, such as emoji, " +
             `letters of another alphabet or rare symbols. Expect nonsense where they are.`);
  }
  const ids = result.target_ids, written = ids.length - 1;
  if (ids[ids.length - 1] !== api.translator.special.eos && written >= result.max_new_tokens) {
    out.push(`The translation stopped at the length limit (${result.max_new_tokens} tokens, ` +
             `the source's length + ${api.translator.manifest.max_new_tokens.source_plus}) ` +
             "without finishing: the model lost its way.");
  }
  if (ids.length === 2 && ids[1] === api.translator.special.eos) {
    out.push("The model ended the sentence at once and wrote nothing: a translator this " +
             "barely trained has not learnt to translate this text.");
  }
  const toks = result.target_tokens.slice(1);
  let worst = null;
  for (let n = 1; n <= 4 && !worst; n++) {               // a piece, or a run of up to 4, again and
    for (let i = 0; i + n <= toks.length && !worst; i++) {  // again, 4 times in a row (3 for runs)
      const gram = toks.slice(i, i + n).join(" ");
      let times = 1;
      while (toks.slice(i + times * n, i + (times + 1) * n).join(" ") === gram) times++;
      if (times >= (n === 1 ? 4 : 3)) worst = { gram, times };
    }
  }
  if (worst) {
    out.push(`The translation repeats \u201c${worst.gram}\u201d ${worst.times} times in a row: ` +
             "a model this small loops when it does not know how to go on.");
  }
  return out;
}

class Page {
  constructor(root) {
    this.root = root;
    this.busy = false;
    this.result = null;
    const param = name => PARAMS.get(name) ?? "";
    this.view = { kind: Object.hasOwn(KINDS, param("view")) ? param("view") : "cross",
                  layer: Math.max(0, (Number(PARAMS.get("layer")) || 1) - 1),
                  head: Math.max(0, (Number(PARAMS.get("head")) || 1) - 1),
                  lines: param("lines") === "1", heads: null };
    this.build();
  }

  build() {
    const r = this.root;
    r.querySelector(".ad-loading")?.remove();
    r.classList.add("ad-is-loading");
    this.about = el("p", { class: "ad-about" });
    this.status = el("p", { id: "ad-status", role: "status", "aria-live": "polite",
                            text: "Loading the translator\u2026" });
    this.progress = el("progress", { class: "ad-progress", max: "1", value: "0",
                                     "aria-label": "loading the translator" });
    this.details = el("details", { class: "ad-details" }, el("summary", { text: "details" }));
    this.details.hidden = true;
    this.sourceLabel = el("label", { for: "ad-source", class: "ad-source-label",
                                     text: "German sentence:" });
    this.source = el("textarea", { id: "ad-source", rows: "2", lang: "de", spellcheck: "false",
                                   "aria-label": "German sentence to translate",
                                   placeholder: "Ein Hund rennt über die Wiese." });
    this.source.value = PARAMS.get("text") || "";
    this.examples = el("div", { class: "ad-examples" });
    this.beam = el("select", { id: "ad-beam" });
    this.button = el("button", { id: "ad-translate", type: "button", text: "Translate" });
    this.button.disabled = true;
    this.output = el("p", { id: "ad-output", lang: "en" });
    this.outputLabel = el("p", { class: "ad-output-label", text: "English:" });
    this.warnings = el("ul", { id: "ad-warnings", class: "ad-warnings" });
    this.explorer = el("div", { id: "ad-explorer" });
    this.files = el("input", { id: "ad-files", type: "file", multiple: "",
                               accept: ".json,.onnx,.bin" });
    this.reset = el("button", { id: "ad-book-model", type: "button",
                                text: "Back to the book's translator" });
    this.reset.hidden = true;
    this.ownStatus = el("p", { id: "ad-own-status", role: "status", "aria-live": "polite" });
    this.snapshots = el("div", { id: "ad-snapshots" });
    r.append(
      this.about,
      el("div", { class: "ad-input" }, this.sourceLabel, this.source, this.examples),
      el("div", { class: "ad-controls" },
         el("label", { for: "ad-beam", text: "Search:" }), this.beam, this.button),
      this.outputLabel, this.output, this.warnings, this.status, this.progress, this.details,
      this.explorer, this.snapshots,
      el("details", { class: "ad-own" }, el("summary", { text: "Open your own translator" }),
         el("p", { text: "Select the six files of an exported translator (manifest.json, " +
                         "tokenizer.json, encoder.onnx, decoder_step.onnx, decoder.onnx, " +
                         "weights.bin). They are checked against the manifest, then opened " +
                         "in this page; nothing leaves your machine." }),
         this.files, this.reset, this.ownStatus));
    this.button.addEventListener("click", () => this.run());
    this.source.addEventListener("keydown", e => {
      if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); this.run(); }
    });
    this.beam.addEventListener("change", () => { if (this.result) this.run(); });
    this.files.addEventListener("change", () => this.open(this.files.files));
    this.reset.addEventListener("click", () => this.open(null));
    const redraw = () => { if (this.result) this.draw(); this.drawSnapshots(); };
    new MutationObserver(redraw).observe(document.documentElement,
                                         { attributes: true, attributeFilter: ["data-theme"] });
    matchMedia("(prefers-color-scheme: dark)").addEventListener("change", redraw);
    let width = 0;
    new ResizeObserver(() => {
      const now = this.root.clientWidth;
      if (Math.abs(now - width) > 24 && this.result) this.draw();
      width = now;
    }).observe(this.root);
  }

  loading(done, total) {
    this.progress.max = String(total);
    this.progress.value = String(Math.min(done, total));
    this.status.textContent = `Loading the translator: ${mb(done)} of ${mb(total)} MB\u2026`;
  }

  describe(t, about) {
    const m = t.manifest, src = m.source || {}, lang = t.languages;
    this.root.classList.remove("ad-is-loading");
    this.progress.hidden = true;
    this.source.lang = lang.source;
    this.source.dir = lang.sourceDir;                   // Arabic or Hebrew text shown from the right
    this.output.dir = lang.targetDir;
    this.sourceLabel.textContent = `${lang.sourceName} sentence:`;
    this.source.setAttribute("aria-label", `${lang.sourceName} sentence to translate`);
    this.output.lang = lang.target;
    this.outputLabel.textContent = `${lang.targetName}:`;
    this.beam.replaceChildren(el("option", { value: "1", text: "greedy" }),
                              el("option", { value: String(m.beam_size),
                                             text: `beam ${m.beam_size}, \u03b1 = ${m.length_penalty}` }));
    if (PARAMS.get("beam") === String(m.beam_size)) this.beam.value = String(m.beam_size);
    const size = `${m.n_layers} + ${m.n_layers} layers, ${m.n_heads} heads, d_model ${m.d_model}`;
    if (about && t === api.book) {
      const minutes = Math.round(about.training_seconds / 60);
      this.about.textContent =
        `This is the book's translator: a small Transformer (${size}, ` +
        `${(about.parameters / 1e6).toFixed(1)} million weights) that learnt ` +
        `${lang.sourceName}\u2192${lang.targetName} in ${minutes} minutes on one CPU, from ` +
        `${about.training_sentences.toLocaleString("en-US")} ${lang.sourceName} captions of ` +
        `photos and their translations (Multi30k). It translates sentences that describe a ` +
        `scene, like the examples (test BLEU ${about.test_bleu.beam}); other ${lang.sourceName}, ` +
        "questions, chat, names, other languages and emoji come out as confident nonsense.";
    } else {
      this.about.textContent =
        `Your translator: ${size}, ${lang.sourceName}\u2192${lang.targetName}. It translates ` +
        "what its training data taught it, and nothing else.";
    }
    const threads = ort.env.wasm.numThreads;
    const facts = [
      ["weights", src.record ? `${src.record}${src.weights ? ` (${src.weights})` : ""}` : "a file you opened"],
      ["commit", src.git_commit ? src.git_commit.slice(0, 12) : "\u2014"],
      ["model", `${size}, vocabulary ${m.vocab_size}, at most ${m.max_source_tokens} tokens`],
      ["runtime", `ONNX Runtime Web, WebAssembly, ${threads} thread${threads === 1 ? "" : "s"}` +
                  (self.crossOriginIsolated ? "" : " (the page is not cross-origin isolated)")],
    ];
    this.details.replaceChildren(el("summary", { text: "details" }), el("dl", {},
      ...facts.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { text: v })])));
    this.details.hidden = false;
    return "Ready: pick an example or type a sentence.";
  }

  setExamples(examples) {
    this.examples.replaceChildren(...examples.map(({ text, note }) => {
      const b = el("button", { type: "button", class: "ad-example" });
      if (note) {
        b.classList.add("ad-example-learn");
        b.append(el("span", { class: "ad-mark", text: `\u25b6 ${note}: ` }), text);
      } else {
        b.textContent = text;
      }
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
      this.result = api.lastResult = result;
      this.output.textContent = result.translation;
      this.warnings.replaceChildren(...warnings(result).map(w => el("li", { text: w })));
      this.status.textContent = `${beam === 1 ? "Greedy search" : `Beam search (${beam} beams)`}: ` +
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
      this.warnings.replaceChildren();
      this.status.textContent = e.message;
      this.explorer.replaceChildren();
      this.result = null;
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
      this.status.textContent = this.describe(t, api.about);
      this.ownStatus.textContent = files ? `Opened: ${this.about.textContent}` : "";
      this.reset.hidden = !files;
      this.result = null;
      this.output.textContent = "";
      this.warnings.replaceChildren();
      this.explorer.replaceChildren();
      this.snapshots.replaceChildren();
      this.setExamples((t === api.book ? api.bookExamples : (t.manifest.examples || [])
        .map(text => ({ text }))) || []);
    } catch (e) {
      const said = /[.!?)]$/.test(e.message) ? e.message : `${e.message}.`;
      this.ownStatus.textContent = `${said} ` +
        (api.translator === api.book ? "The book's translator is still the one in use."
                                     : "Your translator opened before is still the one in use.");
    } finally {
      this.button.disabled = !api.translator;
    }
  }

  fill(text) {
    const lang = api.translator.languages;
    return text.replaceAll("{src}", lang.sourceName).replaceAll("{tgt}", lang.targetName);
  }

  // Row and column labels of a map: a decoder step is named by the token it read and the one it
  // wrote ("<bos> → ▁A", "▁A → ▁small"), a source token by itself.
  labels(kind) {
    const res = this.result, k = KINDS[kind];
    const read = res.target_tokens.slice(0, -1), wrote = res.target_tokens.slice(1);
    const steps = read.map((t, q) => `${t} \u2192 ${wrote[q]}`);
    return { rows: k.rows === "source" ? res.source_tokens : steps,
             cols: k.cols === "source" ? res.source_tokens : read, wrote };
  }

  hoverLine(kind, matrix, q, k, { rows, cols, wrote }) {
    if (q !== null && k !== null) {
      const who = KINDS[kind].rows === "source" ? `${rows[q]}: this head` : `Writing ${wrote[q]}, this head`;
      return `${who} gives ${cols[k]} ${matrix[q][k].toFixed(2)} of its attention.`;
    }
    if (q !== null) {
      const w = matrix[q], best = w.indexOf(Math.max(...w));
      return KINDS[kind].rows === "source"
        ? `${rows[q]}: this head reads ${cols[best]} most (${w[best].toFixed(2)}).`
        : `Writing ${wrote[q]}, this head reads ${cols[best]} most (${w[best].toFixed(2)}).`;
    }
    const column = matrix.map(row => row[k]), best = column.indexOf(Math.max(...column));
    const who = KINDS[kind].rows === "source" ? rows[best] : `the step writing ${wrote[best]}`;
    return `${cols[k]} is read most by ${who} (${column[best].toFixed(2)}).`;
  }

  draw() {
    const res = this.result, v = this.view;
    const all = res.attention[v.kind];
    v.layer = Math.min(v.layer, all.length - 1);
    v.head = Math.min(v.head, all[0].length - 1);
    const colour = scale(this.root);
    const tabs = el("div", { class: "ad-tabs", role: "tablist" },
      ...Object.entries(KINDS).map(([kind, k]) => {
        const b = el("button", { type: "button", role: "tab", "data-kind": kind, text: k.name,
                                 "aria-selected": String(kind === v.kind) });
        b.addEventListener("click", () => { v.kind = kind; this.draw(); });
        return b;
      }));
    const modes = el("div", { class: "ad-modes", role: "group", "aria-label": "how to draw" },
      ...[["grid", "Grid"], ["lines", "Lines"]].map(([mode, text]) => {
        const b = el("button", { type: "button", "data-mode": mode, text,
                                 "aria-pressed": String((mode === "lines") === v.lines) });
        b.addEventListener("click", () => { v.lines = mode === "lines"; this.draw(); });
        return b;
      }));
    const names = this.labels(v.kind);
    const grid = el("div", { class: "ad-grid" });
    all.forEach((layer, n) => layer.forEach((matrix, m) => {
      const b = el("button", { type: "button", class: "ad-thumb", "data-layer": String(n + 1),
                               "data-head": String(m + 1),
                               "aria-label": `layer ${n + 1}, head ${m + 1}`,
                               "aria-pressed": String(n === v.layer && m === v.head) });
      // no-break spaces: a narrow thumbnail breaks its label after the comma only
      b.append(thumbnail(matrix, colour),
               el("span", { text: `layer\u00a0${n + 1}, head\u00a0${m + 1}` }));
      b.addEventListener("click", () => { v.layer = n; v.head = m; v.heads = null; this.draw(); });
      grid.append(b);
    }));
    const hover = el("p", { class: "ad-hover", "aria-live": "polite" });
    const matrix = all[v.layer][v.head];
    // The large map goes beside the grid where it fits there whole, else below it, full width.
    const { beside, full } = this.mapRoom();
    const below = !v.lines && !(beside && mapLayout(names.rows, names.cols, beside).fits);
    const width = below ? full : beside;
    const kind = KINDS[v.kind];
    let view;
    if (v.lines) {
      const heads = v.heads ?? [v.head];
      const toggles = el("div", { class: "ad-head-toggles", role: "group",
                                  "aria-label": "heads drawn" },
        el("span", { text: "Heads:" }),
        ...all[v.layer].map((_, m) => {
          const b = el("button", { type: "button", class: "ad-head-toggle", text: String(m + 1),
                                   "aria-pressed": String(heads.includes(m)) });
          b.style.setProperty("--ad-head", HEAD_COLOURS[m % HEAD_COLOURS.length]);
          b.addEventListener("click", () => {
            const on = new Set(heads);
            if (on.has(m) && on.size > 1) on.delete(m); else on.add(m);
            v.heads = [...on].sort();
            this.draw();
          });
          return b;
        }));
      view = el("div", { class: "ad-big" }, toggles,
        lineView(all[v.layer], heads, names.rows, names.cols, {
          name: `${kind.name}, layer ${v.layer + 1}, heads ${heads.map(m => m + 1).join(", ")}`,
          onHover: (q, k) => { hover.textContent = this.hoverLine(v.kind, matrix, q, k, names); } }),
        el("p", { class: "ad-note", text: `A line's opacity is its weight; weights below ` +
                  `${LINE_FLOOR} are left out. Point at a token on either side to see only its lines.` }),
        hover);
    } else {
      view = el("div", { class: "ad-big" },
        heatmap(matrix, names.rows, names.cols, {
          width, colour, axes: [this.fill(kind.rowAxis), this.fill(kind.colAxis)],
          name: `${kind.name}, layer ${v.layer + 1}, head ${v.head + 1}`,
          onHover: (q, k) => { hover.textContent = this.hoverLine(v.kind, matrix, q, k, names); } }),
        hover);
    }
    const how = kind.rows === "source"
      ? "How to read it: a row is what one token takes from the others; the stronger the " +
        "colour, the more weight, and each row sums to 1."
      : "How to read it: the decoder reads <bos> and writes the first token, reads that and " +
        "writes the next; so each row is named \u201cread \u2192 wrote\u201d. The stronger the " +
        "colour, the more weight, and each row sums to 1.";
    this.explorer.replaceChildren(tabs,
      el("p", { class: "ad-how", text: how }),
      el("p", { class: "ad-caption", text: `${kind.name}, layer ${v.layer + 1}, head ` +
        `${v.head + 1}: ${this.fill(kind.read)}.` }),
      modes,
      el("div", { class: below ? "ad-views ad-below" : "ad-views" }, grid, view));
  }

  // The width the large map has beside the grid (null where the two do not fit in one row) and
  // below it: the sizes translator.css gives .ad-views (the grid min(100%, 26em), a gap of 1.2em,
  // the map at least 20em).
  mapRoom() {
    const full = this.root.clientWidth;
    const em = parseFloat(getComputedStyle(this.root).fontSize) || 16;
    const beside = full - Math.min(full, 26 * em) - 1.2 * em;
    return { beside: beside >= 20 * em ? Math.floor(beside) : null, full };
  }

  drawSnapshots() {
    const snap = api.snapshots;
    this.snapshots.replaceChildren();
    if (!snap || !this.result || api.translator !== api.book ||
        this.source.value.trim() !== snap.german) return;
    const epochs = snap.weights, colour = scale(this.root);
    const kept = epochs.filter(e => e.epoch !== null);
    const slider = el("input", { type: "range", id: "ad-epoch", min: "0",
                                 max: String(epochs.length - 1), value: "0",
                                 "aria-label": "epoch of training" });
    const head = el("select", { id: "ad-snapshot-head", "aria-label": "head" },
      el("option", { value: "mean", text: `mean of the ${epochs[0].heads.length} heads` }),
      ...epochs[0].heads.map((_, m) => el("option", { value: String(m), text: `head ${m + 1}` })));
    const value = el("output", { for: "ad-epoch", class: "ad-epoch-value" });
    const view = el("div", { class: "ad-big" });
    const caption = el("p", { class: "ad-caption" });
    const read = snap.target_tokens, wrote = [...read.slice(1), "<eos>"];
    const rows = read.map((t, q) => `${t} \u2192 ${wrote[q]}`);
    const bleu = snap.bleu_by_epoch || [];
    const show = () => {
      const e = epochs[Number(slider.value)];
      const matrix = head.value === "mean" ? e.attention : e.heads[Number(head.value)];
      const when = e.epoch === null ? "the final weights" : `epoch ${e.epoch + 1}`;
      const score = e.val_bleu_greedy ?? bleu[bleu.length - 1]?.val_bleu_greedy;
      value.textContent = `${when}${score ? `, validation BLEU ${score.toFixed(1)}` : ""}`;
      view.replaceChildren(heatmap(matrix, rows, snap.source_tokens, {
        width: this.root.clientWidth, colour,
        axes: ["query: the English step (read \u2192 wrote)", "key: the German token it reads"],
        name: `cross-attention of decoder layer ${snap.layer} after ${when}` }));
      caption.textContent = `Cross-attention of decoder layer ${snap.layer} ` +
        `(${head.value === "mean" ? "the mean of its heads" : `head ${Number(head.value) + 1}`}), ` +
        `after ${when}, read on the reference translation.`;
    };
    slider.addEventListener("input", show);
    head.addEventListener("change", show);
    const first = kept[0], last = kept[kept.length - 1];
    const early = bleu.filter(b => b.epoch < first.epoch);
    const story = early.length
      ? `The run kept the weights of its last ${kept.length} epochs, so the maps begin at epoch ` +
        `${first.epoch + 1}, when validation BLEU was already ${first.val_bleu_greedy.toFixed(1)} ` +
        `(it was ${early[0].val_bleu_greedy.toFixed(1)} after epoch 1): most of the learning ` +
        "happened before, and what is left to see is how the alignment settles."
      : "";
    this.snapshots.append(el("h3", { text: "Watch a head learn" }),
      el("p", { text: "This sentence is the one whose attention was recorded during the " +
                      `training run, after epochs ${first.epoch + 1} to ${last.epoch + 1} of ` +
                      `${bleu.length || last.epoch + 1} and for the final weights. ${story}` }),
      el("div", { class: "ad-controls ad-epoch-controls" },
         el("label", { for: "ad-epoch", text: "Epoch" }),
         el("span", { class: "ad-range-end", text: String(first.epoch + 1) }), slider,
         el("span", { class: "ad-range-end", text: "final" }), value, head),
      caption, view);
    show();
  }
}

// ------------------------------------------------------------------------------------------------
// Start: the contract first, then the page.
const MODEL = new URL("model/", HERE);
const VENDOR = new URL("vendor/", HERE);
const RUNTIME = "ort-wasm-simd-threaded.wasm";
let queue = Promise.resolve();
const api = {
  translator: null, book: null, snapshots: null, about: null, files: MODEL_FILES,
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

// A file of the site, its bytes counted as they arrive (after decompression, so against the
// files' own sizes).
async function fetchCounted(url, count) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`could not load ${url.pathname.split("/").pop()} ` +
                                    `(HTTP ${response.status})`);
  if (!response.body?.getReader) {
    const buffer = await response.arrayBuffer();
    count(buffer.byteLength);
    return buffer;
  }
  const reader = response.body.getReader(), parts = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    parts.push(value);
    size += value.byteLength;
    count(value.byteLength);
  }
  const out = new Uint8Array(size);
  let at = 0;
  for (const part of parts) { out.set(part, at); at += part.byteLength; }
  return out.buffer;
}

async function fetchJson(url) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`could not load ${url} (HTTP ${response.status})`);
  return response.json();
}

const root = document.getElementById("ad-translator");
const page = root ? new Page(root) : null;
api.ready = (async () => {
  const [manifest, vendor] = await Promise.all([
    fetchJson(new URL("manifest.json", MODEL)), fetchJson(new URL("files.json", VENDOR)).catch(() => ({}))]);
  const total = (vendor[RUNTIME] || 0) + MODEL_FILES.slice(1).reduce(
    (sum, name) => sum + (manifest.files?.[name]?.bytes || 0), 0);
  let done = 0, shown = 0;
  const count = n => {
    done += n;
    if (page && (done - shown > 2e5 || done >= total)) { shown = done; page.loading(done, total); }
  };
  const runtime = fetchCounted(new URL(RUNTIME, VENDOR), count);
  const book = await loadTranslator(async name => {
    if (name === "manifest.json") return new TextEncoder().encode(JSON.stringify(manifest)).buffer;
    return fetchCounted(new URL(name, MODEL), count);
  }, async () => { ort.env.wasm.wasmBinary = new Uint8Array(await runtime); });
  api.book = api.translator = book;
  [api.snapshots, api.about] = await Promise.all(["snapshots.json", "about.json"].map(
    name => fetchJson(new URL(name, MODEL)).catch(() => null)));
  return book;
})();
api.loading = api.ready;
api.ready.then(book => {
  if (!page) return;
  page.status.textContent = page.describe(book, api.about);
  page.button.disabled = false;
  let examples = [];
  try { examples = JSON.parse(root.dataset.examples || "[]").map(text => ({ text })); } catch { }
  if (api.snapshots) examples.push({ text: api.snapshots.german, note: "watch a head learn" });
  api.bookExamples = examples;
  page.setExamples(examples);
  if (page.source.value.trim()) page.run();
}, e => {
  if (page) {
    page.root.classList.remove("ad-is-loading");
    page.progress.hidden = true;
    page.status.textContent = `The translator could not load: ${e.message}`;
  }
});
