"""Appendix A8, transformer_lib.export: the shipped translator exported for the page "Try the
translator" (by its command line, once per module) and checked against the PyTorch model: the six
files and the manifest, one shared file of weights, logits and attention weights, greedy search on
every test sentence, beam search, bad input, byte-for-byte determinism; what the export needs,
checked before anything runs; an export written whole or not at all; one home for its defaults."""
import hashlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from transformer_lib import data

onnx = pytest.importorskip("onnx")                                  # the [export] extra
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

from transformer_lib import export  # noqa: E402
from transformer_lib.decoding import NEW_TOKENS_OVER_SOURCE, max_new_tokens  # noqa: E402
from transformer_lib.export import (  # noqa: E402
    FILES,
    FORMAT,
    OnnxTranslator,
    check_export_folder,
    check_export_requirements,
    export_translator,
    translate_one,
)
from transformer_lib.recipe import preset  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RECIPE = preset("cpu-30min")            # the shipped translator's recipe: its beam and alpha
TOL = 1e-4


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread, as `make test` runs (small models on a shared CPU), restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def exported(tmp_path_factory, one_thread):
    """The shipped translator exported by `python -m transformer_lib.export --out DIR`, in a fresh
    process: (DIR, what the command printed)."""
    out = tmp_path_factory.mktemp("web") / "translator"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-m", "transformer_lib.export", "--out", str(out)],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return out, done.stdout


@pytest.fixture(scope="module")
def translator(one_thread):
    from transformer_lib import load_translator
    return load_translator()


@pytest.fixture(scope="module")
def onnx_model(exported):
    return OnnxTranslator(exported[0])


@pytest.fixture(scope="module")
def test_pairs():
    return data.load_multi30k("test_2016_flickr")


@pytest.mark.slow
def test_the_command_line_writes_the_six_files_and_lists_them(exported):
    out, printed = exported
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)           # nothing else
    for name in FILES:
        assert f"{name}" in printed and f"{(out / name).stat().st_size:,} bytes" in printed


def test_the_manifest_describes_the_files_and_the_model(exported, translator):
    out, _ = exported
    model, tok, info = translator
    manifest = json.loads((out / "manifest.json").read_text())
    c = model.config
    assert manifest["format"] == FORMAT
    assert manifest["special_ids"] == {"pad": tok.pad_id, "bos": tok.bos_id, "eos": tok.eos_id,
                                       "unk": tok.unk_id}
    assert (manifest["vocab_size"], manifest["d_model"], manifest["n_heads"],
            manifest["n_layers"], manifest["max_len"]) == (c.tgt_vocab_size, c.d_model,
                                                          c.n_heads, c.n_layers, c.max_len)
    assert (manifest["beam_size"], manifest["length_penalty"]) == (RECIPE.beam_size,
                                                                   RECIPE.length_penalty)
    assert manifest["source"] == info
    assert manifest["languages"] == {"source": "de", "target": "en"}
    assert manifest["examples"] == []
    limit = manifest["max_new_tokens"]        # the numbers the page computes its limit from
    assert limit == {"source_plus": NEW_TOKENS_OVER_SOURCE, "at_most": c.max_len}
    for S in (1, 12, c.max_len - 50, c.max_len):
        assert min(S + limit["source_plus"], limit["at_most"]) == max_new_tokens(S, c.max_len)
    assert set(manifest["files"]) == set(FILES) - {"manifest.json"}
    for name, listed in manifest["files"].items():
        assert listed == {"bytes": (out / name).stat().st_size, "sha256": sha256(out / name)}
    assert (out / "tokenizer.json").read_text() == tok.tokenizer.to_str()


def graphs(out: Path) -> dict:
    return {name: onnx.load(str(out / name), load_external_data=False)
            for name in ("encoder.onnx", "decoder_step.onnx", "decoder.onnx")}


