# collage.tune and collage.Plan: tune -> save -> load -> run round trip, the progress
# output (a bar on a terminal, lines otherwise), Ctrl-C, and plans that do not fit.
import json
import os
import pty
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import collage
from conftest import random_input, read_pb, run_cli, write_pb


def test_round_trip(cli, model, tuned, workdir):
    plan, path = tuned
    # The plan: every node placed once, the placement summary adds up, the tuning report
    # names the winner it timed against every single-backend plan.
    nodes = [n for g in plan.groups for n in g.nodes]
    assert len(nodes) == len(set(nodes)) == collage.InferenceSession(model).num_steps
    assert sum(p["nodes"] for p in plan.placement.values()) == len(nodes)
    assert set(plan.placement) == {g.backend for g in plan.groups}
    assert plan.model == os.path.abspath(model)
    report = plan.tuning
    names = [t.name for t in report.timings]
    assert names[0] == "tuned" and {"onednn", "xnnpack", "blas"} <= set(names)
    winner = next(t for t in report.timings if t.name == report.winner)
    # Every plan not timed says why; a timed one has no reason. A timed plan's median is of
    # at least the rounds before plans far behind stop being timed (3), the winner's of the
    # most.
    for t in report.timings:
        assert (t.not_timed_reason is None) == t.timed, t
        assert t.rounds >= 3 if t.timed and not t.from_cost_db else t.rounds == 0, t
    assert winner.from_cost_db or winner.rounds == max(t.rounds for t in report.timings)
    assert plan.measured_ms == pytest.approx(winner.measured_ms)
    assert report.candidates == report.measured + report.cache_hits
    assert report.cost_db.endswith("costs.db")
    # The phases that waited out a slow window: none on a calm machine, each with its numbers.
    for w in report.slow_windows:
        assert w.phase in ("confirming", "rechecking", "comparing") and w.slowdown > 1.25, w
        assert 0 <= w.waited_s <= 10, w

    # Saved by tune(output=...), loaded back identical.
    loaded = collage.Plan.load(path)
    assert json.loads(loaded.to_json()) == json.loads(plan.to_json())
    assert [(g.backend, g.nodes) for g in loaded.groups] == [(g.backend, g.nodes)
                                                             for g in plan.groups]
    assert loaded.model is None and loaded.tuning is None
    again = workdir / "plan-again.json"
    loaded.save(again)
    assert json.loads(again.read_text()) == json.loads(path.read_text())

    # Run with the Plan object and with its path: the same outputs as `collage run --plan`.
    by_object = collage.InferenceSession(model, plan=plan)
    by_path = collage.InferenceSession(str(model), plan=str(path))
    assert [g.backend for g in by_object.plan.groups] == [g.backend for g in plan.groups]
    x = random_input(by_object.get_inputs()[0], seed=11)
    (y,) = by_object.run(None, {"input": x})
    np.testing.assert_array_equal(by_path.run(None, {"input": x})[0], y)
    write_pb(workdir / "rt-in", [x])
    run_cli(cli, "run", model, "--plan", path, "--inputs", workdir / "rt-in", "--outputs",
            workdir / "rt-out")
    np.testing.assert_array_equal(read_pb(workdir / "rt-out" / "output_0.pb"), y)
    # ... and close to the reference backend's.
    (ref,) = collage.InferenceSession(model).run(None, {"input": x})
    np.testing.assert_allclose(y, ref, rtol=1e-3, atol=1e-4 * np.abs(ref).max())


def test_a_warm_retune_measures_nothing(model, tuned, cost_db):
    again = collage.tune(model, backends="onednn,xnnpack,blas", budget=2, cost_db=cost_db,
                         progress=False)
    assert again.tuning.measured == 0 and again.tuning.cache_hits == again.tuning.candidates


def test_show(model, tuned, workdir, capsys):
    plan, path = tuned
    svg, dot = workdir / "placement.svg", workdir / "placement.dot"
    plan.show(svg=svg, dot=dot)
    out = capsys.readouterr().out
    assert out.startswith(f"plan ({plan.optimizer}), predicted")
    for i, g in enumerate(plan.groups):
        assert f"[{i:>3}] {g.backend}" in out
    assert f"svg written to {svg}" in out and "<svg" in svg.read_text()
    for backend in plan.placement:
        colour = next(b.color for b in collage.backends() if b.name == backend)
        assert f'[label="{backend}", fillcolor="{colour}"]' in dot.read_text()
    # A loaded plan does not know its model.
    with pytest.raises(collage.InvalidArgumentError, match="model=PATH"):
        collage.Plan.load(path).show()
    collage.Plan.load(path).show(model=model)
    other = collage.zoo("dcgan-tiny", workdir / "dcgan-tiny.onnx")
    with pytest.raises(collage.InvalidArgumentError, match="another model"):
        plan.show(model=other)


