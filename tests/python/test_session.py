# collage.InferenceSession: ONNX Runtime's shape (get_inputs/get_outputs/run), outputs equal
# to the CLI's on the same inputs, arrays in and out without copies where the API allows,
# and every bad input a Python exception (the interpreter never dies).
import os
import threading
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import collage
from conftest import random_input, read_pb, run_cli, write_pb


def test_node_args_match_the_onnx_file(model):
    sess = collage.InferenceSession(model)
    graph = onnx.load(model).graph
    (inp,) = sess.get_inputs()
    assert inp.name == graph.input[0].name == "input"
    assert inp.shape == [d.dim_value for d in graph.input[0].type.tensor_type.shape.dim]
    assert inp.type == "tensor(float)"
    (out,) = sess.get_outputs()
    assert out.name == graph.output[0].name and out.shape == [1, 10]
    assert "NodeArg(name='input', type='tensor(float)', shape=[1, 3, 64, 64])" == repr(inp)


@pytest.mark.parametrize("with_plan", [False, True])
def test_outputs_equal_the_clis(cli, model, tuned, workdir, with_plan):
    _, plan_path = tuned
    sess = collage.InferenceSession(model, plan=plan_path if with_plan else None)
    x = random_input(sess.get_inputs()[0], seed=3)
    (y,) = sess.run(None, {"input": x})
    folder = workdir / f"cli-io-{with_plan}"
    write_pb(folder / "in", [x])
    args = ["run", model, "--inputs", folder / "in", "--outputs", folder / "out", "--repeat", "1"]
    run_cli(cli, *args, *(["--plan", plan_path] if with_plan else []))
    want = read_pb(folder / "out" / "output_0.pb")
    assert y.dtype == want.dtype and y.shape == want.shape
    # Same kernels, same inputs, same thread count: the same bits.
    np.testing.assert_array_equal(y, want)
    assert np.abs(y).sum() > 0


def test_output_selection_and_order(workdir):
    # y1 = relu(x), y2 = -x: two outputs to pick from.
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in ("y1", "y2")]
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y1"]),
                           helper.make_node("Neg", ["x"], ["y2"])], "g", [x], outs)
    path = workdir / "two_outputs.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    sess = collage.InferenceSession(path)
    a = np.arange(-3, 3, dtype=np.float32).reshape(2, 3)
    y2, y1 = sess.run(["y2", "y1"], {"x": a})
    np.testing.assert_array_equal(y1, np.maximum(a, 0))
    np.testing.assert_array_equal(y2, -a)
    assert len(sess.run(None, {"x": a})) == 2
    with pytest.raises(collage.InvalidArgumentError, match="unknown output 'y3'"):
        sess.run(["y3"], {"x": a})
    with pytest.raises(collage.InvalidArgumentError, match="list of output names"):
        sess.run("y1", {"x": a})


def test_integer_inputs(workdir):
    path = collage.zoo("bert-tiny", workdir / "bert-tiny.onnx")
    sess = collage.InferenceSession(path)
    (ids,) = sess.get_inputs()
    assert ids.type == "tensor(int64)"
    feed = np.ones(ids.shape, dtype=np.int64)
    (out,) = sess.run(None, {ids.name: feed})[:1]
    assert out.dtype == np.float32 and np.isfinite(out).all()
    with pytest.raises(collage.InvalidArgumentError, match="must be int64"):
        sess.run(None, {ids.name: feed.astype(np.int32)})