def test_the_graphs_share_one_weights_file(exported):
    out, _ = exported
    places = {}
    for name, proto in graphs(out).items():
        onnx.checker.check_model(str(out / name))                        # external data included
        for init in proto.graph.initializer:
            if init.data_location == onnx.TensorProto.EXTERNAL:
                where = {e.key: e.value for e in init.external_data}
                assert where["location"] == "weights.bin", (name, init.name)
                places.setdefault(tuple(init.dims), set()).add((where["offset"], where["length"]))
            else:
                assert len(init.SerializeToString()) < 2048, (name, init.name)  # only small ones
    manifest = json.loads((out / "manifest.json").read_text())
    embedding = (manifest["vocab_size"], manifest["d_model"])
    assert len(places[embedding]) == 1              # the tied embedding, stored once for both
    assert (out / "weights.bin").stat().st_size < 10.5e6


def test_the_graphs_are_small_and_their_shapes_free(exported):
    out, _ = exported
    protos = graphs(out)
    for name, proto in protos.items():
        assert (out / name).stat().st_size < 100_000, name        # no stack traces or file paths
        assert not proto.metadata_props and not proto.graph.doc_string
        assert not any(n.doc_string or n.metadata_props for n in proto.graph.node), name
    dims = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
            for proto in protos.values() for v in [*proto.graph.input, *proto.graph.output]}
    assert dims["src"] == [1, "S"] and dims["memory"] == [1, "S", 256]
    assert dims["tgt"] == ["B", "T"] and dims["logits"] == ["B", 4000]
    assert dims["encoder_attention"] == [2, 1, 4, "S", "S"]
    assert dims["decoder_attention"] == [2, "B", 4, "T", "T"]
    assert dims["cross_attention"] == [2, "B", 4, "T", "S"]
    assert dims["memory_keys"] == dims["memory_values"] == [2, 1, 4, "S", 64]
    assert dims["token"] == ["B", 1]
    assert dims["past_keys"] == dims["past_values"] == [2, "B", 4, "P", 64]
    assert dims["present_keys"][:3] == [2, "B", 4] and dims["present_keys"][4] == 64
    assert isinstance(dims["present_keys"][3], str)                 # P + 1, left free


def test_an_export_is_the_same_bytes_every_time(exported, translator, tmp_path):
    """The command line's export (another process) and one here with the function's defaults: the
    same files, byte for byte (so both take their beam size and alpha from one place)."""
    model, tok, info = translator
    export_translator(model, tok, tmp_path, info=info)
    for name in FILES:
        assert sha256(tmp_path / name) == sha256(exported[0] / name), name


@pytest.mark.needs_data
def test_logits_and_attention_weights_agree_with_pytorch(translator, onnx_model, test_pairs):
    """30 sentences, teacher-forced on PyTorch's greedy output: the logits of the last step and
    the three kinds of attention weights, every layer and head; then every step's logits along
    the way, from `greedy_decode` run on both."""
    from transformer_lib import greedy_decode
    from transformer_lib.export import keeping_weights
    model, tok, _ = translator
    worst = dict(logits=0.0, encoder=0.0, decoder=0.0, cross=0.0, steps=0.0)
    for de, _ in test_pairs[:30]:
        src = torch.tensor([tok.encode(de, add_eos=True)])
        n = max_new_tokens(src.shape[1], model.config.max_len)
        ids, logits = greedy_decode(model, src, n, tok.bos_id, tok.eos_id, return_logits=True)
        tgt = ids[:, :-1]
        with torch.no_grad(), keeping_weights(model):
            last = model.decode(tgt, model.encode(src))[:, -1]
            ours = {"encoder": [layer.self_attn.attn_weights for layer in model.encoder.layers],
                    "decoder": [layer.self_attn.attn_weights for layer in model.decoder.layers],
                    "cross": [layer.cross_attn.attn_weights for layer in model.decoder.layers]}
        onnx_last = onnx_model.decode(tgt, onnx_model.encode(src))[:, -1]
        worst["logits"] = max(worst["logits"], (onnx_last - last).abs().max().item())
        for kind, weights in ours.items():
            theirs = torch.from_numpy(onnx_model.last[kind])
            assert theirs.shape == torch.stack(weights).shape
            worst[kind] = max(worst[kind], (theirs - torch.stack(weights)).abs().max().item())
        for use_cache in (True, False):           # the step graph with its cache; the prefix graph
            onnx_ids, onnx_logits = greedy_decode(onnx_model, src, n, tok.bos_id, tok.eos_id,
                                                  use_cache=use_cache, return_logits=True)
            assert torch.equal(onnx_ids, ids), (de, use_cache)
            worst["steps"] = max(worst["steps"], (onnx_logits - logits).abs().max().item())
    assert max(worst.values()) < TOL, worst


