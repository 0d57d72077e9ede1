"""Several `collage tune` processes started at once on one SQLite cost database, with
busy-loop processes keeping every core loaded (issue 21: under load, a tuner opening the
file while another created it moved the valid database aside as "corrupt").

One round = N tuners at once on the same model and database. A "fresh" round starts from
no file; an "existing" round from a database one tune already filled for fewer backends, so
the N tuners open a populated WAL file at once and add rows. After each round:
- every tune exited 0, and no `*.unusable-*` file appeared;
- nothing was lost: each tuner's candidates were all either measured by it, found in the
  database, or measured meanwhile by another process, and a further tune of the same
  model measures nothing;
- nothing was measured twice: the kernels the N tuners measured add up to the kernel rows
  the round added (the database keeps the first record of a key, so a second measurement
  of one key would leave the sum above the row count).

Run directly for long runs: `stress.py --cli build/collage --rounds 30`.
"""
import argparse
import glob
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time

# Record kinds that are not one kernel's cost (src/search/plan_records.h).
NOT_KERNELS = ("plan", "plan-side-by-side", "step-overhead", "stage-overhead", "copy",
               "confirmation")
MODEL = "mobilenet-tiny"
FEW_BACKENDS = "onednn"
MORE_BACKENDS = "onednn,xnnpack"


def tune_command(cli, model, db, out, backends):
    # --calm-wait 0: the load is the test's own doing, and a tuner waiting for it to go
    # would only wait out its bound.
    return [cli, "tune", model, "-o", out, "--cost-db", db, "--optimizer", "op-level",
            "--budget", "0", "--threads", "1", "--backends", backends, "--json",
            "--calm-wait", "0"]


def kernel_rows(db):
    con = sqlite3.connect(db, timeout=60)
    try:
        marks = ",".join("?" * len(NOT_KERNELS))
        return con.execute(f"SELECT count(*) FROM costs WHERE backend NOT IN ({marks})",
                           NOT_KERNELS).fetchone()[0]
    finally:
        con.close()


class BusyLoops:
    """`count` processes spinning on the CPU for as long as the context lasts."""

    def __init__(self, count):
        self.count = count
        self.procs = []

    def __enter__(self):
        for _ in range(self.count):
            self.procs.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
            p.wait()


def one_round(cli, model, workdir, tuners, existing):
    """Runs one round in a new folder under `workdir`; returns a list of problems (empty when
    the round passed)."""
    folder = tempfile.mkdtemp(prefix="round-", dir=workdir)
    db = os.path.join(folder, "costs.db")
    problems = []
    before = 0
    if existing:
        seed = subprocess.run(tune_command(cli, model, db, os.path.join(folder, "seed.json"),
                                           FEW_BACKENDS), capture_output=True, text=True)
        if seed.returncode != 0:
            return [f"seeding tune failed: {seed.stderr[-2000:]}"]
        before = kernel_rows(db)
    procs = [subprocess.Popen(tune_command(cli, model, db, os.path.join(folder, f"p{i}.json"),
                                           MORE_BACKENDS),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(tuners)]
    reports = []
    for i, p in enumerate(procs):
        out, err = p.communicate()
        if p.returncode != 0:
            problems.append(f"FAILED TUNE: tuner {i} exited {p.returncode}: {err[-2000:]}")
            continue
        reports.append(json.loads(out))
    aside = glob.glob(db + ".unusable-*")
    if aside:
        problems.append(f"MOVED ASIDE: {aside}")
    if problems:
        return problems
    for i, r in enumerate(reports):
        accounted = r["measured"] + r["cache_hits"] + r.get("measured_elsewhere", 0)
        if accounted != r["candidates"]:
            problems.append(f"UNACCOUNTED: tuner {i}: {r['candidates']} candidates but {r['measured']} "
                            f"measured + {r['cache_hits']} cache hits + "
                            f"{r.get('measured_elsewhere', 0)} measured elsewhere")
    added = kernel_rows(db) - before
    measured = sum(r["measured"] for r in reports)
    if measured != added:
        problems.append(f"MEASURED TWICE: the tuners measured {measured} kernels for {added} new rows "
                        f"({[r['measured'] for r in reports]})")
    check = subprocess.run(tune_command(cli, model, db, os.path.join(folder, "check.json"),
                                        MORE_BACKENDS), capture_output=True, text=True)
    if check.returncode != 0:
        problems.append(f"FAILED TUNE: the checking tune failed: {check.stderr[-2000:]}")
    elif json.loads(check.stdout)["measured"] != 0:
        problems.append(f"LOST: a later tune measured {json.loads(check.stdout)['measured']} "
                        "kernels again: rows were lost")
    return problems


def stress(cli, workdir, rounds, tuners=4, busy=None, log=print, kinds=("fresh", "existing")):
    """Alternates fresh and existing rounds; returns {round: problems} of the failed ones."""
    model = os.path.join(workdir, MODEL + ".onnx")
    if not os.path.exists(model):
        subprocess.run([cli, "zoo", MODEL, "-o", model], check=True, capture_output=True)
    failed = {}
    with BusyLoops(busy if busy is not None else os.cpu_count()):
        for k in range(rounds):
            existing = kinds[k % len(kinds)] == "existing"
            t0 = time.monotonic()
            problems = one_round(cli, model, workdir, tuners, existing)
            log(f"round {k} ({'existing' if existing else 'fresh'} file): "
                f"{'FAILED' if problems else 'ok'} in {time.monotonic() - t0:.1f} s")
            for p in problems:
                log("  " + p)
            if problems:
                failed[k] = problems
    return failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cli", required=True)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--tuners", type=int, default=4)
    ap.add_argument("--busy", type=int, default=None, help="busy loops (default: one per core)")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--kinds", default="fresh,existing", help="round kinds, alternating")
    a = ap.parse_args()
    workdir = a.workdir or tempfile.mkdtemp(prefix="collage-costdb-stress-")
    t0 = time.monotonic()
    failed = stress(os.path.abspath(a.cli), workdir, a.rounds, a.tuners, a.busy,
                    kinds=a.kinds.split(","))
    print(f"{len(failed)} of {a.rounds} rounds failed ({time.monotonic() - t0:.0f} s)")
    for kind in ("FAILED TUNE", "MOVED ASIDE", "LOST", "UNACCOUNTED", "MEASURED TWICE"):
        n = sum(any(p.startswith(kind) for p in ps) for ps in failed.values())
        print(f"  rounds with {kind.lower()}: {n}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
