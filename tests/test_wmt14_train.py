"""The paper's own runs from the command line (chapter 21): `--preset wmt14-base` and `wmt14-big`
as Table 3 gives them, trained on a copy of WMT 2014 in the archives' own formats
(tests/wmt14_fixture.py): the token store built once and reused, batches drawn from it, snapshots
every `snapshot_every` updates averaged, and newstest2014 scored by sacreBLEU and as the paper
scored; under torchrun on 2 processes and on 2 "nodes", killed and resumed."""
import json
import math
import os
import subprocess
import sys
import time

import pytest
import torch
from conftest import kill_tree
from wmt14_fixture import TESTS, site_dir, write_archives, write_fixture

from transformer_lib.multi_head_attention import count_parameters
from transformer_lib.recipe import Recipe, RecipeError, preset, validate_recipe
from transformer_lib.stages import batch_tokens, build_model
from transformer_lib.train import main, run
from transformer_lib.training import BatchLoader

pytest.importorskip("transformer_lib.wmt14")
pytest.importorskip("sacremoses")

# Enough pairs for a few batches on each of two processes.
WORDS = [("dog", "Hund"), ("cat", "Katze"), ("house", "Haus"), ("tree", "Baum"), ("car", "Auto"),
         ("book", "Buch")]
TRAIN = {corpus: [(f"The {en} is {k}.", f"Der {de} ist {k}.") for (en, de) in WORDS
                  for k in range(start, start + 3)]
         for corpus, start in (("europarl-v7", 1), ("commoncrawl", 4), ("news-commentary-v9", 7))}

# wmt14-base at a tiny size: every stage of the run, in seconds on a CPU.
TINY = dict(d_model=32, n_heads=2, n_layers=1, d_ff=64, vocab_size=300, update_tokens=48,
            warmup_steps=10, max_steps=12, checkpoint_every=4, snapshot_every=3, average_last=3,
            log_every=1, device="cpu", amp=False, progress=False)


def flags(out, **changes):
    out_flags = ["--preset", "wmt14-base", "--out-dir", str(out)]
    for k, v in {**TINY, **changes}.items():
        name = "--" + k.replace("_", "-")
        out_flags += ([name if v else "--no-" + name[2:]] if isinstance(v, bool)
                      else [name, str(v)])
    return out_flags


def tiny(out, **changes) -> Recipe:
    import dataclasses
    return dataclasses.replace(preset("wmt14-base"), out_dir=str(out), **{**TINY, **changes})


def test_the_presets_are_table_3s_models():
    """Section 5 and Table 3: the base and big models, their dropout, warm-up, schedule (eq. 3
    itself: its maximum is the peak), label smoothing, updates, averaging and beam search; the
    parameter counts, with the 37,000-token vocabulary, within 5% of the paper's 65 M and 213 M."""
    base, big = preset("wmt14-base"), preset("wmt14-big")
    for r in (base, big):
        validate_recipe(r)
        assert (r.dataset, r.vocab_size, r.n_layers, r.update_tokens) == ("wmt14", 37000, 6, 25000)
        assert (r.warmup_steps, r.schedule, r.label_smoothing, r.beam_size,
                r.length_penalty) == (4000, "noam", 0.1, 4, 0.6)
        assert r.peak_lr == pytest.approx(r.d_model ** -0.5 * 4000 ** -0.5, rel=1e-12)
        assert (r.attn_dropout, r.ffn_dropout, r.time_budget_s, r.epochs) == (0, 0, 0, 0)
    assert (base.d_model, base.n_heads, base.d_ff, base.dropout) == (512, 8, 2048, 0.1)
    assert (big.d_model, big.n_heads, big.d_ff, big.dropout) == (1024, 16, 4096, 0.3)
    assert (base.max_steps, base.average_last, big.max_steps, big.average_last) == (
        100_000, 5, 300_000, 20)
    # the paper's updates per 10 minutes: 100,000 in 12 hours, 300,000 in 3.5 days
    assert base.snapshot_every == round(100_000 / (12 * 6))
    assert big.snapshot_every == round(300_000 / (3.5 * 24 * 6))
    for r, paper in ((base, 65e6), (big, 213e6)):
        with torch.device("meta"):
            assert count_parameters(build_model(r, r.vocab_size)) == pytest.approx(paper, rel=0.05)


