# Fixtures for the CLI tests: the `collage` binary under test (COLLAGE_CLI, set by ctest),
# a tiny zoo model and a plan tuned for it (a private cost DB, a short budget).
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
    """A plan using several backends (onednn, xnnpack and reference at least)."""
    path = workdir / "plan.json"
    run(cli, "tune", model, "-o", path, "--backends", "onednn,xnnpack,blas", "--budget", "0",
        "--cost-db", workdir / "costs.db", "--threads", "1")
    return path
