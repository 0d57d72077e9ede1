#!/usr/bin/env python3
"""Scale-out of measurement (issue 19): `collage tune --distributed` with N `collage
measure-worker` processes on one PostgreSQL server this script starts in a temporary folder
(tests/costdb/pg_server.py: initdb + pg_ctl, a Unix socket, as `nobody` when run as root).

1. Real runs: for each N in --workers, a fresh database, N workers (`--threads 1`), one
   tune of --model (`--threads 1`, op-level, every job left to the workers). Throughput =
   jobs / (last job's end - first job's start), from the workers' per-job lines, which also
   give each job's measuring time and its queue overhead (claim + store).
2. Synthetic load: build/bench/bench_costdb_queue claims and completes jobs with 1..16
   clients and no measuring: the jobs a second the database sustains, and a job's queue
   operations when it is busy.
3. Simulation up to 64 machines: the recorded per-job measuring times (cycled to
   --sim-jobs jobs), each job first passing the database as one FIFO server with service
   time 1 / (the synthetic peak jobs/s), plus the client-side rest of the measured queue
   overhead. Checked against the real runs at N = 1, 2.

Writes scale-out.json and scale-out.svg into --out and prints the tables (markdown).
  bench/scale_out.py --cli build/collage --queue-bench build/bench/bench_costdb_queue
"""
import argparse
import heapq
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "costdb"))
import pg_server  # noqa: E402

JOB_LINE = re.compile(r"^job \S+ (\S+) x\d+ \((\d+) request bytes\): .*; claim ([\d.]+) ms, "
                      r"measure ([\d.]+) ms, store ([\d.]+) ms, ended ([\d.]+)$")


