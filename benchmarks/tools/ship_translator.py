"""Turn a finished `cpu-30min` run into the book's translator file, and score what the file holds.

    python benchmarks/tools/ship_translator.py RUN_DIR RECORD.json

Reads RUN_DIR/model.pt (the chosen weights) and RUN_DIR/tokenizer.json, writes
pretrained/multi30k-de-en-cpu.pt (float16 weights, shared matrix stored once; appendix A2), then
translates all of test_2016_flickr and the validation split with the weights *as stored* (read
back into float32) and writes RECORD's sibling `*.shipped.json`: the file's SHA-256 and size, and
greedy and beam BLEU of the stored weights next to those the run recorded. Chapter 18 recomputes
the same scores from the file and checks them against this record. Set the manifest's SHA-256
(notebooks/A2_data.ipynb) to the printed value, commit the file, then pin the manifest's address
to that commit (tests/test_pretrained.py checks that the pinned commit holds the file).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from transformer_lib.data import (
    TRANSLATOR_NAME,
    load_multi30k,
    load_translator,
    save_translator,
    sha256_of,
)
from transformer_lib.records import load_run
from transformer_lib.stages import timed_bleu

REPO = Path(__file__).resolve().parents[2]


def main(run_dir: str, record_path: str) -> None:
    run_dir, record_path = Path(run_dir), Path(record_path).resolve()
    record = json.loads(record_path.read_text())
    model, tokenizer, _ = load_run(run_dir)
    out = REPO / TRANSLATOR_NAME
    info = {"record": str(record_path.relative_to(REPO)) if record_path.is_relative_to(REPO)
            else record_path.name,
            "preset": "cpu-30min", "git_commit": str(record["git_commit"]),
            "weights": record["weights"],
            "training_seconds": float(record["training_seconds"]), "stored_dtype": "float16"}
    save_translator(out, model, tokenizer, info=info)
    stored, tok, _ = load_translator(out)
    device = torch.device("cpu")
    shipped = {"file": TRANSLATOR_NAME, "sha256": sha256_of(out), "bytes": out.stat().st_size,
               "device": f"CPU ({torch.get_num_threads()} threads)", "torch": torch.__version__}
    t = record["test_2016_flickr"]
    for split, pairs in (("val", load_multi30k("val")),
                         ("test_2016_flickr", load_multi30k("test_2016_flickr"))):
        scores = {"sentences": len(pairs)}
        for name, beam in (("greedy", 1), ("beam", t["beam_size"])):
            r = timed_bleu(stored, tok, pairs, beam_size=beam, alpha=t["length_penalty"],
                           device=device, amp_dtype=None)
            scores[f"bleu_{name}"], scores["signature"] = r["bleu"], r["signature"]
        shipped[split] = scores
    shipped["recorded_by_run"] = {"precision": record.get("precision"),
                                  "val_bleu_greedy": record["val"]["bleu_greedy"],
                                  "test_bleu_greedy": t["bleu_greedy"],
                                  "test_bleu_beam": t["bleu_beam"]}
    dest = record_path.with_suffix(".shipped.json")
    dest.write_text(json.dumps(shipped, indent=2) + "\n")
    print(json.dumps(shipped, indent=2))


if __name__ == "__main__":
    main(*sys.argv[1:])
