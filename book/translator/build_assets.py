"""The files the page "Try the translator" serves, written into book/_static/translator/ by
`make book` (nothing here is committed; book/translator/package*.json pin the runtime):

    python book/translator/build_assets.py vendor   # ONNX Runtime Web and tokenizers.js, from npm
    python book/translator/build_assets.py model    # the shipped translator, exported

`vendor` copies from book/translator/node_modules (`npm ci --prefix book/translator`) only the
files the page loads: the WebAssembly build of ONNX Runtime Web (its module, its loader and its
.wasm) and the ES module of tokenizers.js, and lists their sizes in vendor/files.json (the page
counts its loading against them). `model` exports the book's translator with
`python -m transformer_lib.export` into model/, then adds what the page shows besides: the
attention snapshots that chapter 18 recorded (results/multi30k-cpu-30min.attention.json) with the
tokens of their sentence, and every epoch's validation BLEU (the run's history); about.json,
what the page says the model is (from the run's record: its task, training time, CPU, training
sentences, test BLEU); and heads.png, the static figure shown while the translator loads and
printed where the explorer would be.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "book" / "_static" / "translator"
NODE = ROOT / "book" / "translator" / "node_modules"
VENDOR = {  # what the page loads, from its npm package
    "onnxruntime-web/dist/ort.wasm.min.mjs": "ort.wasm.min.mjs",
    "onnxruntime-web/dist/ort-wasm-simd-threaded.mjs": "ort-wasm-simd-threaded.mjs",
    "onnxruntime-web/dist/ort-wasm-simd-threaded.wasm": "ort-wasm-simd-threaded.wasm",
    "@huggingface/tokenizers/dist/tokenizers.min.mjs": "tokenizers.min.mjs",
}
# The sentences offered under the text box (written for this page, not taken from Multi30k).
EXAMPLE_FOR_FIGURE = "Ein kleiner Hund rennt mit einem Ball über die Wiese."


def vendor(out: Path = OUT / "vendor") -> None:
    """Copy the runtime's files; the source-map comment goes (the map is not served)."""
    out.mkdir(parents=True, exist_ok=True)
    for src, name in VENDOR.items():
        path = NODE / src
        if not path.is_file():
            sys.exit(f"{path} is missing: run `npm ci --prefix book/translator` first")
        if name.endswith(".mjs"):
            text = re.sub(r"\n?//# sourceMappingURL=\S+\s*$", "\n", path.read_text("utf-8"))
            (out / name).write_text(text, encoding="utf-8")
        else:
            shutil.copyfile(path, out / name)
    sizes = {name: (out / name).stat().st_size for name in VENDOR.values()}
    (out / "files.json").write_text(json.dumps(sizes, indent=1) + "\n", encoding="utf-8")


def snapshots(out: Path) -> None:
    """snapshots.json: the recorded cross-attention of one test sentence at every kept epoch,
    with the sentence and its tokens (the record itself holds only the sentence's index)."""
    from transformer_lib import load_translator
    from transformer_lib.data import load_multi30k
    record = json.loads((ROOT / "results" / "multi30k-cpu-30min.attention.json").read_text())
    history = json.loads((ROOT / "results" / "multi30k-cpu-30min.history.json").read_text())
    _, tok, _ = load_translator()
    de, en = load_multi30k(record["split"])[record["sentence_index"]]
    keep = ("epoch", "attention", "heads", "val_bleu_greedy")
    data = {"german": de, "english": en, "split": record["split"],
            "sentence_index": record["sentence_index"], "layer": 2,
            "source_tokens": tok.tokens(de, add_eos=True),
            "target_tokens": tok.tokens(en, add_bos=True),
            "weights": [{k: w.get(k) for k in keep} for w in record["weights"]],
            # every epoch's validation BLEU (the run's history, epoch counted from 0 as above),
            # for the epochs before the first kept snapshot too
            "bleu_by_epoch": [{"epoch": e["epoch"], "val_bleu_greedy": round(e["bleu_greedy"], 1)}
                              for e in history["evals"] if e.get("weights") is None]}
    n_rows = len(data["weights"][0]["attention"])
    if n_rows != len(data["target_tokens"]) or len(data["weights"][0]["attention"][0]) != len(
            data["source_tokens"]):
        sys.exit("the snapshot record does not match its sentence's tokens")
    (out / "snapshots.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")


def about(out: Path) -> None:
    """about.json: what the page says about the book's translator, from the shipped run's record
    (results/multi30k-cpu-30min.json) and the data it trained on."""
    from transformer_lib.data import load_multi30k
    record = json.loads((ROOT / "results" / "multi30k-cpu-30min.json").read_text())
    test = record["test_2016_flickr"]
    data = {"record": "results/multi30k-cpu-30min.json", "task": record["task"],
            "training_seconds": record["training_seconds"], "cpu": record["cpu"],
            "device": record["device"], "parameters": record["parameters"],
            "epochs": record["epochs"], "training_sentences": len(load_multi30k("train")),
            "corpus": "Multi30k: German captions of photos from Flickr, with English translations",
            "test_bleu": {"greedy": round(test["bleu_greedy"], 1),
                          "beam": round(test["bleu_beam"], 1), "split": "test_2016_flickr"}}
    (out / "about.json").write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n",
                                    encoding="utf-8")


def figure(out: Path) -> None:
    """heads.png: every head of the last decoder layer's cross-attention on one sentence."""
    import matplotlib
    matplotlib.use("Agg")
    import torch

    from transformer_lib import load_translator, plot_attention_heads
    from transformer_lib.export import keeping_weights, translate_one
    model, tok, _ = load_translator()
    ids = translate_one(model, tok, EXAMPLE_FOR_FIGURE)
    src = torch.tensor([tok.encode(EXAMPLE_FOR_FIGURE, add_eos=True)])
    with torch.no_grad(), keeping_weights(model):
        model(src, torch.tensor([ids[:-1]]))
        weights = model.decoder.layers[-1].cross_attn.attn_weights[0]
    fig = plot_attention_heads(weights, x_labels=tok.tokens(EXAMPLE_FOR_FIGURE, add_eos=True),
                               y_labels=[tok.tokenizer.id_to_token(i) for i in ids[:-1]],
                               title=f"Cross-attention, decoder layer 2: {EXAMPLE_FOR_FIGURE}")
    fig.savefig(out / "heads.png", dpi=80, bbox_inches="tight")


def model(out: Path = OUT / "model") -> None:
    subprocess.run([sys.executable, "-m", "transformer_lib.export", "--out", str(out)], check=True)
    snapshots(out)
    about(out)
    figure(out)


if __name__ == "__main__":
    if sys.argv[1:] == ["vendor"]:
        vendor()
    elif sys.argv[1:] == ["model"]:
        model()
    else:
        sys.exit(__doc__)
