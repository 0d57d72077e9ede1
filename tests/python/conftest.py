# Fixtures for the Python module's tests. ctest (tests/python/CMakeLists.txt) runs them with
# Debian's /usr/bin/python3, PYTHONPATH=build/python (the module as a user gets it from the
# README's set-up) and COLLAGE_CLI=build/collage (to compare with the CLI).
import os
import subprocess

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import collage


@pytest.fixture(scope="session")
def cli():
    path = os.environ.get("COLLAGE_CLI")
    assert path and os.access(path, os.X_OK), "COLLAGE_CLI must name the collage binary"
    return path


def run_cli(cli, *args, check=True, cwd=None):
    proc = subprocess.run([cli, *map(str, args)], capture_output=True, text=True, cwd=cwd)
    if check and proc.returncode != 0:
        raise AssertionError(f"collage {args} exited {proc.returncode}:\n{proc.stderr}")
    return proc


@pytest.fixture(scope="session")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("py")


@pytest.fixture(scope="session")
def model(workdir):
    return collage.zoo("resnet-tiny", workdir / "resnet-tiny.onnx")


@pytest.fixture(scope="session")
def cost_db(workdir):
    return workdir / "costs.db"


@pytest.fixture(scope="session")
def tuned(model, workdir, cost_db):
    """A plan tuned over a few backends with a short budget, saved to plan.json."""
    path = workdir / "plan.json"
    plan = collage.tune(model, output=path, backends=["onednn", "xnnpack", "blas"], budget=2,
                        cost_db=cost_db, progress=False)
    return plan, path


def random_input(node_arg, seed=0):
    rng = np.random.default_rng(seed)
    assert node_arg.type == "tensor(float)"
    return rng.uniform(-1, 1, size=node_arg.shape).astype(np.float32)


def write_pb(directory, arrays):
    """ONNX test-data layout: input_0.pb, input_1.pb, ..."""
    os.makedirs(directory, exist_ok=True)
    for i, a in enumerate(arrays):
        with open(os.path.join(directory, f"input_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(a).SerializeToString())


def read_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)