def test_update_tokens_is_shared_among_processes_and_batches():
    r = preset("wmt14-base")
    assert [batch_tokens(r, n) for n in (1, 8, 16)] == [25000, 3125, 1563]
    assert batch_tokens(Recipe(update_tokens=25000, accum_steps=4), 2) == 3125
    assert batch_tokens(Recipe(batch_tokens=777), 8) == 777          # 0: batch_tokens as given
    with pytest.raises(RecipeError, match="dataset must be one of"):
        validate_recipe(Recipe(dataset="wmt16"))
    with pytest.raises(RecipeError, match="update_tokens must be >= 0"):
        validate_recipe(Recipe(update_tokens=-1))


def test_batches_padded_as_drawn_equal_the_padded_tables():
    """`padded_once=False` (a corpus too large for tables, read from a store) gives the very
    tensors the tables give, with and without fixed shapes."""
    g = torch.Generator().manual_seed(0)
    pairs = [(torch.randint(4, 50, (int(n),), generator=g).tolist(),
              [1] + torch.randint(4, 50, (int(m),), generator=g).tolist() + [2])
             for n, m in torch.randint(1, 20, (60, 2), generator=g)]
    for fixed in (False, True):
        loaders = [BatchLoader.by_tokens(pairs, 64, bucket=4, fixed_shapes=fixed, seed=3,
                                         padded_once=once) for once in (True, False)]
        for a, b in zip(*loaders, strict=True):
            assert all(torch.equal(getattr(a, k), getattr(b, k)) for k in ("src", "tgt_in",
                                                                            "tgt_out"))
            assert (a.n_tokens, a.n_src_tokens) == (b.n_tokens, b.n_src_tokens)


def test_a_run_builds_its_store_once_and_scores_both_ways(tmp_path, monkeypatch, capsys):
    write_fixture(tmp_path / "data", monkeypatch, train=TRAIN)
    out = tmp_path / "run"
    assert main(flags(out)) == 0
    printed = capsys.readouterr().out
    assert "tokenizing WMT 2014 once" in printed
    assert "newstest2014 BLEU: greedy" in printed and "tokenized as the paper scored" in printed
    rec = json.loads((out / "results.json").read_text())
    t = rec["newstest2014"]
    assert rec["task"] == "WMT 2014, English→German" and rec["steps"] == 12
    assert t["sentences"] == len(TESTS["newstest2014"]) and rec["val"]["sentences"] == 2
    assert "tok:13a" in t["signature"] and t["tokenized_signature"].startswith("tok:moses-de")
    assert all(0 <= t[k] <= 100 for k in ("bleu_beam", "bleu_beam_tokenized",
                                          "bleu_greedy_tokenized"))
    assert sorted(p.name for p in (out / "snapshots").iterdir()) == [
        "step_0000006.pt", "step_0000009.pt", "step_0000012.pt"]
    assert rec["weights"] in ("last", "average of 3 snapshots, 3 updates apart")
    store = json.loads((out / "store" / "meta.json").read_text())
    assert store["pairs"] == sum(len(v) for v in TRAIN.values())
    assert set(json.loads((out / "translations.json").read_text())[0]) == {
        "en", "de", "greedy", "beam"}
    # a second run finds the store and uses its vocabulary
    again = tmp_path / "again"
    assert main(flags(again, store_dir=out / "store", max_steps=2)) == 0
    assert "tokenizing" not in capsys.readouterr().out
    assert (again / "tokenizer.json").read_bytes() == (out / "tokenizer.json").read_bytes()


