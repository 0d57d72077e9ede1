# Fixtures for the CLI tests: the `collage` binary under test (COLLAGE_CLI, set by ctest),
# a tiny zoo model and a plan tuned for it (a private cost DB, a short budget).
import json
import os
import subprocess

import pytest


@pytest.fixture(scope="session")
def cli():
    path = os.environ.get("COLLAGE_CLI")
    assert path and os.access(path, os.X_OK), "COLLAGE_CLI must name the collage binary"
    return path


def run(cli, *args, check=True, env=None, cwd=None):
    """Runs the CLI without a shell; returns the CompletedProcess (text mode)."""
    proc = subprocess.run([cli, *map(str, args)], capture_output=True, text=True, env=env,
                          cwd=cwd)
    if check and proc.returncode != 0:
        raise AssertionError(f"collage {args} exited {proc.returncode}:\n{proc.stderr}")
    return proc


@pytest.fixture(scope="session")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("cli")


@pytest.fixture(scope="session")
def model(cli, workdir):
    path = workdir / "resnet-tiny.onnx"
    run(cli, "zoo", "resnet-tiny", "-o", path)
    return path


@pytest.fixture(scope="session")
def plan(cli, workdir, model):
    """A tuned plan that uses at least two backends.

    Which plan the tune picks is this machine's measurement: on one machine a mix, on
    another one backend alone (CI's tune once chose onednn for every group, and a test that
    needed two colours failed). So the tuned plan's first one-node group moves to reference
    (reference runs any node, one step a node, so the plan keeps one step a group); the tests
    that use this plan (show, trace, run --json) see a mix on every machine."""
    tuned = workdir / "tuned-plan.json"
    run(cli, "tune", model, "-o", tuned, "--backends", "onednn,xnnpack,blas", "--budget", "0",
        "--cost-db", workdir / "costs.db", "--threads", "1")
    doc = json.loads(tuned.read_text())
    single = [g for g in doc["groups"] if len(g["nodes"]) == 1 and g["backend"] != "reference"]
    assert single, f"the tuned plan has no one-node group to move: {doc['groups']}"
    single[0]["backend"], single[0]["variant"] = "reference", ""
    doc["optimizer"] = "tests: " + doc["optimizer"] + ", one group moved to reference"
    backends = {g["backend"] for g in doc["groups"]}
    assert len(backends) >= 2, f"still one backend: {backends}"
    path = workdir / "plan.json"
    path.write_text(json.dumps(doc, indent=2))
    return path
