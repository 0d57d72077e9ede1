# `--json` on info, tune and run: stdout is exactly one JSON object (json.loads of the whole
# of it), with the documented fields (docs/DESIGN.md, "CLI output for scripts").
import json
import math

from conftest import run


def load_stdout(proc):
    return json.loads(proc.stdout)  # fails on any stray text on stdout


def test_info_json(cli, model):
    out = load_stdout(run(cli, "info", model, "--json"))
    assert out["format"] == "collage-info" and out["version"] == 1
    assert out["model"] == str(model)
    assert out["inputs"] == [{"name": "input", "dtype": "float32", "shape": [1, 3, 64, 64]}]
    assert len(out["outputs"]) == 1 and out["outputs"][0]["dtype"] == "float32"
    assert out["ops"]["Conv"] >= 3
    assert sum(out["ops"].values()) == out["nodes"]
    assert out["parameters"] > 100_000 and 0 < out["gflops"] < 1


def test_run_json_matches_text_checksums(cli, model, plan):
    out = load_stdout(run(cli, "run", model, "--plan", plan, "--json", "--repeat", "2"))
    assert out["format"] == "collage-run" and out["version"] == 1
    assert out["plan"] == str(plan) and out["backend"] is None
    assert out["latency_ms"]["runs"] == 2
    assert 0 < out["latency_ms"]["min"] <= out["latency_ms"]["median"]
    assert out["profile"] is None and out["trace"] is None
    text = run(cli, "run", model, "--plan", plan, "--repeat", "2").stdout
    (o,) = out["outputs"]
    # The text form prints the same checksums with 7 significant digits.
    assert f"sum={o['sum']:.6e} l1={o['l1']:.6e}" in text, (o, text)
    assert o["l1"] > 0


def test_run_json_with_profile_and_verify(cli, model, plan, workdir):
    out = load_stdout(run(cli, "run", model, "--plan", plan, "--json", "--profile", "--verify"))
    assert out["verified"] is True
    profile = out["profile"]
    assert profile["runs"] == 5
    plan_groups = json.loads(plan.read_text())["groups"]
    assert [s["backend"] for s in profile["steps"]] == [g["backend"] for g in plan_groups]
    assert all(s["in_model_ms"] > 0 for s in profile["steps"])
    # Costs measured alone come from the plan.
    assert any(s["alone_ms"] for s in profile["steps"])
    assert {b["backend"] for b in profile["by_backend"]} == {g["backend"] for g in plan_groups}


def test_tune_json(cli, model, workdir):
    plan_path = workdir / "tune-json-plan.json"
    proc = run(cli, "tune", model, "-o", plan_path, "--json", "--backends", "onednn",
               "--budget", "0", "--cost-db", workdir / "costs.db", "--threads", "1")
    out = load_stdout(proc)
    assert out["format"] == "collage-tune" and out["version"] == 1
    assert out["plan_path"] == str(plan_path) and plan_path.exists()
    written = [t for t in out["timings"] if t["written"]]
    assert len(written) == 1 and written[0]["plan"] == out["winner"]
    names = {t["plan"] for t in out["timings"]}
    assert {"tuned", "onednn"} <= names
    assert out["candidates"] == out["measured"] + out["cache_hits"]
    assert sum(p["nodes"] for p in out["placement"]) == len(
        [n for g in json.loads(plan_path.read_text())["groups"] for n in g["nodes"]])
    assert math.isclose(out["measured_ms"], json.loads(plan_path.read_text())["measured_ms"])
    # Progress went to stderr, not stdout.
    assert "measuring" in proc.stderr
    # The phases that waited out a slow window (none, or each with its numbers).
    assert isinstance(out["slow_windows"], list)
    for w in out["slow_windows"]:
        assert w["phase"] in ("confirming", "rechecking", "comparing")
        assert w["slowdown"] > 1 and 0 <= w["waited_s"] <= 10


def test_tune_refuses_a_negative_calm_wait(cli, model, workdir):
    proc = run(cli, "tune", model, "-o", workdir / "never.json", "--calm-wait", "-1",
               check=False)
    assert proc.returncode == 2
    assert "--calm-wait" in proc.stderr
    assert not (workdir / "never.json").exists()


def test_errors_stay_off_stdout(cli, workdir):
    proc = run(cli, "info", workdir / "missing.onnx", "--json", check=False)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "missing.onnx" in proc.stderr
