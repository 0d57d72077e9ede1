#!/usr/bin/python3
"""Helpers for bench/run.sh (standard library only).

  report.py peak --lib libopenblas.so.0 --threads N --out FILE.json
      this machine's sgemm peak: OpenBLAS cblas_sgemm on N threads, square sizes, best GFLOP/s.
  report.py summarize WORK_DIR --out-dir bench/results
      reads WORK_DIR/machine.json and WORK_DIR/<model>/*.json (written by run.sh), writes
      README.md (Markdown table) and speedups.svg (bar chart) under --out-dir.
"""
import argparse
import math
import ctypes
import glob
import html
import json
import os
import random
import sys
import time


# ---------------------------------------------------------------------------- GEMM peak
def gemm_peak(lib_path, threads, sizes=(256, 512, 1024, 2048), budget_s=4.0):
    lib = ctypes.CDLL(lib_path)
    if hasattr(lib, "openblas_set_num_threads"):
        lib.openblas_set_num_threads(threads)
    corename = ""
    if hasattr(lib, "openblas_get_corename"):
        lib.openblas_get_corename.restype = ctypes.c_char_p
        corename = lib.openblas_get_corename().decode()
    config = ""
    if hasattr(lib, "openblas_get_config"):
        lib.openblas_get_config.restype = ctypes.c_char_p
        config = lib.openblas_get_config().decode()
    sgemm = lib.cblas_sgemm
    P = ctypes.POINTER(ctypes.c_float)
    sgemm.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_float, P, ctypes.c_int, P, ctypes.c_int,
                      ctypes.c_float, P, ctypes.c_int]
    row_major, no_trans = 101, 111
    rng = random.Random(1)
    results = []
    for n in sizes:
        buf = (ctypes.c_float * (n * n))
        a, b, c = buf(), buf(), buf()
        for i in range(0, n * n, max(1, n * n // 4096)):  # a few non-zeros; speed is data-blind
            a[i] = rng.uniform(-1, 1)
            b[i] = rng.uniform(-1, 1)
        flops = 2.0 * n * n * n
        sgemm(row_major, no_trans, no_trans, n, n, n, 1.0, a, n, b, n, 0.0, c, n)  # warm-up
        best = float("inf")
        start = time.perf_counter()
        reps = 0
        while reps < 3 or (time.perf_counter() - start < budget_s / len(sizes) and reps < 50):
            t0 = time.perf_counter()
            sgemm(row_major, no_trans, no_trans, n, n, n, 1.0, a, n, b, n, 0.0, c, n)
            best = min(best, time.perf_counter() - t0)
            reps += 1
        results.append({"n": n, "best_s": best, "gflops": flops / best / 1e9, "reps": reps})
    peak = max(r["gflops"] for r in results)
    return {"peak_gflops": peak, "sizes": results, "threads": threads, "corename": corename,
            "openblas_config": config, "lib": lib_path}


# ---------------------------------------------------------------------------- summary
def load_json_lines(path):
    """All JSON objects in a file (one per line); [] when missing or unreadable."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    out.append(json.loads(line))
    except (OSError, ValueError):
        pass
    return out


def median(xs):
    s = sorted(xs)
    return s[len(s) // 2] if s else None  # upper median, as `collage bench` prints



def variant_choices(group):
    """The (backend, variant) pairs a plan group uses: one, or one per part of a composed
    variant plus the default where the parts leave nodes."""
    backend, variant = group["backend"], group.get("variant", "")
    if "@" not in variant:
        return {(backend, variant)}
    names, covered = set(), set()
    for part in variant.split(";"):
        name, nodes = part.split("@", 1)
        names.add(name)
        covered.update(nodes.split(","))
    if len(covered) < len(group.get("nodes", [])):
        names.add("")
    return {(backend, name) for name in names}

def model_summary(model_dir):
    meta = (load_json_lines(os.path.join(model_dir, "meta.json")) or [{}])[0]
    plans = {}  # name -> samples over every round
    untimed = set()  # plans `collage bench` ran once only (far slower than the fastest)
    order = []
    predicted = None
    for path in sorted(glob.glob(os.path.join(model_dir, "collage_*.json"))):
        for run in load_json_lines(path):
            for p in run.get("plans", []):
                if p["name"] not in plans:
                    plans[p["name"]] = []
                    order.append(p["name"])
                plans[p["name"]].extend(p.get("samples", []))
                if p.get("timed") is False:
                    untimed.add(p["name"])
                if p.get("predicted_ms") is not None:
                    predicted = p["predicted_ms"]
    ort_samples, ort_version = [], None
    for path in sorted(glob.glob(os.path.join(model_dir, "ort_*.json"))):
        if os.path.basename(path) == "ort_check.json":
            continue
        for run in load_json_lines(path):
            ort_samples.extend(run.get("samples", []))
            ort_version = run.get("ort_version", ort_version)
    # The tuned plan alone in its own process (`collage run --json`), as ORT is timed; and
    # the same with every region's steps one after another (COLLAGE_ONEDNN_LANES=off).
    def run_samples(pattern):
        samples = []
        for path in sorted(glob.glob(os.path.join(model_dir, pattern))):
            try:
                with open(path, encoding="utf-8") as f:
                    samples.extend(json.load(f)["latency_ms"]["samples"])
            except (OSError, ValueError, KeyError):
                pass
        return samples
    alone = run_samples("alone_*.json")
    lanes_off = run_samples("lanes_off_*.json")
    placement, kernels, choices, stages = [], 0, 0, 0
    try:
        with open(os.path.join(model_dir, "plan.json"), encoding="utf-8") as f:
            groups = json.load(f).get("groups", [])
        nodes = {}
        for g in groups:
            nodes[g["backend"]] = nodes.get(g["backend"], 0) + len(g["nodes"])
        placement = sorted(nodes.items(), key=lambda kv: -kv[1])
        kernels = len(groups)
        # Distinct (backend, variant) pairs: how much of a collage the plan really is. A region
        # with a composed variant ("winograd@0,1;blocked@5") counts each of its parts, and the
        # default for its other nodes.
        choices = len({c for g in groups for c in variant_choices(g)})
        stages = len({g.get("stage", 0) for g in groups if g.get("lane", 0) > 0})
    except (OSError, ValueError, KeyError):
        pass
    check = (load_json_lines(os.path.join(model_dir, "ort_check.json")) or [{}])[0]
    compare = check.get("compare")
    # After a mismatch: how far the reference backend's outputs move under a 1e-6 input change.
    sensitivity = (load_json_lines(os.path.join(model_dir, "sensitivity.json")) or [{}])[0]
    return {
        "model": meta.get("model", os.path.basename(model_dir)),
        "gflops": meta.get("gflops"),
        "status": meta.get("status", "ok"),
        "ort_status": meta.get("ort_status"),
        "sensitivity": sensitivity.get("max_err_rel"),
        "plans": {n: {"median": median(plans[n]), "min": min(plans[n]), "n": len(plans[n]),
                      "timed": n not in untimed}
                  for n in order if plans[n]},
        "order": [n for n in order if plans[n]],
        "predicted": predicted,
        "placement": placement,
        "kernels": kernels,
        "choices": choices,
        "concurrent_stages": stages,
        "ort": ({"median": median(ort_samples), "min": min(ort_samples), "n": len(ort_samples)}
                if ort_samples else None),
        "alone": ({"median": median(alone), "min": min(alone), "n": len(alone)}
                  if alone else None),
        "lanes_off": ({"median": median(lanes_off), "min": min(lanes_off), "n": len(lanes_off)}
                      if lanes_off else None),
        "ort_version": ort_version,
        "compare": compare,
    }


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def fmt_ms(v):
    if v is None:
        return "n/a"
    return f"{v:.3f}" if v < 10 else f"{v:.1f}" if v < 1000 else f"{v:.0f}"


def fmt_x(v):
    return "n/a" if v is None else f"{v:.2f}×" if v >= 0.1 else f"{v:.2g}×"


# Contenders of `collage bench` that are not single-backend plans.
SEQUENTIAL = "tuned-sequential"
NOT_BACKENDS = ("tuned", SEQUENTIAL)


def summarize(work, out_dir):
    machine = (load_json_lines(os.path.join(work, "machine.json")) or [{}])[0]
    # A held-out torchvision model "tv:NAME" has its folder under NAME (bench/run.sh).
    models = [m.split(":", 1)[-1] for m in (machine.get("models") or [])]
    models = [d for d in models if os.path.isdir(os.path.join(work, d))]
    rows = [model_summary(os.path.join(work, m)) for m in models]
    backends = []
    for r in rows:
        for n in r["order"]:
            if n not in NOT_BACKENDS and n not in backends:
                backends.append(n)
    peak = (machine.get("peak") or {}).get("peak_gflops")
    for r in rows:
        interleaved = r["plans"].get("tuned", {}).get("median")
        # Against ORT (timed alone), the tuned plan timed alone; against the single-backend
        # plans, the tuned plan timed among them. Work folders from before alone timing
        # existed fall back to the interleaved time.
        tuned = r["alone"]["median"] if r["alone"] else interleaved
        singles = [(r["plans"][b]["median"], b) for b in backends
                   if b in r["plans"] and r["plans"][b]["timed"]]
        best = min(singles) if singles else None
        r["best_single"] = best
        r["vs_best"] = best[0] / interleaved if best and interleaved else None
        r["vs_ort"] = r["ort"]["median"] / tuned if r["ort"] and tuned else None
        r["peak_pct"] = (100.0 * r["gflops"] / (tuned / 1e3) / peak
                         if r["gflops"] and tuned and peak else None)

    ort_version = next((r["ort_version"] for r in rows if r["ort_version"]), None)
    coretype = machine.get("coretype_note", "unknown")
    lines = ["# collage benchmark results", ""]
    lines.append(f"Generated by `bench/run.sh` on {machine.get('date', '?')} — "
                 f"{machine.get('cpu', '?')}, {machine.get('nproc', '?')} cores.")
    lines.append("")
    lines.append(f"- Thread budget: **{machine.get('threads')}** (collage `--threads`, ONNX Runtime "
                 "intra-op threads; ORT inter-op 1, sequential execution, all graph optimisations).")
    lines.append(f"- `OPENBLAS_CORETYPE`: **{coretype}**; OpenBLAS kernel in use: "
                 f"**{(machine.get('peak') or {}).get('corename') or '?'}**.")
    if peak:
        sizes = ", ".join(f"{s['n']}: {s['gflops']:.0f}" for s in machine["peak"]["sizes"])
        lines.append(f"- GEMM peak: **{peak:.1f} GFLOP/s** (OpenBLAS `cblas_sgemm`, square "
                     f"N×N×N, best of repeats on {machine.get('threads')} threads; by N: {sizes}).")
    else:
        lines.append("- GEMM peak: n/a (OpenBLAS not found).")
    lines.append(f"- ONNX Runtime: {('onnxruntime-node ' + ort_version) if ort_version else 'n/a'}"
                 f"{'' if ort_version else ' (' + machine.get('ort_note', 'not available') + ')'}.")
    alone_runs = (f"{machine.get('warmup')} warm-up + {machine.get('repeat')} timed runs")
    if machine.get("warmup_ms") is not None:
        alone_runs = (f"warm-up runs for at least {machine.get('warmup_ms')} ms and at least "
                      f"{machine.get('warmup')}, then timed runs for at least "
                      f"{machine.get('timed_ms')} ms and at least {machine.get('repeat')}, "
                      "counted from the plan's predicted latency")
    lines.append(f"- Tuning budget {machine.get('budget')} s per model, cost DB "
                 f"`costs.db` beside this README. Protocol: {machine.get('rounds')} rounds, each "
                 f"the tuned plan alone (`collage run`) and ORT, each in its own process "
                 f"({alone_runs}, back to back, as a user runs one model; the same counts for "
                 "both), the two in alternating order; then "
                 f"`collage bench` (every plan interleaved, {machine.get('warmup')} warm-up + "
                 f"{machine.get('repeat')} timed runs per plan, each timed run right after an "
                 f"untimed run of the same plan; a plan over 3× slower than the fastest in "
                 f"warm-up is run once, marked \"1 run\"). Medians and minima over all "
                 "samples.")
    lines.append("")
    lines.append("Times are median (min) milliseconds. \"tuned alone\" is the tuned plan in "
                 "its own process, \"tuned\" the same plan interleaved with the others (each "
                 "run follows another plan's, whose memory then fills the caches and TLBs). "
                 "vs ORT: ORT's median over the tuned plan's alone (both timed alone); vs best "
                 "single: the fastest single-backend plan's median over the tuned plan's, "
                 "interleaved (all timed in the same conditions). "
                 "% peak = the model's GFLOPs at the tuned plan's alone median, over the GEMM "
                 "peak. "
                 "ORT check: ORT's outputs against `collage run --plan` on the same inputs "
                 "(max |diff| ≤ 1e-3 × max |collage output|); after a mismatch, how far the "
                 "reference backend's own outputs move when the inputs are scaled by "
                 "(1 + 1e-6): a model that moves past the tolerance under that (chaotic "
                 "random weights) cannot match another runtime's rounding.")
    lines.append("")
    head = (["model", "GFLOPs", "tuned alone", "tuned"] + backends +
            ["ORT", "vs ORT", "vs best single", "% peak", "ORT check"])
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join(["---"] + ["---:"] * (len(head) - 2) + ["---"]) + "|")
    for r in rows:
        def cell(p):
            if not p:
                return "n/a"
            if not p.get("timed", True):
                return f"{fmt_ms(p['median'])} (1 run)"
            return f"{fmt_ms(p['median'])} ({fmt_ms(p['min'])})"
        tuned = r["plans"].get("tuned")
        tcell = cell(tuned) if tuned else ("failed" if r["status"] != "ok" else "n/a")
        acell = f"**{cell(r['alone'])}**" if r["alone"] else "n/a"
        best = (f"{fmt_x(r['vs_best'])} ({r['best_single'][1]})" if r["vs_best"] else "n/a")
        if r["compare"]:
            c = r["compare"]
            check = f"{c['status']} ({c.get('max_err_rel', 0):.1e})"
            if c["status"] == "mismatch" and r.get("sensitivity") is not None:
                check += f"; the model itself moves {r['sensitivity']:.1e} under a 1e-6 input change"
        else:
            check = r["ort_status"] or "n/a"
        cells = ([r["model"], f"{r['gflops']:.3f}" if r["gflops"] is not None else "?", acell,
                  tcell] +
                 [cell(r["plans"].get(b)) for b in backends] +
                 [cell(r["ort"]), fmt_x(r["vs_ort"]), best,
                  f"{r['peak_pct']:.1f}%" if r["peak_pct"] is not None else "n/a", check])
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    # The targets are per model and over the set (issue 15: every CNN >= 1.0x ORT, geomean
    # >= 1.25x), so the table says both rather than leaving the reader to multiply.
    vs_ort = [(r["model"], r["vs_ort"]) for r in rows if r["vs_ort"]]
    if vs_ort:
        geo = geomean([x for _, x in vs_ort])
        behind = [f"{m} ({fmt_x(x)})" for m, x in vs_ort if x < 1.0]
        lines.append(f"Geomean vs ORT over the {len(vs_ort)} models with both timed: "
                     f"**{fmt_x(geo)}**; slower than ORT: {', '.join(behind) or 'none'}.")
        lines.append("")
    lines.append("![speed-ups](speedups.svg)")
    lines.append("")
    lines.append("The tuned plans: where their nodes run, and their predicted latency (the sum of "
                 "their groups' costs, each measured alone by `collage tune`, plus one executor "
                 "step overhead per kernel) against its median measured alone above. "
                 "(Backend, variant) choices: the distinct ways its nodes are built; a region "
                 "whose variant is composed per group (`winograd@0,1;blocked@5`) counts each "
                 "part, and the default for its other nodes.")
    lines.append("")
    lines.append("| model | placement (nodes per backend) | reference nodes | kernels | "
                 "(backend, variant) choices | predicted ms | measured ms | error |")
    lines.append("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        tuned = r["alone"] or r["plans"].get("tuned")
        if not tuned or not r.get("placement"):
            continue
        placement = ", ".join(f"{b} {n}" for b, n in r["placement"])
        on_reference = dict(r["placement"]).get("reference", 0)
        pred = r["predicted"]
        err = f"{(pred / tuned['median'] - 1) * 100:+.1f}%" if pred else "n/a"
        lines.append(f"| {r['model']} | {placement} | {on_reference} | {r['kernels']} | "
                     f"{r['choices']} | {fmt_ms(pred) if pred else 'n/a'} | "
                     f"{fmt_ms(tuned['median'])} | {err} |")
    lines.append("")
    concurrent = [r for r in rows if r["plans"].get(SEQUENTIAL) and r["plans"].get("tuned")]
    lines.append("Concurrent schedules: the tuned plan against the same placement run one step "
                 "after another (`tuned-sequential`: the same kernels, each on every thread), "
                 "side by side in the same rounds. Models whose tuned plan has no concurrent "
                 "stage are not listed"
                 + (":" if concurrent else " (none had one in this run)."))
    if concurrent:
        lines.append("")
        lines.append("| model | concurrent stages | tuned (concurrent) | tuned-sequential | "
                     "speed-up |")
        lines.append("|---|---:|---:|---:|---:|")
        for r in concurrent:
            t, q = r["plans"]["tuned"], r["plans"][SEQUENTIAL]
            lines.append(f"| {r['model']} | {r['concurrent_stages']} | "
                         f"{fmt_ms(t['median'])} ({fmt_ms(t['min'])}) | "
                         f"{fmt_ms(q['median'])} ({fmt_ms(q['min'])}) | "
                         f"{fmt_x(q['median'] / t['median'])} |")
    lines.append("")
    in_regions = [r for r in rows if r.get("lanes_off") and r.get("alone")]
    if in_regions:
        lines.append("Concurrent stages inside onednn-graph regions: the tuned plan alone against "
                     "the same plan alone with each region's steps one after another "
                     "(`COLLAGE_ONEDNN_LANES=off`), in the same rounds. A region keeps a stage "
                     "only where it measured faster when compiled (docs/DESIGN.md).")
        lines.append("")
        lines.append("| model | tuned alone | regions sequential | speed-up |")
        lines.append("|---|---:|---:|---:|")
        for r in in_regions:
            t, q = r["alone"], r["lanes_off"]
            lines.append(f"| {r['model']} | {fmt_ms(t['median'])} ({fmt_ms(t['min'])}) | "
                         f"{fmt_ms(q['median'])} ({fmt_ms(q['min'])}) | "
                         f"{fmt_x(q['median'] / t['median'])} |")
        lines.append("")
    notes = [r for r in rows if r["status"] != "ok"]
    for r in notes:
        lines.append(f"- {r['model']}: {r['status']}")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "README.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines).rstrip() + "\n")
    with open(os.path.join(out_dir, "speedups.svg"), "w", encoding="utf-8") as f:
        f.write(speedup_svg(rows, coretype, machine.get("threads")))
    return "\n".join(lines)


def speedup_svg(rows, coretype, threads):
    series = [("vs ONNX Runtime", "vs_ort", "#4e79a7"),
              ("vs best single backend", "vs_best", "#f28e2b")]
    values = [r[k] for r in rows for _, k, _ in series if r[k]]
    vmax = max([1.0] + values) * 1.15
    left, top, bottom, right = 60, 50, 70, 20
    bar_w, gap = 22, 26
    group_w = bar_w * len(series) + gap
    width = max(420, left + right + group_w * max(1, len(rows)))
    height = 340
    plot_h = height - top - bottom
    y = lambda v: top + plot_h * (1 - v / vmax)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2}" y="18" text-anchor="middle" font-size="14">collage tuned plan: '
           f'speed-up (median latency ratio)</text>',
           f'<text x="{width / 2}" y="34" text-anchor="middle" fill="#555">{threads} threads, '
           f'OPENBLAS_CORETYPE {html.escape(str(coretype))}</text>']
    # grid and axis
    step = 0.5 if vmax <= 4 else 1.0 if vmax <= 8 else 2.0 if vmax <= 20 else 5.0
    t = 0.0
    while t <= vmax:
        yy = y(t)
        out.append(f'<line x1="{left}" y1="{yy:.1f}" x2="{width - right}" y2="{yy:.1f}" '
                   f'stroke="#e5e5e5"/>')
        out.append(f'<text x="{left - 6}" y="{yy + 4:.1f}" text-anchor="end">{t:g}×</text>')
        t += step
    out.append(f'<line x1="{left}" y1="{y(1):.1f}" x2="{width - right}" y2="{y(1):.1f}" '
               f'stroke="#333" stroke-dasharray="4,3"/>')
    out.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" stroke="#333"/>')
    for i, r in enumerate(rows):
        x0 = left + gap / 2 + i * group_w
        for j, (_, key, color) in enumerate(series):
            v = r[key]
            x = x0 + j * bar_w
            if v:
                out.append(f'<rect x="{x:.1f}" y="{y(v):.1f}" width="{bar_w - 2}" '
                           f'height="{y(0) - y(v):.1f}" fill="{color}"><title>'
                           f'{html.escape(r["model"])}: {v:.2f}×</title></rect>')
                out.append(f'<text x="{x + (bar_w - 2) / 2:.1f}" y="{y(v) - 3:.1f}" '
                           f'text-anchor="middle" font-size="9">{v:.2f}</text>')
            else:
                out.append(f'<text x="{x + (bar_w - 2) / 2:.1f}" y="{y(0) - 3:.1f}" '
                           f'text-anchor="middle" font-size="9" fill="#999">n/a</text>')
        cx = x0 + bar_w * len(series) / 2
        out.append(f'<text x="{cx:.1f}" y="{top + plot_h + 14}" text-anchor="end" '
                   f'transform="rotate(-30 {cx:.1f} {top + plot_h + 14})">'
                   f'{html.escape(r["model"])}</text>')
    lx = left + 10
    for k, (label, _, color) in enumerate(series):
        yy = height - 14
        out.append(f'<rect x="{lx}" y="{yy - 9}" width="10" height="10" fill="{color}"/>')
        out.append(f'<text x="{lx + 14}" y="{yy}">{label}</text>')
        lx += 30 + 7 * len(label)
    out.append("</svg>")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------- GPU
GPU_BACKENDS = ["cudnn", "cublas", "cuda-gen", "cuda-graph"]


def torch_summary(model_dir, mode):
    samples = []
    for path in sorted(glob.glob(os.path.join(model_dir, f"torch_{mode}_*.json"))):
        for run in load_json_lines(path):
            if run.get("median_ms") is not None:
                # torch_run.py reports medians per round; the median of those is the cell
                samples.append(run["median_ms"])
    return {"median": median(samples), "min": min(samples), "n": len(samples)} if samples else None


def gpu_summarize(work, out_dir):
    """bench/gpu.sh's results: per model and precision, the tuned plan against each single GPU
    backend, the best single-backend plan, PyTorch eager and torch.compile."""
    machine = (load_json_lines(os.path.join(work, "machine.json")) or [{}])[0]
    lines = ["# collage GPU benchmark results", ""]
    lines.append(f"Generated by `bench/gpu.sh` on {machine.get('date', '?')}: "
                 f"{machine.get('gpu', '?')}, PyTorch {machine.get('torch', '?')}, batch 1, "
                 f"CPU thread budget {machine.get('threads')}, tuning budget "
                 f"{machine.get('budget')} s, {machine.get('rounds')} interleaved rounds of "
                 f"{machine.get('warmup')} warm-up + {machine.get('repeat')} timed runs per "
                 "contender. Median (min) ms. PyTorch runs the same ONNX file's nodes with its "
                 "own ops (bench/peers/torch_run.py), eagerly and under torch.compile (default "
                 "mode). Speed-up: the better of eager and compile over the tuned plan.")
    lines.append("")
    for prec in machine.get("precisions", ["fp32"]):
        lines.append(f"## {prec}" + (" (TF32 allowed: COLLAGE_CUDA_TF32=1, torch allow_tf32)"
                                     if prec == "tf32" else " (float32 math, no TF32)"))
        lines.append("")
        head = (["model", "tuned"] + GPU_BACKENDS +
                ["best single", "torch eager", "torch.compile", "speed-up", "check"])
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "|".join(["---"] + ["---:"] * (len(head) - 2) + ["---"]) + "|")
        ratios, slower_than_eager = [], []
        placements = []
        for model in machine.get("models", []):
            d = os.path.join(work, model, prec)
            if not os.path.isdir(d):
                continue
            r = model_summary(d)
            meta = (load_json_lines(os.path.join(d, "meta.json")) or [{}])[0]
            eager, comp = torch_summary(d, "eager"), torch_summary(d, "compile")

            def cell(p):
                if not p:
                    return "n/a"
                return f"{fmt_ms(p['median'])} ({fmt_ms(p['min'])})"
            tuned = r["plans"].get("tuned")
            singles = [(p["median"], n) for n, p in r["plans"].items()
                       if n != "tuned" and p["timed"]]
            best = min(singles) if singles else None
            peers = [p["median"] for p in (eager, comp) if p]
            ratio = min(peers) / tuned["median"] if peers and tuned else None
            if ratio:
                ratios.append(ratio)
            if eager and tuned and tuned["median"] >= eager["median"]:
                slower_than_eager.append(model)
            cells = ([model, f"**{cell(tuned)}**" if tuned else meta.get("status", "n/a")] +
                     [cell(r["plans"].get(b)) for b in GPU_BACKENDS] +
                     [f"{fmt_ms(best[0])} ({best[1]})" if best else "n/a", cell(eager),
                      cell(comp), fmt_x(ratio), meta.get("check", "n/a")])
            lines.append("| " + " | ".join(cells) + " |")
            if r["placement"]:
                placements.append(f"- {model}: " + ", ".join(f"{b} {n}" for b, n in r["placement"])
                                  + f" ({r['kernels']} kernels)")
        lines.append("")
        if ratios:
            geo = geomean(ratios)
            lines.append(f"Geomean speed-up over the better of eager and torch.compile: "
                         f"**{geo:.2f}x** over {len(ratios)} models. Tuned plan slower than "
                         f"eager: {', '.join(slower_than_eager) or 'none'}.")
            lines.append("")
        if placements:
            lines.append("Tuned placements (nodes per backend):")
            lines.append("")
            lines += placements
            lines.append("")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "README.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines).rstrip() + "\n")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("peak")
    p.add_argument("--lib", required=True)
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--out", required=True)
    s = sub.add_parser("summarize")
    s.add_argument("work")
    s.add_argument("--out-dir", required=True)
    gs = sub.add_parser("gpu-summarize")
    gs.add_argument("work")
    gs.add_argument("--out-dir", required=True)
    a = ap.parse_args()
    if a.cmd == "peak":
        r = gemm_peak(a.lib, a.threads)
        with open(a.out, "w") as f:
            f.write(json.dumps(r) + "\n")
        print(f"GEMM peak: {r['peak_gflops']:.1f} GFLOP/s on {a.threads} threads "
              f"(OpenBLAS kernel {r['corename'] or '?'})")
    elif a.cmd == "gpu-summarize":
        print(gpu_summarize(a.work, a.out_dir))
    else:
        print(summarize(a.work, a.out_dir))


if __name__ == "__main__":
    sys.exit(main())
