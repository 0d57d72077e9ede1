#!/usr/bin/env python3
"""What the tuner's slow-window guard (`tune --calm-wait`, src/search/calm_wait.h) does to its
predictions when the machine turns slow in the middle of a tune.

A slow window is made the way one comes on a shared machine: another process (`collage run`
of a second model on the same threads) starts as the tune begins confirming its chosen
plan's kernels, and stops a few seconds later. Per round, two tunes of the same model from
the same cost DB (every kernel cost known; the graph-level search's plan timings, the
confirmations and the side-by-side times deleted, so each tune times its plans and its
chosen kernels itself, as a cold tune does), one with the guard (default --calm-wait) and
one without (--calm-wait 0), in alternating order; after each, the written plan alone
(`collage run`, three processes, the median of their medians) against its prediction.

  bench/slow_window.py [--model nasnet-a-mobile] [--neighbour resnet50] [--rounds 3]
                       [--neighbour-s 6] [--budget 10] [--threads 2] [--out FILE] [--keep]

Writes a markdown table (default bench/results/slow_window.md). OPENBLAS_CORETYPE is unset,
as in bench/run.sh."""
import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Records a tune times itself once the kernels are known (src/search/plan_records.h).
RETIMED = ("plan", "plan-side-by-side", "confirmation")


def collage(build):
    path = os.path.join(build, "collage")
    if not os.access(path, os.X_OK):
        sys.exit(f"slow_window.py: {path} is not built (cmake --build {build})")
    return path


def zoo(cli, name, work):
    path = os.path.join(work, name + ".onnx")
    subprocess.run([cli, "zoo", name, "-o", path], check=True, capture_output=True)
    return path


def alone_ms(cli, model, plan, threads):
    medians = []
    for _ in range(3):
        out = subprocess.run([cli, "run", model, "--plan", plan, "--threads", str(threads),
                              "--repeat", "60", "--json"], check=True, capture_output=True,
                             text=True).stdout
        medians.append(json.loads(out)["latency_ms"]["median"])
    return statistics.median(medians), medians


