# Ctrl-C during `collage tune`: the terminal signals the whole process group. The tuner
# stops; its measure worker ignores the SIGINT (so the candidate it was measuring is not
# recorded as crashed) but must not outlive the tuner.
import os
import signal
import subprocess
import time

from conftest import run


def workers_in_session(sid):
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            if b"measure-worker" in cmd and os.getsid(int(pid)) == sid:
                found.append(int(pid))
        except (OSError, ProcessLookupError):
            pass
    return found


def test_ctrl_c_stops_tuner_and_worker(cli, workdir):
    big = workdir / "mobilenet-v2.onnx"
    run(cli, "zoo", "mobilenet-v2", "-o", big)
    proc = subprocess.Popen([cli, "tune", big, "-o", workdir / "never.json", "--cost-db",
                             workdir / "interrupt.db", "--backends", "onednn,xnnpack"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    line = proc.stderr.readline()  # the first progress line: measuring has started
    assert line.startswith("measuring"), line
    deadline = time.monotonic() + 60
    while not workers_in_session(proc.pid):
        assert time.monotonic() < deadline, "no measure worker started"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=60) == -signal.SIGINT
    deadline = time.monotonic() + 30
    while workers_in_session(proc.pid):
        assert time.monotonic() < deadline, "the measure worker outlived the tuner"
        time.sleep(0.05)
    assert not (workdir / "never.json").exists()


def test_a_worker_stuck_in_a_kernel_dies_with_the_tuner(cli, workdir):
    # The broken-hang backend's kernel never returns (it waits in pause(), which the
    # ignored SIGINT does not interrupt): the worker must still go when its tuner does.
    import onnx
    from onnx import TensorProto, helper
    plugin = os.environ["COLLAGE_BROKEN_PLUGIN"]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    model = workdir / "relu.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), model)
    proc = subprocess.Popen([cli, "--backend-plugin", plugin, "tune", model, "-o",
                             workdir / "hang.json", "--cost-db", workdir / "hang.db",
                             "--backends", "reference,broken-hang", "--budget", "0"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    # Printed once the first candidate (reference) is measured; the hanging one is next.
    line = proc.stderr.readline()
    assert line.startswith("measuring") and "1/2" in line, line
    time.sleep(1)
    assert workers_in_session(proc.pid), "no measure worker"
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=60) == -signal.SIGINT
    deadline = time.monotonic() + 30
    while workers_in_session(proc.pid):
        assert time.monotonic() < deadline, "the hung measure worker outlived the tuner"
        time.sleep(0.05)
