"""How long each exercise's solution notebook runs on a CPU: every code cell timed.

    python benchmarks/experiments/exercise_times.py --threads 2 \
        --json results/exercise-times-cpu.json \
        --page book/exercises.md

Runs the solution notebooks (notebooks/exercises/solutions/, or those named with --notebooks) one
after the other, each top to bottom in a fresh Jupyter kernel of this Python, on the CPU (CUDA is
hidden from the kernel) with --threads torch threads, and records the wall-clock seconds of every
code cell, the slowest cell and the whole notebook (kernel start included), with the machine, its
load average before and after (near 0: nothing else ran; near the core count or above: the cores
were shared, and the times are upper bounds), the commit and the date. Run it with the machine
otherwise idle. A cell that fails stops the run, and nothing is written.

With --page, it writes the run-time table of book/exercises.md, the lines between the page's
"% exercise-times: begin" and "% exercise-times: end" comments, from the record
(`--from-record FILE` writes it from a record made before, without measuring), so that the page
quotes the record and nothing is typed by hand; tests/test_exercise_times.py checks that they
agree.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import time
from pathlib import Path

import nbformat
import torch
from nbclient import NotebookClient

from transformer_lib.benchmarking import device_name
from transformer_lib.engineering import git_commit, provenance, write_json

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = ROOT / "notebooks" / "exercises" / "solutions"
BEGIN, END = "% exercise-times: begin", "% exercise-times: end"
PROBE = "import sys, torch\nprint(torch.get_num_threads(), sys.executable)"


def relative(path: Path) -> str:
    path = path.resolve()
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


def time_notebook(path: Path, threads: int, timeout_s: float) -> tuple[dict, int]:
    """One notebook run top to bottom in a fresh kernel: the seconds of every code cell, the
    slowest cell and the whole run; and the kernel's torch thread count."""
    nb = nbformat.read(path, as_version=4)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "CUDA_VISIBLE_DEVICES": "", "MPLBACKEND": "Agg"}
    client = NotebookClient(nb, timeout=timeout_s, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    cells = []
    start = time.perf_counter()
    with client.setup_kernel(env=env):
        probe = nbformat.v4.new_code_cell(PROBE)        # (execute_cell stores the cell it
        nb.cells.append(probe)                           # ran at its index: run it at the end)
        client.execute_cell(probe, len(nb.cells) - 1, store_history=False)
        kernel_threads = int(nb.cells.pop().outputs[0]["text"].split()[0])
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            t0 = time.perf_counter()
            client.execute_cell(cell, index)          # raises CellExecutionError on an error
            first = next((line for line in cell.source.splitlines()
                          if line.strip() and not line.startswith("#|")), "")
            cells.append({"index": index, "id": cell.get("id"), "first_line": first[:80],
                          "seconds": time.perf_counter() - t0})
    run = {"path": relative(path),
           "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
           "seconds": time.perf_counter() - start, "cells": cells,
           "slowest": max(cells, key=lambda c: c["seconds"]) if cells else None}
    return run, kernel_threads


def seconds(s: float) -> str:
    return f"{s:.0f} s" if s >= 1 else "under 1 s"


def edited_since(record: dict) -> list[str]:
    """The exercises whose solution notebook is no longer the file the record timed (its SHA-256
    differs, or it is gone)."""
    out = []
    for run in record["notebooks"]:
        path = ROOT / run["path"]
        if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != run["sha256"]:
            out.append(re.match(r"ex(\d+)_", path.name).group(1))
    return out


def render(record: dict) -> str:
    """The page's sentence on how the run times were measured, and their table, from a record and
    the solution notebooks as they are now (which of them were edited after it)."""
    load, n = record["load_average_before"][0], record["kernel_threads"]
    rows = ["| exercise | its slowest cell | the whole notebook |", "|---|---:|---:|"]
    for run in record["notebooks"]:
        number = re.match(r"ex(\d+)_", Path(run["path"]).name).group(1)
        rows.append(f"| {number} | {seconds(run['slowest']['seconds'])} | "
                    f"{seconds(run['seconds'])} |")
    edited = edited_since(record)
    if len(edited) == len(record["notebooks"]) > 1:
        which = "every one of them has"
    else:
        which = (f"exercise{'s' if len(edited) > 1 else ''} "
                 + " and ".join([", ".join(edited[:-1]), edited[-1]] if len(edited) > 1
                                else edited)
                 + "'s notebook" * (len(edited) == 1) + (" have" if len(edited) > 1 else " has"))
    return "\n".join([
        "How long each solution notebook runs, top to bottom in a fresh kernel, measured by "
        "`benchmarks/experiments/exercise_times.py` on the CPU with "
        f"{n} thread{'s' if n > 1 else ''} "
        f"({record['cpu']}; torch {record['torch']}; {record['date'][:10]}; "
        "`results/exercise-times-cpu.json`). The machine's load average was "
        f"{load:.1f} when it started: "
        + ("nothing else was running. " if load < 0.5 else
           "other work shared the cores, so these times are upper bounds. ")
        + "The whole notebook includes starting the kernel and importing torch. "
        + f"The times are of the notebooks at commit {record['git_commit'][:7]}"
        + (f"; {which} been edited since, so a run now may differ." if edited else "."),
        "", *rows])


def page_block(text: str) -> str:
    "The lines between the page's two exercise-times comments ('' when there are none)."
    lines = text.split("\n")
    if lines.count(BEGIN) != 1 or lines.count(END) != 1 or lines.index(BEGIN) > lines.index(END):
        raise ValueError(f"the page needs one line {BEGIN!r} and, after it, one line {END!r}")
    return "\n".join(lines[lines.index(BEGIN) + 1:lines.index(END)]).strip("\n")


def write_page(path: Path, record: dict) -> None:
    text = path.read_text()
    old = page_block(text)                                   # checks the markers
    head, _, rest = text.partition(BEGIN + "\n")
    _, _, tail = rest.partition(END)
    path.write_text(f"{head}{BEGIN}\n{render(record)}\n{END}{tail}")
    assert page_block(path.read_text()) == render(record), old


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--notebooks", nargs="+", type=Path,
                   help="notebooks to time (default: every exN_*_solution.ipynb in "
                        "notebooks/exercises/solutions, in order)")
    p.add_argument("--threads", type=int, default=torch.get_num_threads(),
                   help="torch threads in the kernel (default: this machine's default, "
                        f"{torch.get_num_threads()})")
    p.add_argument("--timeout-s", type=float, default=900.0, help="the longest a cell may run")
    p.add_argument("--json", help="write the record to this file")
    p.add_argument("--page", type=Path, help="write the run-time table of this page (book/"
                   "exercises.md) from the record")
    p.add_argument("--from-record", type=Path,
                   help="with --page: a record made before; nothing is measured")
    args = p.parse_args(argv)
    if args.threads < 1:
        p.error(f"--threads must be >= 1, got {args.threads}")
    if args.from_record:
        if not args.page:
            p.error("--from-record needs --page")
        record = json.loads(args.from_record.read_text())
        write_page(args.page, record)
        return record
    paths = args.notebooks or sorted(SOLUTIONS.glob("ex*_solution.ipynb"))
    torch.set_num_threads(args.threads)
    record = {**provenance(torch.device("cpu"), 1, git_commit()),
              "command_line": list(sys.argv[1:] if argv is None else argv),
              "threads": args.threads, "load_average_before": list(os.getloadavg()),
              "notebooks": []}
    threads_seen = set()
    for path in paths:
        run, kernel_threads = time_notebook(Path(path), args.threads, args.timeout_s)
        threads_seen.add(kernel_threads)
        record["notebooks"].append(run)
        print(f"{run['path']}: {run['seconds']:.1f} s, the slowest cell [{run['slowest']['index']}]"
              f" {run['slowest']['seconds']:.1f} s ({run['slowest']['first_line']})")
    record["load_average_after"] = list(os.getloadavg())
    (record["kernel_threads"],) = threads_seen
    record["device"] = device_name(torch.device("cpu"))
    if args.json:
        write_json(args.json, record)
    if args.page:
        write_page(args.page, record)
    return record


if __name__ == "__main__":
    main()