def departure_gap(model, tok, de: str, ids: list[int]) -> float:
    """PyTorch teacher-forced on the output `ids` (bos first): at the first step where its best
    token is not the next of `ids`, its best logit minus that token's; inf if there is none."""
    src = torch.tensor([tok.encode(de, add_eos=True)])
    with torch.no_grad():
        logits = model.decode(torch.tensor([ids[:-1]]), model.encode(src))[0]      # (T, V)
    logits[:, [tok.pad_id, tok.bos_id]] = -math.inf                 # never emitted (chapter 15)
    for step, token in enumerate(ids[1:]):
        best = int(logits[step].argmax())
        if best != token:
            return (logits[step, best] - logits[step, token]).item()
    return math.inf


@pytest.mark.needs_data
@pytest.mark.slow
def test_greedy_translations_of_every_test_sentence_are_pytorchs(translator, onnx_model,
                                                                 test_pairs):
    """All 1,000 test sentences, against the shipped run's greedy translations. A difference
    passes only as a measured tie: where the two outputs part, PyTorch's two candidates lie
    within TOL of each other."""
    model, tok, _ = translator
    record = json.loads((ROOT / "results" / "multi30k-cpu-30min.samples.json").read_text())
    assert record["translator_sha256"] == data.MANIFEST[data.TRANSLATOR_NAME].sha256
    assert len(record["greedy"]) == len(test_pairs) == 1000
    for (de, _), reference in zip(test_pairs, record["greedy"]):
        ids = translate_one(onnx_model, tok, de)
        if tok.decode(ids) == reference:
            continue
        gap = departure_gap(model, tok, de, ids)                 # the graphs left PyTorch's path
        if gap == math.inf:                                      # or the reference's run did
            gap = departure_gap(model, tok, de, [tok.bos_id] + tok.encode(reference, add_eos=True))
        assert gap < TOL, (de, reference, tok.decode(ids), gap)


@pytest.mark.needs_data
@pytest.mark.slow
def test_beam_search_is_pytorchs(translator, onnx_model, test_pairs):
    """The first 100 test sentences, one at a time, with the manifest's beam size and alpha."""
    model, tok, _ = translator
    beam, alpha = onnx_model.manifest["beam_size"], onnx_model.manifest["length_penalty"]
    assert (beam, alpha) == (4, RECIPE.length_penalty)
    for de, _ in test_pairs[:100]:
        assert translate_one(onnx_model, tok, de, beam, alpha) == translate_one(model, tok, de,
                                                                                beam, alpha), de


@pytest.mark.parametrize("missing", FILES)
def test_a_folder_without_a_file_names_it(exported, tmp_path, missing):
    for name in FILES:
        if name != missing:
            (tmp_path / name).symlink_to(exported[0] / name)
    with pytest.raises(FileNotFoundError, match=f"lacks {missing} ") as e:
        OnnxTranslator(tmp_path)
    assert sum(name in str(e.value).split("(")[0] for name in FILES) == 1


def test_a_changed_file_is_caught(exported, tmp_path):
    for name in FILES:
        if name != "tokenizer.json":
            (tmp_path / name).symlink_to(exported[0] / name)
    text = (exported[0] / "tokenizer.json").read_text()
    (tmp_path / "tokenizer.json").write_text(text[:-1] + "#")          # the same size, not bytes
    with pytest.raises(ValueError, match="tokenizer.json is not the file its manifest lists"):
        OnnxTranslator(tmp_path)


def test_only_a_transformer_is_exported(translator, tmp_path):
    _, tok, _ = translator
    with pytest.raises(TypeError, match="must be a transformer_lib Transformer, got Linear"):
        export_translator(torch.nn.Linear(2, 2), tok, tmp_path / "out")
    model = translator[0]
    with pytest.raises(TypeError, match="tokenizer must be"):
        export_translator(model, "not a tokenizer", tmp_path / "out")
    with pytest.raises(ValueError, match="beam_size"):
        export_translator(model, tok, tmp_path / "out", beam_size=0)
    assert not (tmp_path / "out").exists()                     # nothing written