def real_run(cli, pg, model, backends, workers, tag):
    db = f"real_{tag}_{workers}"
    url = pg.create_database(db)
    subprocess.run([cli, "costs", "stats", "--cost-db", url], check=True, capture_output=True)
    procs = [subprocess.Popen([cli, "measure-worker", "--cost-db", url, "--threads", "1",
                               "--verbose", "--json"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(workers)]
    with tempfile.TemporaryDirectory() as tmp:
        tune = subprocess.run([cli, "tune", model, "-o", os.path.join(tmp, "plan.json"),
                               "--cost-db", url, "--distributed", "--claim-timeout", "3600",
                               "--optimizer", "op-level", "--budget", "0", "--threads", "1",
                               "--backends", backends, "--json"], capture_output=True, text=True)
    if tune.returncode != 0:
        raise RuntimeError(tune.stderr)
    jobs, summaries = [], []
    for p in procs:
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate()
        summaries.append(json.loads(out))
        for line in err.splitlines():
            m = JOB_LINE.match(line)
            if m:
                claim, measure, store, ended = map(float, m.group(3, 4, 5, 6))
                jobs.append({"backend": m.group(1), "request_bytes": int(m.group(2)),
                             "claim_ms": claim, "measure_ms": measure, "store_ms": store,
                             "start": ended - (claim + measure + store) / 1000, "end": ended})
    span = max(j["end"] for j in jobs) - min(j["start"] for j in jobs)
    t = json.loads(tune.stdout)
    assert t["measured"] == 0 and t["measured_elsewhere"] == len(jobs), (t, len(jobs))
    return {"workers": workers, "jobs": len(jobs), "span_s": span, "jobs_per_s": len(jobs) / span,
            "queue_ms_p50": statistics.median(j["claim_ms"] + j["store_ms"] for j in jobs),
            "queue_ms_mean": statistics.mean(j["claim_ms"] + j["store_ms"] for j in jobs),
            "measure_ms_mean": statistics.mean(j["measure_ms"] for j in jobs),
            "measure_ms_p50": statistics.median(j["measure_ms"] for j in jobs),
            "request_bytes_mean": statistics.mean(j["request_bytes"] for j in jobs),
            "per_worker": [s["measured"] for s in summaries], "job_list": jobs}


def synthetic(bench, pg, tag, request_bytes, clients, jobs):
    url = pg.create_database(f"synthetic_{tag}")
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run([bench, "--cost-db", url, "--clients", ",".join(map(str, clients)),
                        "--jobs", str(jobs), "--request-bytes", str(int(request_bytes)),
                        "--json", out.name], check=True, capture_output=True)
        return json.load(open(out.name))


def simulate(measure_ms, machines, jobs, db_service_ms, client_ms):
    """Makespan (s) of `jobs` jobs (measure_ms cycled) on `machines` workers, each job
    passing the database (one FIFO server, db_service_ms a job) then client_ms more of
    queue overhead, then its measuring."""
    db_free = 0.0
    ready = [(0.0, m) for m in range(machines)]
    heapq.heapify(ready)
    end = 0.0
    for i in range(jobs):
        t, m = heapq.heappop(ready)
        start = max(t, db_free)
        db_free = start + db_service_ms
        done = db_free + client_ms + measure_ms[i % len(measure_ms)]
        end = max(end, done)
        heapq.heappush(ready, (done, m))
    return end / 1000


def svg(curves, path):
    """Jobs/s against machines (log-log), one polyline per curve (dots: the real runs), and
    each curve's database capacity (synthetic load, its request size) dashed."""
    w, h, left, bottom, top, right = 640, 400, 70, 50, 20, 180
    xs = [1, 2, 4, 8, 16, 32, 64]
    ys = [v for c in curves for _, v in c["points"] + c["measured"]] + [
        c["capacity"] for c in curves]
    import math
    ylo, yhi = 10 ** math.floor(math.log10(min(ys))), 10 ** math.ceil(math.log10(max(ys)))

    def px(x):
        return left + (w - left - right) * math.log2(x) / 6

    def py(y):
        return h - bottom - (h - top - bottom) * (math.log10(y) - math.log10(ylo)) / (
            math.log10(yhi) - math.log10(ylo))

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           'font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>']
    for x in xs:
        out.append(f'<line x1="{px(x):.1f}" y1="{top}" x2="{px(x):.1f}" y2="{h - bottom}" '
                   'stroke="#ddd"/>')
        out.append(f'<text x="{px(x):.1f}" y="{h - bottom + 16}" text-anchor="middle">{x}</text>')
    y = ylo
    while y <= yhi:
        out.append(f'<line x1="{left}" y1="{py(y):.1f}" x2="{w - right}" y2="{py(y):.1f}" '
                   'stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{y:g}</text>')
        y *= 10
    out.append(f'<text x="{(left + w - right) / 2}" y="{h - 12}" text-anchor="middle">'
               'measuring machines (workers)</text>')
    out.append(f'<text x="16" y="{(top + h - bottom) / 2}" text-anchor="middle" '
               f'transform="rotate(-90 16 {(top + h - bottom) / 2})">jobs measured per second'
               '</text>')
    colours = ["#1f77b4", "#2ca02c", "#9467bd"]
    for i, c in enumerate(curves):
        cap = c["capacity"]
        out.append(f'<line x1="{left}" y1="{py(cap):.1f}" x2="{w - right}" y2="{py(cap):.1f}" '
                   f'stroke="{colours[i]}" stroke-dasharray="6 4"/>')
        out.append(f'<text x="{w - right + 6}" y="{py(cap) + 4:.1f}" fill="{colours[i]}">'
                   f'database {cap:.0f} jobs/s</text>')
        pts = " ".join(f"{px(x):.1f},{py(v):.1f}" for x, v in c["points"])
        out.append(f'<polyline points="{pts}" fill="none" stroke="{colours[i]}" '
                   'stroke-width="2"/>')
        for x, v in c.get("measured", []):
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(v):.1f}" r="4" fill="{colours[i]}"/>')
        last_x, last_v = c["points"][-1]
        out.append(f'<text x="{w - right + 6}" y="{py(last_v) + 4 + 14 * i:.1f}" '
                   f'fill="{colours[i]}">{c["label"]}</text>')
    out.append("</svg>")
    open(path, "w").write("\n".join(out) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cli", default="build/collage")
    ap.add_argument("--queue-bench", default="build/bench/bench_costdb_queue")
    ap.add_argument("--models", default="mobilenet-v2,mobilenet-tiny",
                    help="zoo models: the first is the main workload")
    ap.add_argument("--backends", default="onednn,xnnpack")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--clients", default="1,2,4,8,16")
    ap.add_argument("--synthetic-jobs", type=int, default=2000)
    ap.add_argument("--sim-jobs", type=int, default=2000)
    ap.add_argument("--out", default="bench/results")
    a = ap.parse_args()
    cli = os.path.abspath(a.cli)
    if pg_server.missing_reason():
        sys.exit(pg_server.missing_reason())
    # The server's own defaults (fsync, synchronous_commit on); collage's sessions commit
    # asynchronously (docs/DESIGN.md).
    pg = pg_server.PostgresServer().start(settings=("fsync=on", "max_connections=200"))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            runs = {}
            for name in a.models.split(","):
                model = os.path.join(tmp, name + ".onnx")
                subprocess.run([cli, "zoo", name, "-o", model], check=True, capture_output=True)
                runs[name] = [real_run(cli, pg, model, a.backends, int(n), name.replace("-", "_"))
                              for n in a.workers.split(",")]
        # The database under synthetic load, with each model's request size.
        synth = {name: synthetic(os.path.abspath(a.queue_bench), pg, name.replace("-", "_"),
                                 rs[0]["request_bytes_mean"],
                                 [int(c) for c in a.clients.split(",")], a.synthetic_jobs)
                 for name, rs in runs.items()}
    finally:
        pg.stop()
    machines = [1, 2, 4, 8, 16, 32, 64]
    curves, table, capacities = [], [], {}
    for name, rs in runs.items():
        capacity = max(s["jobs_per_s"] for s in synth[name])
        capacities[name] = capacity
        db_service_ms = 1000 / capacity
        # The rest of the queue overhead one worker saw (round trips, its own side).
        client_ms = max(0.0, rs[0]["queue_ms_p50"] - db_service_ms)
        measure = [j["measure_ms"] for j in sorted(rs[0]["job_list"], key=lambda j: j["start"])]
        points = [(m, a.sim_jobs / simulate(measure, m, a.sim_jobs, db_service_ms, client_ms))
                  for m in machines]
        sim_at = dict(points)
        curves.append({"label": f"{name} ({statistics.mean(measure):.0f} ms/job)",
                       "points": points, "measured": [(r["workers"], r["jobs_per_s"]) for r in rs],
                       "capacity": capacity})
        for m, rate in points:
            table.append({"model": name, "machines": m, "jobs_per_s": rate,
                          "speedup": rate / sim_at[1], "db_utilisation": rate / capacity,
                          "db_service_ms": db_service_ms, "client_ms": client_ms})
    os.makedirs(a.out, exist_ok=True)
    for rs in runs.values():
        for r in rs:
            r["job_list"] = [{k: j[k] for k in ("backend", "measure_ms", "claim_ms", "store_ms")}
                             for j in r["job_list"]]
    json.dump({"real": runs, "synthetic": synth, "capacity_jobs_per_s": capacities,
               "simulated": table}, open(os.path.join(a.out, "scale-out.json"), "w"), indent=1)
    svg(curves, os.path.join(a.out, "scale-out.svg"))

    print("## Real runs (PostgreSQL on this machine, --threads 1 workers)\n")
    print("| model | workers | jobs | span s | jobs/s | measure ms (mean) | queue ms p50 | "
          "queue ms mean | jobs per worker |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, rs in runs.items():
        for r in rs:
            print(f"| {name} | {r['workers']} | {r['jobs']} | {r['span_s']:.2f} | "
                  f"{r['jobs_per_s']:.1f} | {r['measure_ms_mean']:.1f} | {r['queue_ms_p50']:.2f} |"
                  f" {r['queue_ms_mean']:.2f} | {r['per_worker']} |")
    print("\n## Synthetic load (no measuring)\n")
    print("| requests of | clients | jobs/s | claim p50 ms | claim p99 ms | store p50 ms | "
          "store p99 ms | publish jobs/s |")
    print("|---|---|---|---|---|---|---|---|")
    for name, rows in synth.items():
        size = runs[name][0]["request_bytes_mean"]
        for s in rows:
            print(f"| {name} ({size / 1000:.0f} kB) | {s['clients']} | {s['jobs_per_s']:.0f} | "
                  f"{s['claim_ms_p50']:.2f} | {s['claim_ms_p99']:.2f} | {s['store_ms_p50']:.2f} |"
                  f" {s['store_ms_p99']:.2f} | {s['publish_jobs_per_s']:.0f} |")
    print("\n## Simulated\n")
    print("| model | machines | jobs/s | speedup | database busy |")
    print("|---|---|---|---|---|")
    for row in table:
        print(f"| {row['model']} | {row['machines']} | {row['jobs_per_s']:.1f} | "
              f"{row['speedup']:.1f}x | {100 * row['db_utilisation']:.0f} % |")
    for name, cap in capacities.items():
        row = next(r for r in table if r["model"] == name)
        print(f"\n{name}: database {cap:.0f} jobs/s ({row['db_service_ms']:.2f} ms a job), "
              f"client-side rest of the queue overhead {row['client_ms']:.2f} ms")


if __name__ == "__main__":
    main()
