# The CLI's malloc setting (src/cli/library_env.cc): a TorchScript region whose intermediates
# ATen allocates on every run (three elementwise ops over 1x16x768x768, 37.7 MB each, so glibc
# maps and unmaps each one) faults once per 2 MiB huge page, not once per 4 KiB page, and
# `run` reports the page faults of its timed runs (`page_faults_per_run`, and a text line
# from 100 a run on).
import json
import os
import pathlib

import pytest

from conftest import run

SHAPE = [1, 16, 768, 768]
PAGES_PER_TENSOR = 16 * 768 * 768 * 4 // 4096  # 9,216 pages of 4 KiB


def thp_mode():
    path = pathlib.Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if not path.exists():
        return None
    text = path.read_text()
    return text[text.index("[") + 1:text.index("]")]


@pytest.fixture(scope="module")
def eltwise_model(workdir):
    import onnx
    from onnx import TensorProto, helper
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Sigmoid", ["a"], ["b"]),
             helper.make_node("Tanh", ["b"], ["y"])]
    g = helper.make_graph(nodes, "eltwise",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)])
    path = workdir / "big-eltwise.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def run_torch_graph(cli, model, env=None, json_out=True):
    args = ["run", model, "--backend", "torch-graph", "--threads", "2", "--repeat", "3",
            "--warmup", "1"] + (["--json"] if json_out else [])
    return run(cli, *args, env=env)


def test_a_region_whose_library_allocates_per_run_faults_per_huge_page(cli, eltwise_model):
    if thp_mode() in (None, "never"):
        pytest.skip("this kernel has no transparent huge pages (mode: %s)" % thp_mode())
    out = json.loads(run_torch_graph(cli, eltwise_model).stdout)
    assert out["backend_nodes"] == {"matched": 3, "placed": 3} and out["kernels"] == 1
    # At least one 37.7 MB intermediate is mapped afresh each run: 9,216 faults a run with
    # 4 KiB pages, ~19 with 2 MiB ones (measured: 1,079 a run in all, 27,651 without).
    assert out["page_faults_per_run"] < PAGES_PER_TENSOR / 2, out["page_faults_per_run"]


def test_the_users_own_malloc_tuning_wins_and_its_faults_are_reported(cli, eltwise_model):
    env = dict(os.environ, GLIBC_TUNABLES="glibc.malloc.hugetlb=0")
    out = json.loads(run_torch_graph(cli, eltwise_model, env=env).stdout)
    # glibc's own behaviour: every 4 KiB page of the mapped intermediates faults, every run.
    assert out["page_faults_per_run"] >= PAGES_PER_TENSOR, out["page_faults_per_run"]
    text = run_torch_graph(cli, eltwise_model, env=env, json_out=False).stdout
    assert "page faults: " in text and " per run" in text, text
