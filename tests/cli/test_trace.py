# `run --profile --trace FILE`: a Chrome-trace (Trace Event Format) timeline: "X" events
# with ts/dur in microseconds, a pid and tid on each, one event per step per run named
# after its backend, nested inside its run.
import json

from conftest import run


def test_trace_events(cli, model, plan, workdir):
    trace_path = workdir / "trace.json"
    proc = run(cli, "run", model, "--plan", plan, "--profile", "--trace", trace_path,
               "--repeat", "3")
    assert f"trace written to {trace_path}" in proc.stdout
    trace = json.loads(trace_path.read_text())
    events = trace["traceEvents"]
    groups = json.loads(plan.read_text())["groups"]
    runs = [e for e in events if e["ph"] == "X" and e["cat"] == "run"]
    steps = [e for e in events if e["ph"] == "X" and e["cat"] == "step"]
    assert len(runs) == 5  # --profile times max(repeat, 5) runs
    assert len(steps) == 5 * len(groups)
    for e in runs + steps:
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        assert e["ts"] >= 0 and e["dur"] >= 0
    for e in steps:
        r = runs[e["args"]["run"]]
        # Inside its run, on the same thread (one track per thread).
        assert e["tid"] == r["tid"]
        assert r["ts"] - 1e-3 <= e["ts"] and e["ts"] + e["dur"] <= r["ts"] + r["dur"] + 1e-3
        group = groups[e["args"]["step"]]
        assert e["name"] == e["args"]["backend"] == group["backend"]
        assert e["args"]["nodes"] == group["nodes"]
    # Steps of one run do not overlap and follow the plan's order.
    for r in range(5):
        mine = sorted((e for e in steps if e["args"]["run"] == r), key=lambda e: e["ts"])
        assert [e["args"]["step"] for e in mine] == list(range(len(groups)))
        for a, b in zip(mine, mine[1:]):
            assert a["ts"] + a["dur"] <= b["ts"] + 1e-3
    # Every backend its own chrome://tracing colour.
    by_backend = {}
    for e in steps:
        by_backend.setdefault(e["name"], set()).add(e["cname"])
    assert all(len(c) == 1 for c in by_backend.values())
    colours = [next(iter(c)) for c in by_backend.values()]
    assert len(set(colours)) == len(colours)
    # Thread names for the tracks.
    threads = {e["tid"] for e in steps}
    named = {e["tid"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert threads <= named
    assert trace["otherData"]["plan"] == str(plan)


def test_trace_unwritable_is_an_io_error(cli, model, workdir):
    proc = run(cli, "run", model, "--trace", workdir / "no-such-dir" / "t.json", check=False)
    assert proc.returncode == 2
    assert "trace" in proc.stderr