def tune_with_neighbour(cli, a, base_db, work, tag, calm_wait):
    db = os.path.join(work, tag + ".db")
    shutil.copy(base_db, db)
    con = sqlite3.connect(db)
    con.execute(f"DELETE FROM costs WHERE backend IN ({','.join('?' * len(RETIMED))})", RETIMED)
    con.commit()
    con.close()
    plan = os.path.join(work, tag + ".json")
    t0 = time.monotonic()
    tune = subprocess.Popen([cli, "tune", a.model_path, "-o", plan, "--budget", str(a.budget),
                             "--threads", str(a.threads), "--cost-db", db, "--calm-wait",
                             str(calm_wait), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    neighbour, started = None, None
    for line in tune.stderr:  # progress: a line at each change of phase (not a terminal)
        if neighbour is None and line.startswith("confirming"):
            started = time.monotonic() - t0
            neighbour = subprocess.Popen(
                ["timeout", str(a.neighbour_s), cli, "run", a.neighbour_path, "--threads",
                 str(a.threads), "--repeat", "1000000"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    result = json.loads(tune.stdout.read())
    if tune.wait() != 0:
        sys.exit(f"slow_window.py: tune {tag} failed")
    if neighbour is not None:
        neighbour.wait()
    time.sleep(1)
    measured, runs = alone_ms(cli, a.model_path, plan, a.threads)
    waited = sum(w["waited_s"] for w in result["slow_windows"])
    slowest = max((w["slowdown"] for w in result["slow_windows"]), default=None)
    return {
        "tag": tag,
        "plan": plan,
        "winner": result["winner"],
        "calm_wait": calm_wait,
        "neighbour_at_s": started,
        "predicted": result["predicted_ms"],
        "side_by_side": result["measured_ms"],
        "alone": measured,
        "alone_runs": runs,
        "error": 100 * (result["predicted_ms"] / measured - 1),
        "waited_s": waited,
        "slowdown": slowest,
        "seconds": result["seconds"],
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="nasnet-a-mobile")
    p.add_argument("--neighbour", default="resnet50")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--neighbour-s", type=float, default=6)
    p.add_argument("--budget", type=float, default=10)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=os.path.join(ROOT, "bench/results/slow_window.md"))
    p.add_argument("--keep", action="store_true", help="keep the plans and cost DBs")
    p.add_argument("--build", default=os.environ.get("BUILD_DIR", os.path.join(ROOT, "build")))
    a = p.parse_args()
    os.environ.pop("OPENBLAS_CORETYPE", None)
    cli = collage(a.build)
    work = tempfile.mkdtemp(prefix="slow_window.")
    a.model_path = zoo(cli, a.model, work)
    a.neighbour_path = zoo(cli, a.neighbour, work)
    base_db = os.path.join(work, "base.db")
    print(f"cold tune of {a.model} (the kernel costs every round starts from)", flush=True)
    subprocess.run([cli, "tune", a.model_path, "-o", os.path.join(work, "base.json"), "--budget",
                    str(a.budget), "--threads", str(a.threads), "--cost-db", base_db, "--json"],
                   check=True, capture_output=True)
    rows = []
    for r in range(a.rounds):
        modes = [("guard", 20), ("off", 0)]
        if r % 2:
            modes.reverse()
        for name, calm_wait in modes:
            row = tune_with_neighbour(cli, a, base_db, work, f"{name}{r + 1}", calm_wait)
            rows.append(row)
            print(f"  {row['tag']}: predicted {row['predicted']:.3f} ms, side by side "
                  f"{row['side_by_side']:.3f}, alone {row['alone']:.3f} "
                  f"({row['error']:+.1f} %), waited {row['waited_s']:.1f} s", flush=True)
    # Each written plan once more, all after the tunes: a plan slower alone than the others
    # here was chosen worse, not timed in a slow minute after its tune.
    for row in rows:
        row["alone_end"], _ = alone_ms(cli, a.model_path, row["plan"], a.threads)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Slow windows during a tune: the guard against none",
        "",
        f"Generated by `bench/slow_window.py` on {when}: {a.model}, {a.threads} threads, "
        f"budget {a.budget:g} s; the neighbour `collage run {a.neighbour}` for "
        f"{a.neighbour_s:g} s from the tune's first confirmation. 'alone' is the written "
        "plan in `collage run` right after (3 processes of 60 runs, median of medians); "
        "error = predicted / alone - 1; 'alone, at the end' is the same again after all the "
        "tunes (a plan slower there too was chosen worse). 'waited' is what the guard waited "
        "in all, 'slowdown' the chosen plan's reading over its calm time when it began "
        "waiting; 'written' the plan the tune wrote.",
        "",
        "| round | --calm-wait | written | predicted ms | side by side ms | alone ms | error | "
        "alone, at the end | waited s | slowdown | tune s |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        slowdown = f"{row['slowdown']:.2f}x" if row["slowdown"] else "-"
        lines.append(f"| {row['tag']} | {row['calm_wait']} | {row['winner']} | "
                     f"{row['predicted']:.3f} | {row['side_by_side']:.3f} | {row['alone']:.3f} | "
                     f"{row['error']:+.1f} % | {row['alone_end']:.3f} | {row['waited_s']:.1f} | "
                     f"{slowdown} | {row['seconds']:.1f} |")
    for name, calm_wait in (("with the guard", 20), ("without", 0)):
        errors = [abs(r["error"]) for r in rows if r["calm_wait"] == calm_wait]
        lines.append("")
        lines.append(f"{name}: |error| median {statistics.median(errors):.1f} %, largest "
                     f"{max(errors):.1f} %, over 10 % in {sum(e > 10 for e in errors)} of "
                     f"{len(errors)}")
    with open(a.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {a.out}")
    if a.keep:
        print(f"plans and cost DBs kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