def test_a_resumed_run_equals_an_uninterrupted_one(tmp_path, monkeypatch):
    write_fixture(tmp_path / "data", monkeypatch, train=TRAIN)
    whole = run(tiny(tmp_path / "whole", max_steps=8))
    run(tiny(tmp_path / "split", max_steps=4))
    resumed = run(tiny(tmp_path / "split", max_steps=8), resume=True)
    assert [h["loss"] for h in resumed.history] == [h["loss"] for h in whole.history]
    assert len(whole.history) == 8 and all(math.isfinite(h["loss"]) for h in whole.history)


def test_a_missing_training_archive_is_named_before_anything_is_written(tmp_path, monkeypatch):
    write_fixture(tmp_path / "data", monkeypatch, train=TRAIN)
    from transformer_lib import wmt14
    (tmp_path / "data" / wmt14.TRAIN_PARTS["commoncrawl"].archive).unlink()
    assert main(flags(tmp_path / "run")) == 2
    assert not (tmp_path / "run").exists()


def fixture_env(tmp_path, hooks: bool = False) -> dict:
    sums = write_archives(tmp_path / "data", train=TRAIN)
    site = site_dir(tmp_path / "site", sums, hooks=hooks)
    return {**os.environ, "OMP_NUM_THREADS": "1", "TRANSFORMER_LIB_DATA": str(tmp_path / "data"),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}