def test_progress_lines_when_not_a_terminal(model, cost_db, capfd):
    collage.tune(model, backends=["onednn"], budget=0, cost_db=cost_db)
    err = capfd.readouterr().err
    assert "\r" not in err
    lines = err.splitlines()
    assert any(line.startswith("measuring") and "/" in line for line in lines), err
    assert any(line.startswith("comparing") for line in lines), err


def test_progress_off_and_callback(model, cost_db, capfd):
    seen = []
    collage.tune(model, backends=["onednn"], budget=0, cost_db=cost_db, progress=seen.append)
    collage.tune(model, backends=["onednn"], budget=0, cost_db=cost_db, progress=False)
    assert capfd.readouterr().err == ""
    phases = [p.phase for p in seen]
    assert "measuring" in phases and "comparing" in phases
    measuring = [p for p in seen if p.phase == "measuring"]
    assert measuring[-1].done == measuring[-1].total > 0


def test_progress_bar_on_a_terminal(model, cost_db):
    # stderr on a pseudo-terminal: the bar is redrawn in place with '\r'.
    code = (f"import collage; collage.tune({str(model)!r}, backends=['onednn'], budget=0, "
            f"cost_db={str(cost_db)!r})")
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-c", code], stderr=slave, stdout=subprocess.PIPE)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait() == 0
    text = b"".join(chunks).decode()
    assert "\rmeasuring" in text and "[###" in text, text


def test_ctrl_c_interrupts_and_records_no_crash(model, workdir):
    # Ctrl-C on a terminal signals the whole process group: the tuner and its measure
    # worker. The tune must stop with KeyboardInterrupt, and the worker must not die first
    # and have its candidate recorded as crashed in the cost DB.
    db = workdir / "interrupted.db"
    code = f"""
import collage, sys
big = collage.zoo("mobilenet-v2", {str(workdir / 'mnv2.onnx')!r})
def progress(p):
    if p.phase == "measuring" and p.done >= 3:
        print("measuring", flush=True)
try:
    collage.tune(big, backends=["onednn", "xnnpack"], budget=30, cost_db={str(db)!r},
                 progress=progress)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(0)
print("finished", flush=True)
"""
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout.readline().strip() == "measuring", proc.stderr.read()
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert out.splitlines()[-1] == "interrupted", out + err
    import sqlite3
    with sqlite3.connect(db) as con:
        reasons = [r for (r,) in con.execute("select reason from costs where ok = 0")]
    assert not any("SIGINT" in (r or "") for r in reasons), reasons


def test_bad_tune_arguments(model, workdir, cost_db):
    with pytest.raises(collage.IoError):
        collage.tune(workdir / "none.onnx", cost_db=cost_db, progress=False)
    with pytest.raises(collage.InvalidArgumentError, match="unknown backend 'nope'"):
        collage.tune(model, backends=["nope"], cost_db=cost_db, progress=False)
    with pytest.raises(collage.InvalidArgumentError, match="optimizer"):
        collage.tune(model, optimizer="greedy", cost_db=cost_db, progress=False)
    with pytest.raises(collage.InvalidArgumentError, match="budget"):
        collage.tune(model, budget=-1, cost_db=cost_db, progress=False)
    with pytest.raises(collage.InvalidArgumentError, match="calm_wait"):
        collage.tune(model, calm_wait=-1, cost_db=cost_db, progress=False)
    # A failing progress function stops the tune with its own exception.
    def boom(p):
        raise RuntimeError("stop here")
    with pytest.raises(RuntimeError, match="stop here"):
        collage.tune(model, backends=["onednn"], budget=0, cost_db=cost_db, progress=boom)


def test_bad_plan_files(workdir):
    bad = workdir / "garbage-plan.json"
    bad.write_text("[1, 2")
    with pytest.raises(collage.ParseError, match="plan"):
        collage.Plan.load(bad)
    with pytest.raises(collage.UnsupportedError, match="plan format version 0"):
        collage.Plan.from_json('{"format": "collage-plan"}')
    with pytest.raises(collage.IoError):
        collage.Plan.load(workdir / "missing-plan.json")
