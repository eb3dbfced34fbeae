"""Chapter 18: the training CLI — config errors, bad input that stops before writing, bucketed
batches, resume == uninterrupted, and a 2-process DistributedDataParallel run (gloo) with identical
weights."""
import dataclasses
import inspect
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import benchmark_script, kill_tree

from transformer_lib import data
from transformer_lib.engineering import FIELD_TYPES
from transformer_lib.optimization import read_checkpoint
from transformer_lib.recipe import (
    PRESETS,
    Recipe,
    RecipeError,
    load_recipe_file,
    parse_args,
    preset,
    recipe_from_dict,
)
from transformer_lib.train import main, run
from transformer_lib.training import BatchLoader

DATA = os.environ.get(data.ENV_VAR)

# A configuration that trains in a second or two on the CPU.
TINY = dict(preset="cpu-tiny", train_pairs=300, vocab_size=450, d_model=32, n_heads=2, n_layers=1,
            d_ff=64,
            batch_tokens=400, warmup_steps=5, time_budget_s=0.0, epochs=0, max_steps=6, log_every=1,
            checkpoint_every=3, eval_sentences=6, test_sentences=6, beam_size=2, progress=False)


def tiny_flags(out_dir, **changes):
    values = {**TINY, **changes}
    values.pop("preset")
    flags = ["--preset", "cpu-tiny", "--out-dir", str(out_dir)]
    for k, v in values.items():
        flag = "--" + k.replace("_", "-")
        flags += [flag if v else "--no-" + k.replace("_", "-")] if isinstance(v, bool) else [flag,
                                                                                             str(v)]
    return flags


def files_of(directory):
    return {p: p.read_bytes() for p in Path(directory).rglob("*")
            if p.is_file()} if Path(directory).exists() else {}