def test_outputs_are_not_copied_and_inputs_may_be_any_layout(model):
    sess = collage.InferenceSession(model)
    x = random_input(sess.get_inputs()[0])
    (y,) = sess.run(None, {"input": x})
    # The array wraps the runtime's output buffer (kept alive by a capsule), no second copy.
    assert not y.flags["OWNDATA"] and type(y.base).__name__ == "PyCapsule"
    assert y.flags["C_CONTIGUOUS"] and y.flags["WRITEABLE"]
    # Strided views and read-only arrays are accepted (numpy makes the strided one
    # contiguous first) and give the same answer.
    wide = np.zeros((1, 3, 64, 128), np.float32)
    wide[..., ::2] = x
    strided = wide[..., ::2]
    assert not strided.flags["C_CONTIGUOUS"]
    np.testing.assert_array_equal(sess.run(None, {"input": strided})[0], y)
    frozen = x.copy()
    frozen.flags["WRITEABLE"] = False
    np.testing.assert_array_equal(sess.run(None, {"input": frozen})[0], y)
    # Results outlive the session.
    del sess
    assert np.isfinite(y).all()


def slow_matmul_model(path, n=512):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, n])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, n])
    w = numpy_helper.from_array(np.full((n, n), 1.0 / n, np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["t"]),
                           helper.make_node("MatMul", ["t", "w"], ["y"])], "g", [x], [y], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def test_gil_released_while_running(workdir):
    # A reference-backend (plain loops), one-thread 1024^3 MatMul pair, ~0.5 s here: long
    # enough that if run() held the GIL, this thread could not run any Python in the middle.
    sess = collage.InferenceSession(slow_matmul_model(workdir / "slow.onnx", 1024), threads=1)
    x = np.ones((1024, 1024), np.float32)
    window = {}

    def worker():
        window["start"] = time.perf_counter()
        sess.run(None, {"x": x})
        window["stop"] = time.perf_counter()

    t = threading.Thread(target=worker)
    ticks = []
    t.start()
    while t.is_alive():
        ticks.append(time.perf_counter())
    t.join()
    start, stop = window["start"], window["stop"]
    # The middle 80 % of the run: a held GIL would leave no tick there at all. (Ticks do
    # land at its ends, while the worker runs Python around the call and waits for the GIL:
    # up to the interpreter's 5 ms switch interval, far less than 10 % of the run.)
    margin = 0.1 * (stop - start)
    assert stop - start > 0.1, "the run is too short to tell"
    inside = [s for s in ticks if start + margin < s < stop - margin]
    assert inside, f"no Python ran during a {stop - start:.3f} s run: the GIL was held"


def test_concurrent_runs_of_one_session_are_correct(model):
    sess = collage.InferenceSession(model)
    x = random_input(sess.get_inputs()[0], seed=5)
    (want,) = sess.run(None, {"input": x})
    results = [None] * 4

    def worker(i):
        results[i] = [sess.run(None, {"input": x})[0] for _ in range(5)]

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        for y in r:
            np.testing.assert_array_equal(y, want)


# --- bad input: an exception naming the problem, never a crash -------------------------


def cli_error_line(cli, *args):
    proc = run_cli(cli, *args, check=False)
    assert proc.returncode == 2, proc.stderr
    return proc.stderr.strip().splitlines()[-1]


def test_missing_file_is_an_io_error_like_the_cli(cli, workdir):
    path = workdir / "does-not-exist.onnx"
    with pytest.raises(collage.IoError) as e:
        collage.InferenceSession(path)
    assert isinstance(e.value, OSError) and e.value.bad_input
    assert f"collage: {e.value.kind}: {e.value}" == cli_error_line(cli, "run", path)