def test_the_graphs_take_one_sentence_without_padding(onnx_model, translator):
    _, tok, _ = translator
    ids = tok.encode("Ein Hund rennt.", add_eos=True)
    with pytest.raises(ValueError, match="without padding"):
        onnx_model.encode(torch.tensor([ids + [tok.pad_id]]))
    with pytest.raises(ValueError, match="one sentence at a time"):
        onnx_model.encode(torch.tensor([ids, ids]))
    memory = onnx_model.encode(torch.tensor([ids]))
    cache = {}                                    # the step graph: the cache starts empty
    logits = onnx_model.decode(torch.tensor([[tok.bos_id]] * 3), memory, cache=cache)
    assert logits.shape == (3, 1, 4000) and cache["layer_0"]["k"].shape == (3, 4, 1, 64)
    logits = onnx_model.decode(torch.tensor([[5]] * 3), memory, cache=cache)
    assert cache["layer_1"]["v"].shape == (3, 4, 2, 64)             # one position longer


def test_without_the_extra_the_error_names_it(exported, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)         # as if it were not installed
    with pytest.raises(ModuleNotFoundError, match=r'pip install "transformer-lib\[export\]"'):
        OnnxTranslator(exported[0])


def test_the_package_imports_neither_the_module_nor_the_extra():
    extra = ("onnx", "onnxruntime", "onnxscript")
    code = (f"import sys, json\nimport transformer_lib\n"
            f"first = [m for m in {('transformer_lib.export', *extra)!r} if m in sys.modules]\n"
            f"import transformer_lib.export\n"
            f"print(json.dumps([first, [m for m in {extra!r} if m in sys.modules]]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [[], []]


def test_the_train_commands_export_flag_is_taken_out_before_the_recipe(monkeypatch):
    """`python -m transformer_lib.train --export-web DIR`: the flag leaves the recipe's flags
    alone, and without what the export needs it is refused before any training."""
    from transformer_lib.recipe import RecipeError
    from transformer_lib.train import _export_flag
    assert _export_flag(["--preset", "cpu-tiny", "--export-web", "web", "--no-amp"]) == (
        "web", ["--preset", "cpu-tiny", "--no-amp"])
    assert _export_flag(["--preset", "cpu-tiny"]) == (None, ["--preset", "cpu-tiny"])
    missing(monkeypatch, "onnxscript")
    with pytest.raises(RecipeError, match=r"--export-web: .*onnxscript is not installed.*pip "
                                          r'install -U "transformer-lib\[export\]"'):
        _export_flag(["--export-web", "web"])
    assert _export_flag(["--preset", "cpu-tiny"]) == (None, ["--preset", "cpu-tiny"])


def missing(monkeypatch, *names: str, versions: dict | None = None):
    """Make importlib.metadata see `names` as not installed, and `versions` as installed."""
    import importlib.metadata as metadata
    real = metadata.version

    def version(name):
        if name in names:
            raise metadata.PackageNotFoundError(name)
        return (versions or {}).get(name) or real(name)
    monkeypatch.setattr(metadata, "version", version)


def test_one_message_names_everything_the_export_lacks(monkeypatch):
    check_export_requirements()                         # all there, as in this environment
    missing(monkeypatch, "onnx", versions={"onnxscript": "0.5.1"})
    monkeypatch.setattr(torch, "__version__", "2.5.1+cpu")
    with pytest.raises(ImportError) as e:
        check_export_requirements()
    message = str(e.value)
    for part in ("onnx is not installed", "onnxscript is 0.5.1, older than 0.6",
                 "torch is 2.5.1+cpu, older than 2.11", 'pip install -U "transformer-lib[export]"',
                 '"torch>=2.11"'):
        assert part in message, (part, message)


def test_the_export_command_refuses_in_one_line_before_reading_the_translator(monkeypatch,
                                                                              capsys, tmp_path):
    missing(monkeypatch, "onnxscript")
    assert export.main(["--out", str(tmp_path / "web"), "--translator", "nowhere.pt"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: exporting a translator needs") and err.count("\n") == 1
    assert "onnxscript is not installed" in err and "nowhere.pt" not in err
    assert not (tmp_path / "web").exists()


def test_the_floors_are_the_extras():
    """EXPORT_NEEDS holds the floors of pyproject.toml's [export] extra and of its comment."""
    import tomllib
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extra = dict(r.split(">=") for r in project["optional-dependencies"]["export"])
    assert {k: v for k, v in export.EXPORT_NEEDS.items() if k != "torch"} == {
        k: v for k, v in extra.items() if k in export.EXPORT_NEEDS}
    comment = (ROOT / "pyproject.toml").read_text()
    assert f"torch {export.EXPORT_NEEDS['torch']} and later" in comment


def test_a_failed_export_leaves_the_folder_as_it_was(exported, translator, tmp_path, monkeypatch):
    """A re-export that fails halfway: the old export is still whole, nothing of the new one is
    left beside it; then one that succeeds replaces it and keeps the folder's other files."""
    model, tok, info = translator
    out = tmp_path / "web"
    out.mkdir()
    for name in FILES:
        (out / name).write_bytes((exported[0] / name).read_bytes())
    (out / "notes.txt").write_text("mine")
    before = {name: sha256(out / name) for name in FILES}

    def fail(*args, **kwargs):
        raise RuntimeError("the disk is full")
    monkeypatch.setattr(export, "_share_weights", fail)
    with pytest.raises(RuntimeError, match="disk is full"):
        export_translator(model, tok, out, info={"another": "run"})
    assert {name: sha256(out / name) for name in FILES} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["web"]       # no temporary folder left
    check_export_folder(out)
    monkeypatch.undo()
    manifest = export_translator(model, tok, out, info={"another": "run"}, examples=["Ein Hund."])
    check_export_folder(out)
    assert json.loads((out / "manifest.json").read_text()) == manifest
    assert manifest["examples"] == ["Ein Hund."] and manifest["source"] == {"another": "run"}
    assert (out / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["web"]


def test_the_manifest_checks_name_the_file(exported, tmp_path):
    for name in FILES:
        (tmp_path / name).symlink_to(exported[0] / name)
    (tmp_path / "weights.bin").unlink()
    (tmp_path / "weights.bin").write_bytes(b"12345678")
    with pytest.raises(ValueError, match=r"weights.bin is 8 bytes; its manifest says 9,"):
        check_export_folder(tmp_path)
    (tmp_path / "manifest.json").unlink()
    (tmp_path / "manifest.json").write_text(json.dumps({"format": FORMAT}))
    with pytest.raises(ValueError, match="does not list the files"):
        check_export_folder(tmp_path)
    (tmp_path / "manifest.json").write_text("hello")
    with pytest.raises(ValueError, match="manifest.json is not JSON"):
        check_export_folder(tmp_path)


def test_languages_and_examples_are_checked(translator, tmp_path):
    model, tok, _ = translator
    with pytest.raises(ValueError, match="source_lang must be an ISO 639 language code"):
        export_translator(model, tok, tmp_path / "out", source_lang="German")
    with pytest.raises(ValueError, match="examples must be a list"):
        export_translator(model, tok, tmp_path / "out", examples="Ein Hund.")
    assert not (tmp_path / "out").exists()


def test_decode_refuses_the_memory_of_another_sentence(onnx_model, translator):
    _, tok, _ = translator
    first = onnx_model.encode(torch.tensor([tok.encode("Ein Hund rennt.", add_eos=True)]))
    onnx_model.encode(torch.tensor([tok.encode("Zwei Katzen schlafen.", add_eos=True)]))
    with pytest.raises(ValueError, match="decodes the sentence it encoded last"):
        onnx_model.decode(torch.tensor([[tok.bos_id]]), first, cache={})


def test_a_runs_export_is_labelled_with_its_languages():
    from types import SimpleNamespace

    from transformer_lib.records import languages
    assert languages(preset("cpu-30min")) == ("de", "en")
    assert languages(preset("wmt14-base")) == ("en", "de")
    assert languages(SimpleNamespace(dataset="multi30k", src_lang="fr", tgt_lang="en")) == (
        "fr", "en")