def launch(cmd, env) -> subprocess.Popen:
    return subprocess.Popen(cmd, env={**env, "PYTHONFAULTHANDLER": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def finish(procs, timeout=240) -> list[str]:
    try:
        outs = [p.communicate(timeout=timeout)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                kill_tree(p.pid)
    assert all(p.returncode == 0 for p in procs), "\n".join(o[-3000:] for o in outs)
    return outs


TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


@pytest.mark.slow
def test_torchrun_two_processes_killed_and_resumed(tmp_path):
    """`torchrun --nproc_per_node 2 -m transformer_lib.train --preset wmt14-base` at a tiny size:
    process 0 builds the store, both train on their shards; killed (every process, SIGKILL) after
    its first checkpoint, the run resumes from it, averages its snapshots, decodes newstest2014
    and prints both BLEUs, with the same weights on both processes."""
    env, out = fixture_env(tmp_path), tmp_path / "run"
    cmd = TORCHRUN + ["--standalone", "--nproc_per_node=2", "-m", "transformer_lib.train"]
    proc = launch(cmd + flags(out, max_steps=100_000), env)
    deadline = time.monotonic() + 240
    while not (out / "checkpoint.pt").is_file():
        if proc.poll() is not None or time.monotonic() > deadline:
            kill_tree(proc.pid)
            pytest.fail(f"no checkpoint within 240 s:\n{proc.communicate()[0][-3000:]}")
        time.sleep(0.05)
    kill_tree(proc.pid)
    proc.communicate()
    from transformer_lib.optimization import read_checkpoint
    killed_at = read_checkpoint(out / "checkpoint.pt")["step"]
    assert killed_at % TINY["checkpoint_every"] == 0 and not (out / "results.json").exists()
    stop = killed_at + 8
    printed = finish([launch(cmd + flags(out, max_steps=stop) + ["--resume"], env)])[0]
    assert "tokenized as the paper scored" in printed and "(resuming its run)" in printed
    rec = json.loads((out / "results.json").read_text())
    assert rec["processes"] == 2 and rec["steps"] == stop
    assert rec["max_weight_diff_across_processes"] == 0.0
    hist = json.loads((out / "history.json").read_text())["history"]
    assert [h["step"] for h in hist] == list(range(1, stop + 1))
    assert all(math.isfinite(h["loss"]) for h in hist)
    evals = json.loads((out / "history.json").read_text())["evals"]
    assert [e["weights"] for e in evals][-2:] == ["last", "average of 3 snapshots, 3 updates apart"]


@pytest.mark.slow
def test_two_nodes_of_one_process_train_wmt14(tmp_path):
    """The same on two torchrun "nodes" of one process each, on 127.0.0.1 with the c10d
    rendezvous, as on two machines, accumulating two batches an update."""
    from test_train import free_port
    env, out, port = fixture_env(tmp_path), tmp_path / "nodes", free_port()
    for stop, resume in ((4, False), (8, True)):
        procs = [launch(TORCHRUN + [
            "--nnodes=2", "--nproc_per_node=1", f"--node_rank={rank}", "--rdzv_backend=c10d",
            f"--rdzv_endpoint=127.0.0.1:{port}", f"--rdzv_id=wmt14-{stop}",
            "-m", "transformer_lib.train", *flags(out, max_steps=stop, accum_steps=2),
            *(["--resume"] if resume else [])], env) for rank in (0, 1)]
        printed = finish(procs)
        assert "tokenized as the paper scored" in printed[0]
        rec = json.loads((out / "results.json").read_text())
        assert (rec["processes"], rec["steps"], rec["recipe"]["accum_steps"]) == (2, stop, 2)
        assert rec["max_weight_diff_across_processes"] == 0.0


@pytest.mark.slow
def test_two_nodes_with_disks_of_their_own_killed_and_resumed(tmp_path):
    """Two torchrun "nodes" that share no folder, as two machines with disks of their own: each
    node's OUT_DIR and store folder are its own. Each builds its store, with process 0's
    vocabulary, and keeps its own tokenizer, checkpoints and snapshots. Stopped after update 4
    (tests/run_hooks.py) and killed (SIGKILL, every process), the same two commands with
    --resume auto go on, each from its own checkpoint, whichever node the rendezvous makes
    process 0, and finish with the same weights and logs on both disks."""
    from test_train import free_port

    from transformer_lib.optimization import read_checkpoint
    env = fixture_env(tmp_path, hooks=True)
    disks = [tmp_path / "machine0", tmp_path / "machine1"]

    def launch_nodes(stop: int, run_id: str, hooks: dict) -> list[subprocess.Popen]:
        port = free_port()
        return [launch(TORCHRUN + [
            "--nnodes=2", "--nproc_per_node=1", "--rdzv_backend=c10d",
            f"--rdzv_endpoint=127.0.0.1:{port}", f"--rdzv_id={run_id}", "-m",
            "transformer_lib.train", *flags(disk / "run", max_steps=stop, store_dir=disk / "store"),
            "--resume", "auto"], {**env, **hooks}) for disk in disks]

    procs = launch_nodes(100_000, "disks-1", {"HOOK_STALL_AT_STEP": "4"})
    deadline = time.monotonic() + 240
    while not all((d / "run" / "checkpoint.pt").is_file() for d in disks):
        if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
            for p in procs:
                kill_tree(p.pid)
            pytest.fail("no checkpoint on both disks within 240 s:\n"
                        + "\n".join(p.communicate()[0][-3000:] for p in procs))
        time.sleep(0.05)
    for p in procs:
        kill_tree(p.pid)
        p.communicate()
    assert [read_checkpoint(d / "run" / "checkpoint.pt")["step"] for d in disks] == [4, 4]
    assert all((d / "store" / "meta.json").is_file() for d in disks)
    printed = finish(launch_nodes(8, "disks-2", {}))
    main = [k for k, d in enumerate(disks) if (d / "run" / "results.json").is_file()]
    assert len(main) == 1 and "(resuming its run)" in printed[main[0]]
    rec = json.loads((disks[main[0]] / "run" / "results.json").read_text())
    assert (rec["processes"], rec["steps"], rec["max_weight_diff_across_processes"]) == (2, 8, 0.0)
    a, b = (read_checkpoint(d / "run" / "checkpoint.pt") for d in disks)
    assert a["step"] == b["step"] == 8 and a["extra"]["history"] == b["extra"]["history"]
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert len({(d / "run" / "tokenizer.json").read_bytes() for d in disks}) == 1
    assert len({(d / "store" / "src.ids").read_bytes() for d in disks}) == 1
    assert ([sorted(p.name for p in (d / "run" / "snapshots").iterdir()) for d in disks]
            == [["step_0000003.pt", "step_0000006.pt"]] * 2)