def test_corrupt_file_is_a_parse_error_like_the_cli(cli, model, workdir):
    path = workdir / "truncated.onnx"
    data = open(model, "rb").read()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(collage.ParseError) as e:
        collage.InferenceSession(path)
    assert e.value.kind == "parse error"
    assert f"collage: {e.value.kind}: {e.value}" == cli_error_line(cli, "run", path)
    with pytest.raises(collage.ParseError):
        collage.InferenceSession(data[: len(data) // 2])  # from bytes


def test_ort_keyword_arguments_are_accepted(model):
    sess = collage.InferenceSession(model, providers=["CPUExecutionProvider"],
                                    sess_options=None, provider_options=None)
    assert sess.get_inputs()[0].name == "input"
    with pytest.warns(UserWarning, match="CUDAExecutionProvider"):
        collage.InferenceSession(model, providers=[("CUDAExecutionProvider", {}),
                                                   "CPUExecutionProvider"])


def test_model_from_bytes(model):
    sess = collage.InferenceSession(open(model, "rb").read())
    x = random_input(sess.get_inputs()[0])
    np.testing.assert_array_equal(sess.run(None, {"input": x})[0],
                                  collage.InferenceSession(model).run(None, {"input": x})[0])


@pytest.mark.parametrize(
    "feed, error, message",
    [
        ({"input": np.zeros((1, 3, 32, 32), np.float32)}, collage.InvalidArgumentError,
         r"input 0 'input' must be float32\[1,3,64,64\], got float32\[1,3,32,32\]"),
        ({"input": np.zeros((1, 3, 64, 64), np.float64)}, collage.InvalidArgumentError,
         r"must be float32\[1,3,64,64\], got float64"),
        ({"input": np.zeros((1, 3, 64, 64), np.complex64)}, collage.InvalidArgumentError,
         "numpy dtype complex64"),
        ({"input": np.zeros((1, 3, 64, 64), ">f4")}, collage.InvalidArgumentError,
         "which collage cannot hold"),
        ({"input": [[1, 2], [3]]}, collage.InvalidArgumentError, "input 'input'"),
        ({}, collage.InvalidArgumentError, r"missing input 'input' \(tensor\(float\) \[1,3,64,64\]\)"),
        ({"input": np.zeros((1, 3, 64, 64), np.float32), "x": np.zeros(1)},
         collage.InvalidArgumentError, r"unknown input 'x' \(the model's inputs: 'input'\)"),
    ])
def test_bad_feeds_raise(model, feed, error, message):
    sess = collage.InferenceSession(model)
    with pytest.raises(error, match=message):
        sess.run(None, feed)
    # The session still works afterwards.
    assert sess.run(None, {"input": np.zeros((1, 3, 64, 64), np.float32)})[0].shape == (1, 10)


def test_bad_arguments_raise(model):
    with pytest.raises(TypeError):
        collage.InferenceSession(model).run(None, [np.zeros((1, 3, 64, 64), np.float32)])
    with pytest.raises(collage.InvalidArgumentError, match="run_options"):
        collage.InferenceSession(model).run(None, {}, object())
    with pytest.raises(collage.InvalidArgumentError, match="unknown backend 'nope'"):
        collage.InferenceSession(model, backend="nope")
    with pytest.raises(collage.InvalidArgumentError, match="threads"):
        collage.InferenceSession(model, threads=-1)


def test_bad_plans_raise(cli, model, workdir, tuned):
    bad_json = workdir / "bad-plan.json"
    bad_json.write_text('{"format": "collage-plan", ')
    with pytest.raises(collage.ParseError) as e:
        collage.InferenceSession(model, plan=bad_json)
    assert f"collage: {e.value.kind}: {e.value}" == cli_error_line(
        cli, "run", model, "--plan", bad_json)
    with pytest.raises(collage.IoError):
        collage.InferenceSession(model, plan=workdir / "no-plan.json")
    # A plan for another model.
    other = collage.zoo("mobilenet-tiny", workdir / "mobilenet-tiny.onnx")
    with pytest.raises(collage.InvalidArgumentError, match="another model") as e:
        collage.InferenceSession(other, plan=tuned[1])
    assert f"collage: {e.value.kind}: {e.value}" == cli_error_line(
        cli, "run", other, "--plan", tuned[1])
    with pytest.raises(TypeError):
        collage.InferenceSession(model, plan=42)


def test_symbolic_dims(workdir):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    path = workdir / "symbolic.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    with pytest.raises(collage.Error, match="batch"):
        collage.InferenceSession(path)
    sess = collage.InferenceSession(path, dims={"batch": 3})
    assert sess.get_inputs()[0].shape == [3, 4]