# --- configuration --------------------------------------------------------------------------------
def test_precedence_preset_file_flags(tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text('preset = "cpu-tiny"\nd_model = 64\ndropout = 0.2\n')
    r = load_recipe_file(cfg)
    assert (r.d_model, r.dropout, r.vocab_size) == (64, 0.2, PRESETS["cpu-tiny"]["vocab_size"])
    r, resume = parse_args(["--config", str(cfg), "--d-model", "128", "--no-amp", "--resume"])
    assert (r.d_model, r.dropout, r.amp, resume) == (128, 0.2, False, True)
    assert parse_args([])[0] == Recipe()
    assert recipe_from_dict({"peak_lr": 1}).peak_lr == 1.0          # an int where a float is
                                                                    # expected is fine


@pytest.mark.parametrize("content, message", [
    ('{"d_modle": 64}', r"unknown config key\(s\) \['d_modle'\]"),
    ('{"d_model": "big"}', "'d_model' must be of type int"),
    ('{"dropout": true}', "'dropout' must be of type float"),
    ('{"d_model": 100, "n_heads": 8}', "divisible by n_heads"),
    ('{"epochs": 0, "time_budget_s": 0, "max_steps": 0}', "never stop"),
    ('{"preset": "huge"}', "unknown preset 'huge'"),
    ('[1, 2]', "one table/object"),
    ('{"d_model": 64', "could not be parsed"),
])
def test_bad_config_file_is_one_clear_error_and_writes_nothing(tmp_path, capsys, content, message):
    cfg = tmp_path / "bad.json"
    cfg.write_text(content)
    out = tmp_path / "run"
    assert main(["--config", str(cfg), "--out-dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1
    assert re.search(message, err), err
    assert not out.exists()


def test_missing_config_file_and_unknown_flag(tmp_path, capsys):
    assert main(["--config", str(tmp_path / "nope.toml")]) == 2
    assert "does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        parse_args(["--d-modle", "3"])
    assert e.value.code == 2


@pytest.mark.skipif(torch.cuda.is_available(),
                    reason="checks the message on a machine without CUDA")
def test_cuda_requested_without_cuda(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["--preset", "cpu-tiny", "--device", "cuda", "--out-dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert "device='cuda' was requested, but CUDA is not available" in err
    assert not out.exists()
    with pytest.raises(RecipeError, match="device must be"):
        recipe_from_dict({"device": "tpu"})


# --- batches --------------------------------------------------------------------------------------
def _pairs(n=300, seed=0):
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(1, 30, (n, 2), generator=g).tolist()
    return [([5] * a + [2], [1] + [6] * b + [2]) for a, b in lens]


@pytest.mark.parametrize("fixed", [False, True])
def test_bucketed_batches(fixed):
    pairs = _pairs()
    loader = BatchLoader.by_tokens(pairs, 256, bucket=8, fixed_shapes=fixed, seed=1)
    seen, shapes = [], set()
    for idx in loader.batches():
        b = loader.collate(idx)
        seen += idx
        assert (b.src.shape[1] % 8 == 0 and b.tgt_in.shape[1] % 8 == 0 and b.tgt_in.shape
                == b.tgt_out.shape)
        assert b.n_tokens == sum(len(pairs[i][1]) - 1 for i in idx) == int((b.tgt_out != 0).sum())
        if fixed:
            assert b.src.shape[0] == 256 // b.src.shape[1] and b.src.shape[1] == b.tgt_in.shape[1]
            assert (b.tgt_out[len(idx):] == 0).all()             # filler rows: labels all padding
        shapes.add((tuple(b.src.shape), tuple(b.tgt_in.shape)))
    assert sorted(seen) == list(range(len(pairs)))
    if fixed:                                                   # one shape per length bucket
        assert len(shapes) == len({s[0][1] for s in shapes}) <= 4
    shards = [set(map(tuple, BatchLoader.by_tokens(pairs, 256, bucket=8, seed=1, rank=r,
                                                   num_replicas=2).batches())) for r in (0, 1)]
    assert not shards[0] & shards[1]


# --- runs -----------------------------------------------------------------------------------------
def tiny_recipe(out_dir, **changes):
    return recipe_from_dict({**TINY, "out_dir": str(out_dir), **changes})


@pytest.mark.needs_data
def test_resume_equals_uninterrupted_and_results_record(tmp_path):
    whole = run(tiny_recipe(tmp_path / "whole"))
    run(tiny_recipe(tmp_path / "split", max_steps=3))
    resumed = run(tiny_recipe(tmp_path / "split"), resume=True)
    assert [h["loss"] for h in resumed.history] == [h["loss"] for h in whole.history]
    assert all(math.isfinite(h["loss"]) for h in whole.history) and len(whole.history) == 6
    a = read_checkpoint(tmp_path / "whole" / "checkpoint.pt")["model"]
    b = read_checkpoint(tmp_path / "split" / "checkpoint.pt")["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    rec = json.loads((tmp_path / "whole" / "results.json").read_text())
    for key in ("device", "torch", "training_seconds", "parameters", "git_commit",
                "target_tokens_per_s"):
        assert key in rec
    assert rec["precision"] == "float32"                      # cpu-tiny trains without autocast
    t = rec["test_2016_flickr"]
    assert (0 <= t["bleu_greedy"] <= 100 and 0 <= t["bleu_beam"] <= 100
            and "tok:13a" in t["signature"])
    assert (tmp_path / "whole" / "tokenizer.json").is_file() and (tmp_path / "whole"
                                                                  / "model.pt").is_file()


@pytest.mark.needs_data
def test_run_checks_ids_once_not_every_step(tmp_path, monkeypatch):
    """run() checks the encoded data once, so model and loss skip their per-call range check (a GPU
    sync)."""
    import transformer_lib.stages as stages
    monkeypatch.setattr(torch, "aminmax",
                        lambda *a, **k: pytest.fail("per-call range check ran during run()"))
    result = run(tiny_recipe(tmp_path / "nocheck", max_steps=2))
    assert result.model.check_inputs is True              # restored for whoever uses the model next
    with pytest.raises(ValueError, match=r"pair 0 holds token id 7, outside a vocabulary of 5"):
        stages.check_token_ids([([1, 2], [3, 7])], 5)


@pytest.mark.needs_data
def test_the_record_names_the_precision_the_run_used(tmp_path, monkeypatch):
    """With amp on a CPU that has bf16 instructions the run trains under bf16 autocast, and says
    so. It trains for real in bfloat16, which PyTorch's CPU attention does only with its AVX-512
    kernels (elsewhere: "pack_vnni2 is only supported when avx512 is supported"; there
    cpu_has_native_bf16 is False and no run asks for it, tests/test_cpu_kernels.py)."""
    from transformer_lib import engineering
    if not torch.backends.cpu.get_cpu_capability().startswith("AVX512"):
        pytest.skip(f"bfloat16 training needs PyTorch's AVX-512 kernels; these are "
                    f"{torch.backends.cpu.get_cpu_capability()}")
    monkeypatch.setattr(engineering, "cpu_has_native_bf16", lambda: True)
    result = run(tiny_recipe(tmp_path / "bf16", max_steps=2, amp=True))
    assert result.results["precision"] == "bfloat16"


@pytest.mark.needs_data
def test_results_record_the_commit_the_run_started_from(tmp_path, monkeypatch):
    """A commit made while a long run trains must not be recorded as the code that ran."""
    import transformer_lib.stages as stages
    started, real_train = [], stages.train

    def spy_train(*args, **kwargs):
        started.append(True)
        return real_train(*args, **kwargs)

    monkeypatch.setattr(stages, "train", spy_train)
    monkeypatch.setattr(stages, "git_commit", lambda: "after-training-began" if started
                        else "at-start")
    result = run(tiny_recipe(tmp_path / "commit", max_steps=2))
    assert started and result.results["git_commit"] == "at-start"


@pytest.mark.parametrize("average_last, kept, weights", [(1, 2, "last"), (2, 3, None)])
@pytest.mark.needs_data
def test_keep_snapshots_keeps_epochs_to_study_and_averaging_reads_only_its_own(
        tmp_path, average_last, kept, weights):
    """`keep_snapshots` keeps the last N epochs' weights whether or not the run averages; averaging
    still reads only the last `average_last` of them."""
    result = run(tiny_recipe(tmp_path / "snaps", max_steps=0, epochs=3, keep_snapshots=kept,
                             average_last=average_last))
    snaps = sorted(p.name for p in (tmp_path / "snaps" / "snapshots").iterdir())
    assert snaps == [f"epoch_{e:04d}.pt" for e in range(3 - kept, 3)]
    chosen = [e["weights"] for e in result.evals if "weights" in e]
    assert chosen[0] == "last" and chosen[1:] == ([] if average_last == 1
                                                  else ["average of 2 epoch snapshots"])
    assert result.results["weights"] in ([weights] if weights else chosen)


@pytest.mark.needs_data
def test_time_budget_stops_training(tmp_path):
    """No step limit, a 1 s budget: training stops at the first step whose clock reading reaches
    it."""
    result = run(tiny_recipe(tmp_path / "budget", max_steps=0, epochs=0, time_budget_s=1.0))
    hist = result.history
    assert len(hist) >= 2 and [h["step"] for h in hist] == list(range(1, len(hist) + 1))
    assert all(h["elapsed_s"] < 1.0 for h in hist[:-1]) and hist[-1]["elapsed_s"] >= 1.0
    assert result.results["training_seconds"] == pytest.approx(hist[-1]["elapsed_s"], abs=0.5)
    assert result.results["steps"] == len(hist)


@pytest.mark.needs_data
def test_bad_input_stops_before_writing(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    run(tiny_recipe(out, max_steps=2))
    before = files_of(out)
    # 1. an existing run is never overwritten without --resume
    assert main(tiny_flags(out)) == 2
    assert "already holds a run" in capsys.readouterr().err
    # 2. a checkpoint from an incompatible recipe
    assert main(tiny_flags(out, d_model=64, n_heads=4) + ["--resume"]) == 2
    assert "incompatible recipe (d_model: 32 in the checkpoint, 64 now" in capsys.readouterr().err
    assert files_of(out) == before
    # 3. a corrupt checkpoint
    bad = tmp_path / "bad"
    shutil.copytree(out, bad)
    ckpt = bad / "checkpoint.pt"
    ckpt.write_bytes(ckpt.read_bytes()[:5000])
    corrupt = files_of(bad)
    assert main(tiny_flags(bad) + ["--resume"]) == 2
    assert "truncated or corrupt" in capsys.readouterr().err
    assert files_of(bad) == corrupt
    # 4. a missing and a corrupt data file (no download possible)
    monkeypatch.setattr(data.urllib.request, "urlopen",
                        lambda *a, **k: (_ for _ in ()).throw(OSError("offline")))
    empty = tmp_path / "nodata"
    empty.mkdir()
    monkeypatch.setenv(data.ENV_VAR, str(empty))
    assert main(tiny_flags(tmp_path / "run2")) == 2
    err = capsys.readouterr().err                  # every file the run needs, named at once
    assert all(f"'multi30k/{split}.{lang}.gz' not found" in err for lang in ("de", "en")
               for split in ("train", "val", "test_2016_flickr")), err
    broken = tmp_path / "broken"
    shutil.copytree(Path(DATA) / "multi30k", broken / "multi30k")
    (broken / "multi30k" / "val.en.gz").chmod(0o644)
    (broken / "multi30k" / "val.en.gz").write_bytes(b"not gzip")
    monkeypatch.setenv(data.ENV_VAR, str(broken))
    assert main(tiny_flags(tmp_path / "run3")) == 2
    assert "val.en.gz has SHA-256" in capsys.readouterr().err
    assert not (tmp_path / "run2").exists() and not (tmp_path / "run3").exists()


@pytest.mark.needs_data
@pytest.mark.parametrize("limit", [dict(max_steps=4), dict(max_steps=0, epochs=1),
                                   dict(max_steps=0, epochs=0, time_budget_s=0.5)])
def test_resuming_a_finished_run_says_so_and_changes_nothing(tmp_path, capsys, limit):
    """--resume on a run that reached its update, epoch or time limit: one line that says it is
    finished and how to train on; no update, no file touched. A raised limit trains on."""
    out = tmp_path / "run"
    assert main(tiny_flags(out, **limit)) == 0
    steps = json.loads((out / "results.json").read_text())["steps"]
    before = files_of(out)
    capsys.readouterr()
    assert main(tiny_flags(out, **limit) + ["--resume"]) == 2
    line = _one_error_line(capsys)
    assert re.search(r"is finished .* its results are in .*results\.json", line), line
    assert "--max-steps" in line and "--epochs" in line and "--time-budget-s" in line
    assert files_of(out) == before
    trained = json.loads((out / "results.json").read_text())["training_seconds"]
    raised = {k: v * 2 if k != "time_budget_s" else trained + 0.5 for k, v in limit.items() if v}
    assert main(tiny_flags(out, **{**limit, **raised}) + ["--resume"]) == 0
    assert json.loads((out / "results.json").read_text())["steps"] > steps


@pytest.mark.needs_data
def test_a_finished_run_without_its_record_writes_it_without_training(tmp_path, capsys):
    """A run stopped during its final evaluation (checkpoint at the limit, no record): --resume
    evaluates and writes the record, and makes no update."""
    out = tmp_path / "run"
    assert main(tiny_flags(out, max_steps=0, epochs=0, time_budget_s=0.5)) == 0
    first = json.loads((out / "results.json").read_text())
    (out / "results.json").unlink()
    assert main(tiny_flags(out, max_steps=0, epochs=0, time_budget_s=0.5) + ["--resume"]) == 0
    again = json.loads((out / "results.json").read_text())
    assert again["steps"] == first["steps"] and again["val"] == first["val"]
    assert again["test_2016_flickr"]["bleu_greedy"] == first["test_2016_flickr"]["bleu_greedy"]


def run_hang_aware(cmd, env, timeout):
    """`subprocess.run` for torchrun and its workers, in a session of their own: on a timeout every
    process of the session prints its Python stacks (faulthandler, SIGABRT) and the test fails
    showing them, and no worker is left running on the cores the rest of the suite needs."""
    proc = subprocess.Popen(cmd, env={**env, "PYTHONFAULTHANDLER": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid, signal.SIGABRT)       # torchrun's workers are in sessions of their own
        try:
            out, _ = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)
            out, _ = proc.communicate(timeout=20)
        pytest.fail(f"{' '.join(cmd[3:8])} ... did not exit within {timeout} s; the stacks of its "
                    f"processes:\n{out[-12000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, "")


@pytest.mark.needs_data
@pytest.mark.slow
def test_two_process_ddp_gloo(tmp_path):
    """torchrun with 2 CPU processes: finite losses, identical weights on both, a checkpoint that
    resumes."""
    out = tmp_path / "ddp"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "-m", "transformer_lib.train"]
    proc = run_hang_aware(cmd + tiny_flags(out), env, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:]
    rec = json.loads((out / "results.json").read_text())
    assert rec["processes"] == 2 and rec["steps"] == 6
    assert rec["max_weight_diff_across_processes"] == 0.0
    hist = json.loads((out / "history.json").read_text())["history"]
    assert len(hist) == 6 and all(math.isfinite(h["loss"]) for h in hist)
    proc = run_hang_aware(cmd + tiny_flags(out, max_steps=9) + ["--resume"], env, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:]
    rec = json.loads((out / "results.json").read_text())
    assert rec["steps"] == 9 and rec["max_weight_diff_across_processes"] == 0.0
    hist = json.loads((out / "history.json").read_text())["history"]
    assert [h["step"] for h in hist] == list(range(1, 10)) and all(math.isfinite(h["loss"])
                                                                   for h in hist)


def free_port() -> int:
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.needs_data
@pytest.mark.slow
def test_two_nodes_of_one_process_with_accumulation(tmp_path):
    """Two torchrun "nodes" of one process each on 127.0.0.1 (the c10d rendezvous, as on two
    machines), accumulating two batches an update: they agree on every weight, train, stop and
    write one record, and a run resumed from its checkpoint on the two nodes goes on."""
    out, port = tmp_path / "nodes", free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    def launch(max_steps: int, resume: bool) -> list[subprocess.Popen]:
        flags = tiny_flags(out, max_steps=max_steps, accum_steps=2) + (["--resume"] if resume
                                                                        else [])
        return [subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=1",
             f"--node_rank={rank}", "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{port}",
             f"--rdzv_id=nodes-{max_steps}", "-m", "transformer_lib.train", *flags],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True) for rank in (0, 1)]

    for max_steps, resume in ((4, False), (6, True)):
        procs = launch(max_steps, resume)
        try:
            outs = [p.communicate(timeout=240)[0] for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    kill_tree(p.pid)
        assert all(p.returncode == 0 for p in procs), "\n".join(o[-2000:] for o in outs)
        rec = json.loads((out / "results.json").read_text())
        assert rec["processes"] == 2 and rec["steps"] == max_steps
        assert rec["max_weight_diff_across_processes"] == 0.0
        assert rec["recipe"]["accum_steps"] == 2
    hist = json.loads((out / "history.json").read_text())["history"]
    assert [h["step"] for h in hist] == list(range(1, 7)) and all(math.isfinite(h["loss"])
                                                                  for h in hist)


def hooked_env(tmp_path, **hooks) -> dict:
    """The environment of a torchrun test whose workers get the faults and delays of
    tests/run_hooks.py that `hooks` names (HOOK_...=value)."""
    from run_hooks import site_with_hooks
    site = site_with_hooks(tmp_path / "site")
    return {**os.environ, "OMP_NUM_THREADS": "1", **{k: str(v) for k, v in hooks.items()},
            "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}


@pytest.mark.needs_data
@pytest.mark.slow
def test_a_worker_that_dies_is_restarted_by_torchrun_and_the_run_resumes(tmp_path):
    """`torchrun --max-restarts 1 ... --resume auto`: process 1 dies after update 5 (os._exit, from
    tests/run_hooks.py); torchrun stops process 0 and starts both again with the same command, which
    resumes from the checkpoint of update 3 and ends with the weights and losses of a run never
    stopped, dropout (0.1) included: every process draws the masks it would have drawn. With
    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, as chapter 21's commands give it: torchrun's own store,
    shared with the run's, can hand a restarted process the address of a process of the start
    before (pytorch/pytorch#135712; seen here once in three restarts without it)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "--max-restarts=1", "-m", "transformer_lib.train"]
    runs = {}
    for name, hooks in (("whole", {}), ("restarted", {"HOOK_EXIT_AT_STEP": 5})):
        out = tmp_path / name
        proc = run_hang_aware(cmd + tiny_flags(out) + ["--resume", "auto"],
                              hooked_env(tmp_path, TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, **hooks),
                              timeout=300)
        assert proc.returncode == 0, proc.stdout[-4000:]
        runs[name] = proc.stdout, read_checkpoint(out / "checkpoint.pt")
    printed, restarted = runs["restarted"]
    starts = re.findall(r"output directory: .*", printed)
    assert len(starts) == 2 and "resuming" not in starts[0] and "(resuming its run)" in starts[1]
    whole = runs["whole"][1]
    assert whole["step"] == restarted["step"] == 6 and "rng_by_rank" in whole["extra"]
    assert all(torch.equal(whole["model"][k], restarted["model"][k]) for k in whole["model"])
    assert ([h["loss"] for h in whole["extra"]["history"]]
            == [h["loss"] for h in restarted["extra"]["history"]])


@pytest.mark.needs_data
@pytest.mark.slow
def test_a_slow_evaluation_completes_shared_and_a_slow_process_0_names_the_timeout(tmp_path):
    """--dist-timeout 8. Decoding made slow (2 s a batch: tests/run_hooks.py) on both processes,
    with batches of one or two sentences: each evaluation takes longer than the timeout, but the
    two processes share its batches and neither waits long, so the run completes. Process 0's
    validation loss (its work alone) made slow by 40 s: process 1 stops after waiting 8 s, with one
    line naming --dist-timeout, and the run ends with an error, not a silent kill."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "-m", "transformer_lib.train"]
    flags = ["--dist-timeout", "8", "--decode-batch", "2"]
    out = tmp_path / "shared"
    proc = run_hang_aware(cmd + tiny_flags(out) + flags,
                          hooked_env(tmp_path, HOOK_SLOW_DECODE_S=2), timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:]
    rec = json.loads((out / "results.json").read_text())
    t = rec["test_2016_flickr"]
    # every process waited at most 8 s, while the test set alone took longer to decode
    assert t["sentences"] / t["greedy_sentences_per_s"] + t["sentences"] / t[
        "beam_sentences_per_s"] > 8
    out = tmp_path / "alone"
    proc = run_hang_aware(cmd + tiny_flags(out) + flags,
                          hooked_env(tmp_path, HOOK_SLOW_LOSS_S=40), timeout=300)
    assert proc.returncode != 0 and not (out / "results.json").exists()
    line = next(x for x in proc.stdout.splitlines() if x.startswith("error: "))
    assert re.match(r"error: process 1 waited for another process of the run longer than "
                    r"--dist-timeout 8 s allows \(.*[Tt]imed out.*\); give a longer "
                    r"--dist-timeout", line), line


@pytest.mark.needs_data
@pytest.mark.slow
def test_a_bad_out_dir_on_one_machine_stops_both(tmp_path):
    """Two torchrun "nodes", the second given an --out-dir it cannot create (under a file): both
    stop with its one-line error (the other node's line names the process it came from), before
    anything is written."""
    port, blocker = free_port(), tmp_path / "a-file"
    blocker.write_text("")
    outs = [tmp_path / "good", blocker / "run"]
    procs = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=1",
         "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{port}", "--rdzv_id=bad-dir",
         "-m", "transformer_lib.train", *tiny_flags(out)],
        env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True) for out in outs]
    try:
        printed = [p.communicate(timeout=120)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                kill_tree(p.pid)
    assert all(p.returncode != 0 for p in procs)
    errors = [next((x for x in o.splitlines() if x.startswith("error: ")), o[-2000:])
              for o in printed]
    assert sorted(bool(re.match(r"error: process [01]: out_dir", e)) for e in errors) == [
        False, True]                     # (the rendezvous decides which node is process 0)
    assert all("a-file" in e and "not a directory" in e for e in errors), errors
    assert not outs[0].exists()


@pytest.mark.needs_data
def test_resume_auto_starts_a_run_or_continues_it(tmp_path, capsys):
    """--resume auto (what torchrun --max-restarts runs again): an empty OUT_DIR starts the run, one
    with a checkpoint continues it, as --resume does, to the weights of a run never stopped."""
    assert parse_args(["--resume"])[1] is True and parse_args(["--resume", "auto"])[1] == "auto"
    assert parse_args([])[1] is False
    with pytest.raises(SystemExit):
        parse_args(["--resume", "always"])
    assert "invalid choice: 'always'" in capsys.readouterr().err
    assert main(tiny_flags(tmp_path / "whole")) == 0
    assert main(tiny_flags(tmp_path / "split", max_steps=3) + ["--resume", "auto"]) == 0
    assert "(resuming its run)" not in capsys.readouterr().out
    assert main(tiny_flags(tmp_path / "split") + ["--resume", "auto"]) == 0
    assert "(resuming its run)" in capsys.readouterr().out
    a, b = (read_checkpoint(tmp_path / name / "checkpoint.pt") for name in ("whole", "split"))
    assert a["step"] == b["step"] == 6 and all(torch.equal(a["model"][k], b["model"][k])
                                               for k in a["model"])


def test_presets_are_valid_and_gpu_is_the_default():
    """`python -m transformer_lib.train` with no flags runs the recipe that --help calls the
    default: the gpu recipe, five minutes of eager training (compiling did not pay within them:
    recipe.py's comment above PRESETS) on fixed shapes with no epoch cap (the gpu preset changes
    nothing)."""
    for name in PRESETS:
        preset(name)
    assert PRESETS["gpu"] == {} and preset("gpu") == Recipe() == parse_args([])[0]
    r = Recipe()
    assert (r.compile, r.fixed_shapes, r.time_budget_s, r.epochs, r.max_steps) == (False, True,
                                                                                   300.0, 0, 0)
    assert not any(preset(name).compile for name in PRESETS)
    # the CPU presets train as they did before the defaults became the gpu recipe's
    tiny, cpu = preset("cpu-tiny"), preset("cpu-30min")
    assert (tiny.compile, tiny.fixed_shapes, tiny.epochs, tiny.time_budget_s) == (False, False, 20,
                                                                                  30.0)
    assert (cpu.compile, cpu.fixed_shapes, cpu.epochs, cpu.time_budget_s) == (False, False, 100,
                                                                              1797.0)


def _long_run_check(monkeypatch, capsys, seconds_per_update, limit, **changes):
    """Feeds `warn_if_long_run` updates 1 ... limit with a fake clock; returns what it printed
    (stderr) and how many updates the wrapped callback saw."""
    from transformer_lib.stages import warn_if_long_run
    now, seen = [0.0], []
    recipe = dataclasses.replace(preset("cpu-tiny"), **{"time_budget_s": 0.0, **changes})
    callback = warn_if_long_run(seen.append, limit, start=0, clock=lambda: now[0],
                                time_budget_s=recipe.time_budget_s)
    for step in range(1, limit + 1):
        now[0] += seconds_per_update
        callback(step)
    assert seen == list(range(1, limit + 1))
    return capsys.readouterr().err


def test_a_run_estimated_to_take_hours_says_so_once(monkeypatch, capsys):
    err = _long_run_check(monkeypatch, capsys, seconds_per_update=2.0, limit=10_000)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: ") and "--preset cpu-30min" in lines[0]
    assert "about 5.5 h" in lines[0] and "10,000 updates" in lines[0]       # 9,988 updates x 2 s
    assert _long_run_check(monkeypatch, capsys, seconds_per_update=1.0, limit=10_000) == ""  # 2.8 h
    # a time budget bounds the run: no estimate
    assert _long_run_check(monkeypatch, capsys, seconds_per_update=2.0, limit=10_000,
                           time_budget_s=600.0) == ""


@pytest.mark.needs_data
def test_the_long_run_warning_from_the_command_line(tmp_path, capsys, monkeypatch):
    """A real run with a fake clock (an hour per reading): one warning line; training goes on."""
    import itertools

    import transformer_lib.stages as stages
    from transformer_lib.engineering import TrainingClock
    hours = itertools.count(step=3600.0)
    monkeypatch.setattr(stages, "TrainingClock",
                        lambda device, start_s=0.0: TrainingClock(device, start_s,
                                                                  timer=lambda: next(hours)))
    assert main(tiny_flags(tmp_path / "run", max_steps=28, checkpoint_every=1000)) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: ")]
    assert len(err) == 1 and "--preset cpu-30min" in err[0], err
    assert json.loads((tmp_path / "run" / "results.json").read_text())["steps"] == 28


def test_committed_cpu_record_is_what_the_cpu_30min_preset_runs():
    """results/multi30k-cpu-30min.json (the chapter quotes it) must describe the preset as it is
    now, and hold a complete, measured record."""
    root = Path(__file__).resolve().parents[1]
    rec = json.loads((root / "results" / "multi30k-cpu-30min.json").read_text())
    where = ("progress", "log_every", "out_dir", "results")   # where the run wrote, not what it ran
    recorded = {k: v for k, v in rec["recipe"].items() if k not in (*where, "amp")}
    assert recorded == {k: v for k, v in dataclasses.asdict(preset("cpu-30min")).items()
                        if k in recorded}
    # --no-amp: float32, the precision its learning rate was chosen in (results/rematch-xeon)
    assert rec["recipe"]["amp"] is False and rec["precision"] == "float32"
    assert (rec["training_seconds"] <= 1800 and rec["git_commit"]
            and not rec["git_commit"].endswith("-dirty"))
    # every field is recorded, or was added to Recipe after the run at the default that does what
    # the code of the run did (accum_steps=1: no accumulation)
    later = set(dataclasses.asdict(preset("cpu-30min"))) - set(rec["recipe"])
    assert all(getattr(preset("cpu-30min"), k) == getattr(Recipe(), k) for k in later), later
    assert rec["measured"] is True and rec["cuda"] is None and rec["device"].startswith("CPU")
    t = rec["test_2016_flickr"]
    assert (t["sentences"] == 1000 and "tok:13a" in t["signature"] and 0 < t["bleu_greedy"]
            <= t["bleu_beam"] <= 100)
    log = json.loads((root / "results" / "multi30k-cpu-30min.history.json").read_text())["history"]
    assert (log[-1]["step"] == rec["steps"] and log[-1]["elapsed_s"]
            == pytest.approx(rec["training_seconds"], abs=1))



# the cpu-30min recipe before results/tuning-2x2/ chose 4,000 tokens and the run was watched; and
# the recipe fields added after the earlier records were made
BEFORE_2X2 = {"vocab_size": 8000, "eval_every": 0, "eval_beam": True,
              "peak_lr": 2e-3}          # the peak until results/rematch-xeon chose 1e-3
NEW_FIELDS = ("keep_snapshots", "accum_steps", "dataset", "update_tokens", "store_dir",
              "snapshot_every", "src_lang", "tgt_lang", "pairs", "columns", "source", "target",
              "val", "test", "heldout", "split_seed", "max_chars", "decode_batch",
              "dist_timeout_s")                                      # added after these records
# the cpu-30min recipe before results/tuning/ chose two layers and the paper's dropout only
EARLIER_CPU_RECIPE = {"n_layers": 3, "dropout": 0.1, "attn_dropout": 0.1, "ffn_dropout": 0.1,
                      **BEFORE_2X2}


@pytest.mark.parametrize("name, changes", [("multi30k-cpu-30min-fp32", {}),
                                           ("multi30k-cpu-30min-3x3", {"amp": True})])
def test_committed_earlier_recipe_records_are_the_preset_with_three_layers(name, changes):
    """results/multi30k-cpu-30min-fp32.json and -3x3.json (chapter 18 prints them) are the
    cpu-30min preset with its earlier three layers and dropouts (and amp on for -3x3), nothing
    else changed, trained in float32, complete, from a clean commit."""
    root = Path(__file__).resolve().parents[1]
    rec = json.loads((root / "results" / f"{name}.json").read_text())
    where = ("progress", "log_every", "out_dir", "results", *NEW_FIELDS)
    recorded = {k: v for k, v in rec["recipe"].items() if k not in where}
    expected = dataclasses.asdict(dataclasses.replace(preset("cpu-30min"), **EARLIER_CPU_RECIPE,
                                                      **changes))
    assert recorded == {k: v for k, v in expected.items() if k not in where}
    assert rec["precision"] == "float32" and rec["training_seconds"] <= 1800
    assert rec["git_commit"] and not rec["git_commit"].endswith("-dirty")
    assert rec["test_2016_flickr"]["sentences"] == 1000
    log = json.loads((root / "results" / f"{name}.history.json").read_text())
    assert log["history"][-1]["step"] == rec["steps"]

# --- the budget schedule and learned positions as recipe fields -----------------------------------
@pytest.mark.parametrize("values, message", [
    ({"schedule": "cosine"}, "schedule must be 'noam' or 'budget'"),
    ({"positional": "rope"}, "positional must be 'sinusoidal' or 'learned'"),
    ({"decay_start": 1.5}, r"decay_start must be in \[0, 1\]"),
    ({"schedule": "budget", "time_budget_s": 0.0, "max_steps": 0, "epochs": 3},
     "schedule='budget' needs"),
])
def test_schedule_and_positional_fields_are_checked(values, message):
    with pytest.raises(RecipeError, match=message):
        recipe_from_dict(values)


def test_build_model_takes_the_recipes_positions():
    from transformer_lib.stages import build_model
    learned = build_model(recipe_from_dict({"positional": "learned", "d_model": 16, "n_heads": 2,
                                            "d_ff": 32, "n_layers": 1}), vocab_size=50)
    assert learned.config.positional == "learned"
    assert build_model(recipe_from_dict({"d_model": 16, "n_heads": 2, "d_ff": 32, "n_layers": 1}),
                       vocab_size=50).config.positional == "sinusoidal"


@pytest.mark.parametrize("first", [
    "from transformer_lib import train",
    "import transformer_lib.train",
    "import transformer_lib; transformer_lib.train",
    "from transformer_lib.training import train",
    "import transformer_lib.training",
])
def test_transformer_lib_train_is_the_module_whatever_was_imported_first(first):
    """`transformer_lib.train` means the capstone's module in a fresh interpreter, in every import
    order."""
    code = (f"{first}\nimport types\nimport transformer_lib\nfrom transformer_lib import train "
            "as a\n"
            "import transformer_lib.train as b\nfrom transformer_lib.training import train as "
            "loop\n"
            "assert isinstance(a, types.ModuleType) and a is b is transformer_lib.train, (a, b)\n"
            "assert callable(a.run) and callable(a.main) and loop is "
            "transformer_lib.training.train\n"
            "assert transformer_lib.train is b\nprint('ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_help_lists_every_flag_with_its_comment_and_default():
    r = subprocess.run([sys.executable, "-m", "transformer_lib.train", "--help"],
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())                  # argparse wraps lines
    assert ("--d-model INT width of every sub-layer (features per position) (default: 512)"
            in text)
    assert "--max-steps INT updates (optimiser steps) to train (0 = no limit) (default: 0)" in text
    assert "--out-dir STR directory of the run's checkpoint" in text
    assert "--amp, --no-amp" in text and "(default: True)" in text
    for f in dataclasses.fields(Recipe):
        assert ("--" + f.name.replace("_", "-") in text
                and f"(default: {getattr(Recipe(), f.name)!r})" in text)


ZERO_IS_A_VALUE = {"seed", "split_seed"}   # 0 is a seed like any other, not a setting for off
UNITS = {"time_budget_s": "seconds", "max_steps": "updates", "warmup_steps": "updates",
         "checkpoint_every": "updates", "log_every": "updates", "eval_every": "epochs",
         "epochs": "passes over the training data", "batch_tokens": "positions",
         "train_pairs": "pairs", "eval_sentences": "sentences", "test_sentences": "sentences",
         "average_last": "epoch snapshots", "keep_snapshots": "epoch snapshots",
         "vocab_size": "tokens", "dist_timeout_s": "seconds", "decode_batch": "hypotheses"}


def test_every_flag_says_what_it_does_its_unit_and_what_0_means():
    """No help line that only repeats its flag (`--out-dir STR out dir`): every field has a comment;
    a count or a duration names its unit; where 0 is allowed, the comment says what 0 means."""
    from transformer_lib.engineering import field_comments
    comments = field_comments(Recipe)
    names = [f.name for f in dataclasses.fields(Recipe)]
    assert [n for n in names if n not in comments] == []
    limits = dict(epochs=1, time_budget_s=1.0, max_steps=1)        # so that each may be 0 alone
    zero_ok = []
    for f in dataclasses.fields(Recipe):
        if FIELD_TYPES[f.type] in (int, float):
            try:
                recipe_from_dict({**limits, f.name: 0})
            except RecipeError:
                continue
            zero_ok.append(f.name)
    assert {"epochs", "time_budget_s", "max_steps", "clip_grad_norm", "seed"} <= set(zero_ok)
    unsaid = [n for n in zero_ok if n not in ZERO_IS_A_VALUE and "0 =" not in comments[n]]
    assert unsaid == [], f"comments that do not say what 0 means: {unsaid}"
    missing_units = {n: u for n, u in UNITS.items() if u not in comments[n]}
    assert missing_units == {}, missing_units


def test_the_amp_help_names_what_each_device_trains_in():
    """bf16 on GPUs of compute capability 8.0+ and on CPUs with bf16 instructions, float16 with a
    scaler on older GPUs, and float32 on a CPU without bf16 (where amp_settings gives no dtype)."""
    from transformer_lib.engineering import field_comments
    amp = field_comments(Recipe)["amp"]
    assert all(word in amp for word in ("bf16", "8.0", "float16", "float32")), amp
    assert "else float16" not in amp


def test_every_field_comment_fits_on_its_line():
    """--help shows the comment after each field (`field_comments`); a comment continued on a line
    of its own would be missing from it."""
    body = inspect.getsource(Recipe).splitlines()[1:]
    continued = [line.strip() for line in body if line.lstrip().startswith("#")
                 and len(line) - len(line.lstrip()) > 4]             # deeper than a field
    assert not continued, f"field comments continued on another line: {continued}"


# --- hardening: numbers that are not numbers, paths checked before the first write ---------------
FLOAT_FIELDS = [f.name for f in dataclasses.fields(Recipe) if f.type == "float"]


@pytest.mark.parametrize("name", FLOAT_FIELDS)
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_every_float_field_must_be_finite(name, bad):
    with pytest.raises(RecipeError, match=rf"^{name} must be a finite number, got -?(nan|inf)$"):
        recipe_from_dict({name: bad})


def test_float_fields_are_all_checked():
    assert {"dropout", "attn_dropout", "ffn_dropout", "peak_lr", "decay_start", "label_smoothing",
            "clip_grad_norm", "time_budget_s", "length_penalty",
            "dist_timeout_s"} == set(FLOAT_FIELDS)


@pytest.mark.parametrize("values, message", [
    ({"peak_lr": 0.0}, "peak_lr must be > 0"),
    ({"clip_grad_norm": -1.0}, "clip_grad_norm must be >= 0"),
    ({"length_penalty": -0.5}, "length_penalty must be >= 0"),
    ({"label_smoothing": 1.0}, r"label_smoothing must be a probability in \[0, 1\)"),
    ({"attn_dropout": -0.1}, r"attn_dropout must be a probability in \[0, 1\)"),
    ({"seed": -1}, r"seed must be in \[0, 2\*\*31\)"),
    ({"out_dir": ""}, "out_dir must name a directory"),
    ({"device": "cuda:x"}, "device must be 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'"),
    ({"time_budget_s": 10 ** 400}, "'time_budget_s' must be of type float"),
])
def test_ranges_name_the_field(values, message):
    with pytest.raises(RecipeError, match=message):
        recipe_from_dict(values)


def test_a_recipe_built_by_hand_is_checked_too():
    import numpy as np

    from transformer_lib.recipe import validate_recipe
    with pytest.raises(RecipeError, match=r"peak_lr must be of type float, got .*float64"):
        # a checkpoint could not hold it
        validate_recipe(dataclasses.replace(Recipe(), peak_lr=np.float64(1e-3)))
    with pytest.raises(RecipeError, match="d_model must be of type int"):
        validate_recipe(dataclasses.replace(Recipe(), d_model=512.0))
    with pytest.raises(RecipeError, match="time_budget_s must be a finite number, got nan"):
        run(dataclasses.replace(Recipe(), time_budget_s=math.nan, epochs=0, max_steps=0))


def test_nan_time_budget_on_the_command_line_stops_at_once(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["--preset", "cpu-tiny", "--time-budget-s", "nan", "--epochs", "0", "--max-steps",
                 "0", "--out-dir", str(out)]) == 2
    assert capsys.readouterr().err == "error: time_budget_s must be a finite number, got nan\n"
    assert not out.exists()


def test_output_paths_are_checked_before_anything_is_written(tmp_path):
    from transformer_lib.recipe import check_output_paths
    afile = tmp_path / "afile"
    afile.write_text("")
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "model.pt").mkdir()
    (tmp_path / "snap").mkdir()
    (tmp_path / "snap" / "snapshots").write_text("")
    cases = [({"out_dir": str(afile)},
              "out_dir .*afile cannot be a directory: it exists and is not a directory"),
             ({"out_dir": str(afile / "run")},
              "cannot be a directory: .*afile exists and is not a directory"),
             ({"results": str(afile / "x.json")},
              "the directory of results .*afile cannot be a directory"),
             ({"results": str(tmp_path)}, "is a directory; give a file name"),
             ({"out_dir": str(tmp_path / "taken")},
              "model.pt is a directory, but the run writes a file"),
             ({"out_dir": str(tmp_path / "snap")}, "snapshots is a file")]
    for changes, message in cases:
        with pytest.raises(RecipeError, match=message):
            check_output_paths(recipe_from_dict({"preset": "cpu-tiny", **changes}))
    check_output_paths(recipe_from_dict({"preset": "cpu-tiny",
                                         "out_dir": str(tmp_path / "a" / "b")}))
    assert not (tmp_path / "a").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_output_directory_without_write_permission(tmp_path):
    from transformer_lib.recipe import check_output_paths
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(RecipeError, match="no write permission on .*locked"):
            check_output_paths(recipe_from_dict({"preset": "cpu-tiny",
                                                 "out_dir": str(locked / "run")}))
    finally:
        locked.chmod(0o700)


def test_preset_note_says_what_cpu_tiny_is_for():
    from transformer_lib.recipe import preset_note
    note = preset_note(dataclasses.replace(preset("cpu-tiny"), out_dir="elsewhere", progress=False))
    assert ("smoke test of the pipeline" in note and "cpu-30min" in note
            and "load_translator" in note)
    # printed right below the run's scores, it must not contradict them: thirty seconds of cpu-tiny
    # score about 10 BLEU on its 100 test sentences, not "near zero"
    assert not re.search(r"near zero|close to zero|BLEU is (about |almost )?0", note), note
    assert preset_note(preset("cpu-30min")) is None and preset_note(recipe_from_dict(TINY)) is None


# --- hardening: the command line never shows a traceback for a failure the user can cause ---------
def _one_error_line(capsys):
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


@pytest.mark.needs_data
def test_user_caused_failures_are_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    import transformer_lib.stages as stages
    afile = tmp_path / "afile"
    afile.write_text("")
    done = tmp_path / "done"
    run(tiny_recipe(done, max_steps=3))
    capsys.readouterr()
    corrupt_tok = tmp_path / "corrupt_tok"
    shutil.copytree(done, corrupt_tok)
    (corrupt_tok / "tokenizer.json").write_text('{"version": "1.0", "trunc')
    no_ckpt = tmp_path / "no_ckpt"
    no_ckpt.mkdir()
    shutil.copy(done / "tokenizer.json", no_ckpt / "tokenizer.json")
    cases = [
        (tiny_flags(afile), "out_dir .*afile cannot be a directory"),
        (tiny_flags(tmp_path / "r1", results=str(afile / "r.json")),
         "the directory of results .* cannot be"),
        (tiny_flags(tmp_path / "r2", results=str(tmp_path)), "is a directory; give a file name"),
        (tiny_flags(tmp_path / "r3", d_model=9, n_heads=3),
         "model cannot be built: d_model must be a positive even"),
        (tiny_flags(tmp_path / "r4", vocab_size=262),
         r"vocab_size=262 does not work for this training text: .*>= \d+"),
        (tiny_flags(tmp_path / "r5", time_budget_s="nan", max_steps=0),
         "time_budget_s must be a finite number"),
        (tiny_flags(corrupt_tok) + ["--resume"],
         "not a valid tokenizers JSON file.*cannot be used without its tokenizer"),
        (tiny_flags(no_ckpt) + ["--resume"],
         "holds no checkpoint: its run stopped before writing one"),
        (["--config", str(tmp_path)], "config file .* does not exist"),
    ]
    for argv, message in cases:
        assert main(argv) == 2, argv
        line = _one_error_line(capsys)
        assert re.search(message, line), (message, line)
    for name in ("r1", "r2", "r3", "r4", "r5"):
        assert not (tmp_path / name).exists(), name
    assert sorted(p.name for p in no_ckpt.iterdir()) == ["tokenizer.json"]
    # a file-system failure in the middle of a run: one line too
    monkeypatch.setattr(stages, "save_checkpoint", lambda *a, **k: (_ for _ in ()).throw(
        OSError(28, "No space left on device")))
    assert main(tiny_flags(tmp_path / "full")) == 2
    assert "[Errno 28] No space left on device" in _one_error_line(capsys)


def test_the_command_line_process_prints_no_traceback(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
           "OMP_NUM_THREADS": "1"}
    for flags in (["--out-dir", str(afile)],
                  ["--d-model", "9", "--n-heads", "3", "--out-dir", str(tmp_path / "x")],
                  ["--peak-lr", "nan"]):
        r = subprocess.run([sys.executable, "-m", "transformer_lib.train", "--preset", "cpu-tiny",
                            *flags],
                           capture_output=True, text=True, timeout=120, env=env)
        assert (r.returncode == 2 and "Traceback" not in r.stderr
                and len(r.stderr.strip().splitlines()) == 1), r.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.needs_data
def test_a_start_that_fails_after_its_first_write_leaves_the_out_dir_as_it_found_it(tmp_path,
                                                                                    monkeypatch,
                                                                                    capsys):
    import transformer_lib.stages as stages
    real = stages.make_schedule

    def failing(recipe, *args):
        assert (Path(recipe.out_dir) / "tokenizer.json").is_file()   # the tokenizer was written
        raise RecipeError("a late check failed")

    monkeypatch.setattr(stages, "make_schedule", failing)
    fresh, existing = tmp_path / "runs" / "fresh", tmp_path / "existing"
    existing.mkdir()
    (existing / "notes.txt").write_text("mine")
    for out in (fresh, existing):
        assert main(tiny_flags(out, max_steps=2)) == 2
        assert "a late check failed" in _one_error_line(capsys)
    assert not (tmp_path / "runs").exists()
    assert [p.name for p in existing.iterdir()] == ["notes.txt"]
    monkeypatch.setattr(stages, "make_schedule", real)
    assert main(tiny_flags(fresh, max_steps=2)) == 0   # the corrected rerun works in the same place
    assert (fresh / "results.json").is_file()


def _poison_after(monkeypatch, at_step):
    import transformer_lib.stages as stages
    real = stages.after_step

    def poisoned(s, limit_steps, step):
        real(s, limit_steps, step)
        if step == at_step:
            with torch.no_grad():
                next(s.model.parameters()).fill_(float("nan"))

    monkeypatch.setattr(stages, "after_step", poisoned)


@pytest.mark.needs_data
@pytest.mark.parametrize("log_every, message", [
    (4, r"training diverged: NaN or infinite weights at step 6 \(.*\); the checkpoint of step 3 is "
        r"kept"),
    (1, r"training diverged: loss became nan at step 5; the checkpoint of step 3 is kept"),
])
def test_a_diverging_run_keeps_its_last_good_checkpoint(tmp_path, monkeypatch, capsys, log_every,
                                                        message):
    """Weights turn NaN after update 4: the checkpoint of step 6 must not be written over the one of
    step 3."""
    _poison_after(monkeypatch, 4)
    out = tmp_path / "run"
    with pytest.raises(FloatingPointError, match=message) as e:
        run(tiny_recipe(out, max_steps=8, log_every=log_every, checkpoint_every=3))
    assert "--peak-lr (now 0.003)" in str(e.value) and "--clip-grad-norm" in str(e.value)
    ckpt = read_checkpoint(out / "checkpoint.pt")
    assert ckpt["step"] == 3 and all(torch.isfinite(t).all() for t in ckpt["model"].values()
                                     if t.is_floating_point())
    assert not (out / "model.pt").exists() and not list(out.glob("*.tmp"))
    capsys.readouterr()
    flags = tiny_flags(tmp_path / "cli", max_steps=8, log_every=log_every, checkpoint_every=3)
    assert main(flags) == 2
    assert re.search(message, _one_error_line(capsys))


@pytest.mark.needs_data
def test_the_run_says_where_its_files_are(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run(tiny_recipe("rel/run", max_steps=2, results="rec.json"))
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"output directory: {tmp_path / 'rel' / 'run'}"
    assert ("wrote checkpoint.pt, tokenizer.json, model.pt, translator.pt, history.json, "
            "translations.json in "
            f"{tmp_path / 'rel' / 'run'}; results record: {tmp_path / 'rec.json'}") in out
    assert "smoke test" not in out                           # not the cpu-tiny model: no note


@pytest.mark.needs_data
def test_a_run_keeps_its_translator_and_the_commands_that_go_on_from_it(tmp_path, monkeypatch):
    """Chapter 18's live cell: the reader's run stays in a folder of theirs, its translator loads
    with load_translator, and the two commands the chapter prints (resume, export) work as
    printed."""
    import shlex

    import torch

    from transformer_lib.data import load_translator
    from transformer_lib.train import reader_commands
    monkeypatch.chdir(tmp_path)
    recipe = dataclasses.replace(preset("cpu-tiny"), out_dir="my-translator/cpu-tiny",
                                 progress=False, max_steps=3, eval_sentences=4, test_sentences=4)
    result = run(recipe)
    assert result.results["wall_seconds"] >= result.results["training_seconds"] > 0
    model, tok, info = load_translator(tmp_path / "my-translator" / "cpu-tiny" / "translator.pt")
    theirs = result.model.state_dict()
    assert all(torch.equal(v, theirs[k].half().float()) for k, v in model.state_dict().items())
    assert tok.vocab_size == result.tokenizer.vocab_size and info["weights"] == "last"
    commands = reader_commands(recipe, "cpu-tiny")
    assert commands["resume"] == ("python -m transformer_lib.train --preset cpu-tiny --out-dir "
                                  "my-translator/cpu-tiny --resume --time-budget-s 60")
    argv = shlex.split(commands["resume"])[3:]
    assert main(argv + ["--max-steps", "5", "--eval-sentences", "4", "--test-sentences", "4",
                        "--no-progress"]) == 0                      # resumed, two updates more
    assert json.loads((tmp_path / "my-translator" / "cpu-tiny" / "results.json").read_text()
                      )["steps"] == 5
    argv = shlex.split(commands["export"])
    assert argv[:3] == ["python", "-m", "transformer_lib.export"]
    assert Path(argv[argv.index("--translator") + 1]).is_file()
    assert argv[argv.index("--out") + 1] == "my-translator/cpu-tiny-web"


def test_report_files_says_what_cpu_tiny_is_for(tmp_path, capsys):
    from transformer_lib.records import report_files
    (tmp_path / "model.pt").write_text("")
    report_files(dataclasses.replace(preset("cpu-tiny"), out_dir=str(tmp_path)))
    out = capsys.readouterr().out
    assert f"wrote model.pt in {tmp_path}; results record: {tmp_path / 'results.json'}" in out
    assert "cpu-tiny is a smoke test of the pipeline" in out and "--preset cpu-30min" in out


def test_the_runs_helpers_take_what_they_use(tmp_path):
    """Issue 24: the schedule, the divergence check, where a run stops and its record work without
    a run (no `RunResult`): each takes the recipe, the model, the step, ... it uses."""
    import transformer_lib.stages as stages
    from transformer_lib.records import report_files, results_record
    from transformer_lib.stages import (
        budget_progress,
        check_weights,
        diverged,
        make_optimizer,
        make_schedule,
        step_limit,
        stop_step,
    )
    for f in (budget_progress, make_optimizer, make_schedule, results_record, diverged,
              check_weights, step_limit, stop_step, stages.warn_if_long_run,
              report_files):
        assert "s" not in inspect.signature(f).parameters, f.__name__
    budget = dataclasses.replace(preset("cpu-30min"), max_steps=100, time_budget_s=60.0)
    model = torch.nn.Linear(2, 2)
    optimizer = make_optimizer(budget, model.parameters())
    schedule = make_schedule(budget, optimizer, lambda updates: 0.0)
    assert type(schedule).__name__ == "BudgetSchedule" and optimizer.param_groups[0]["lr"] > 0
    assert budget_progress(budget, lambda: 30.0, 10) == 0.5          # half the time budget
    assert budget_progress(budget, lambda: 3.0, 80) == 0.8           # most of the update budget
    check_weights(model, 3)
    with torch.no_grad():
        model.weight[0, 0] = float("nan")
    with pytest.raises(FloatingPointError, match=r"NaN or infinite weights at step 7 \(weight\)"):
        check_weights(model, 7)
    assert "the checkpoint of step 5 is kept" in str(diverged(budget, 5, "loss became nan"))
    capped = dataclasses.replace(preset("cpu-tiny"), max_steps=300, out_dir=str(tmp_path))
    assert stop_step(capped, 120, 100, 12.0) == 300 == step_limit(capped, 100)
    assert stop_step(capped, 300, 100, 12.0) == 300                  # finished, but no record yet
    (tmp_path / "results.json").write_text("{}")
    with pytest.raises(RecipeError, match="is finished"):
        stop_step(capped, 300, 100, 12.0)
    test = {"bleu": 1.0, "signature": "sig", "sentences": 3, "sentences_per_s": 2.0}
    record = results_record(capped, {"precision": "float32"}, parameters=10, training_seconds=4.0,
                            steps=8, epochs=2.0, weights="last",
                            history=[{"tokens": 40, "tokens_per_s": 10.0}],
                            val={"loss": 2.0, "bleu_greedy": 1.0, "sentences": 5},
                            test_greedy=test, test_beam=test)
    assert (record["target_tokens_per_s"], record["test_2016_flickr"]["sentences"]) == (10.0, 3)
    assert list(record)[:4] == ["task", "measured", "precision", "recipe"]


def test_recipe_trials_records_are_what_recipe_trials_sh_runs():
    """Each results/tuning-2x2/TRIAL.json (chapter 18 prints them) is the preset as it was then
    (the script's THEN), watched (WATCH), with the flags the script gives TRIAL; trained for the
    budget, from a clean commit or one whose note says why not; with its per-epoch evaluations and
    its validation sweep beside it."""
    root = Path(__file__).resolve().parents[1]
    script = benchmark_script("recipe_trials.sh").read_text()
    trials = dict(re.findall(r'^  \[([\w.\-]+)\]="([^"]*)"', script, re.MULTILINE))
    then, watch = (re.search(rf'^{name}="([^"]*)"', script, re.MULTILINE).group(1).split()
                   for name in ("THEN", "WATCH"))
    records = sorted(p for p in (root / "results" / "tuning-2x2").glob("*.json")
                     if not p.name.endswith((".history.json", ".val-beam.json", ".averages.json")))
    assert len(records) >= 3 and {p.stem for p in records} <= set(trials)
    where = ("progress", "out_dir", "results", *NEW_FIELDS)
    for path in records:
        rec = json.loads(path.read_text())
        expected, _ = parse_args(["--preset", "cpu-30min", "--no-progress", *then, *watch,
                                  *trials[path.stem].split()])
        assert {k: v for k, v in rec["recipe"].items() if k not in where} == {
            k: v for k, v in dataclasses.asdict(expected).items() if k not in where}, path.stem
        assert rec["training_seconds"] <= 1800 and rec["test_2016_flickr"]["sentences"] == 1000
        assert not rec["git_commit"].endswith("-dirty") or rec["git_commit_note"]
        evals = json.loads((path.parent / f"{path.stem}.history.json").read_text())["evals"]
        per_epoch = [e for e in evals if "weights" not in e]
        assert [e["epoch"] for e in per_epoch] == list(range(int(rec["epochs"])))
        sweep = json.loads((path.parent / f"{path.stem}.val-beam.json").read_text())
        assert sweep["split"] == "val" and sweep["sentences"] == 1014


def test_tuning_records_are_what_cpu_tuning_sh_runs():
    """Each results/tuning/TRIAL.json (chapter 18 prints them) is the cpu-30min preset with the
    flags benchmarks/trials/cpu_tuning.sh gives TRIAL, trained for the preset's budget from a clean
    commit,
    with its training log and its validation sweep beside it."""
    root = Path(__file__).resolve().parents[1]
    script = benchmark_script("cpu_tuning.sh").read_text()
    trials = dict(re.findall(r'^  \[(\w+)\]="([^"]*)"$', script, re.MULTILINE))
    records = sorted(p for p in (root / "results" / "tuning").glob("*.json")
                     if not p.name.endswith((".history.json", ".val-beam.json")))
    assert records and len(trials) >= 3
    where = ("progress", "out_dir", "results", *NEW_FIELDS)
    for path in records:
        name = path.name.removesuffix(".json")
        rec = json.loads(path.read_text())
        expected, _ = parse_args(["--preset", "cpu-30min", "--no-progress", *trials[name].split()])
        # the preset when they ran (its THEN, and bfloat16 autocast where the CPU had it)
        expected = dataclasses.replace(expected, **BEFORE_2X2, amp=True)
        assert {k: v for k, v in rec["recipe"].items() if k not in where} == {
            k: v for k, v in dataclasses.asdict(expected).items() if k not in where}, name
        assert rec["training_seconds"] <= 1800 and not rec["git_commit"].endswith("-dirty")
        log = json.loads((path.parent / f"{name}.history.json").read_text())["history"]
        assert log[-1]["step"] == rec["steps"]
        sweep = json.loads((path.parent / f"{name}.val-beam.json").read_text())
        assert sweep["split"] == "val" and sweep["sentences"] == 1014
        assert {(r["beam_size"], r["alpha"]) for r in sweep["rows"]} >= {(1, 0.0), (4, 1.2)}


def test_shutdown_distributed_cannot_hang_the_process(monkeypatch, capsys):
    """The process group is destroyed on the way out, but a destroy that never returns (a known
    rare gloo/torch hang) costs at most `timeout_s` and a warning, not a run that never exits."""
    import threading

    from transformer_lib import engineering
    calls, release = [], threading.Event()
    monkeypatch.setattr(engineering.dist, "is_initialized", lambda: True)
    monkeypatch.setattr(engineering.dist, "destroy_process_group",
                        lambda: calls.append("destroy") or release.wait(30))
    engineering.shutdown_distributed(timeout_s=0.2)
    release.set()
    assert calls == ["destroy"]
    err = capsys.readouterr().err
    assert "warning" in err and "destroy_process_group" in err and "0.2 s" in err
    # a destroy that returns: no warning
    monkeypatch.setattr(engineering.dist, "destroy_process_group", lambda: calls.append("ok"))
    engineering.shutdown_distributed(timeout_s=5)
    assert calls[-1] == "ok" and capsys.readouterr().err == ""
    # nothing to destroy: nothing called
    monkeypatch.setattr(engineering.dist, "is_initialized", lambda: False)
    engineering.shutdown_distributed(timeout_s=5)
    assert calls == ["destroy", "ok"]


def test_the_model_fields_are_the_ones_both_dataclasses_share():
    """model_config passes exactly MODEL_FIELDS from the recipe: a field renamed on one side
    fails there instead of being dropped, and a new shared field must be listed."""
    from transformer_lib.model import TransformerConfig
    from transformer_lib.stages import MODEL_FIELDS, model_config
    shared = {f.name for f in dataclasses.fields(Recipe)} & {
        f.name for f in dataclasses.fields(TransformerConfig)}
    assert set(MODEL_FIELDS) == shared
    config = model_config(recipe_from_dict({"d_model": 16, "n_heads": 2}), 50, pad_id=3)
    assert (config.d_model, config.n_heads, config.pad_id, config.src_vocab_size) == (16, 2, 3, 50)
