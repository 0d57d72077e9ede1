# OpenMP's binding variables (OMP_PROC_BIND, OMP_PLACES, GOMP_CPU_AFFINITY) make libgomp bind
# the main thread to one CPU when it loads, before main(). The CLI gives the main thread back
# the CPUs the process started with (src/cli/library_env.cc): before that, the re-executed
# process kept the one CPU and put its OpenMP worker there too (MobileNetV2 ran 5.0 ms a run
# instead of 2.9 on 2 threads), and the tuner's measure workers and the other libraries' thread
# pools inherited it.
import json
import os
import subprocess
import time

import pytest

from conftest import run

START_CPUS = os.sched_getaffinity(0)


def parse_cpu_list(text):
    cpus = set()
    for part in text.strip().split(","):
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def thread_cpus(pid):
    """{thread id: CPUs it may run on} of a running process, from /proc."""
    result = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("Cpus_allowed_list:"):
                        result[int(tid)] = parse_cpu_list(line.split(":", 1)[1])
        except FileNotFoundError:  # the thread ended while we read
            pass
    return result


def sample_running(cli, model, env):
    """Starts a long `run` on 2 threads; once its OpenMP team exists, returns its threads'
    CPUs and stops it."""
    proc = subprocess.Popen([cli, "run", str(model), "--backend", "onednn", "--threads", "2",
                             "--repeat", "1000000", "--warmup", "1"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert proc.poll() is None, \
                f"collage run exited {proc.returncode}: {proc.stderr.read()}"
            threads = thread_cpus(proc.pid)
            if len(threads) >= 2:
                time.sleep(0.5)  # past the re-exec and the warm-up: the timed runs
                return thread_cpus(proc.pid), proc.pid
            time.sleep(0.1)
        raise AssertionError("collage run never started a second thread")
    finally:
        proc.kill()
        proc.wait()


# Each binding variable, with and without the CLI's own re-exec (the second form sets every
# variable the CLI would, so libgomp's binding at load is the only change).
NO_REEXEC = {"GOMP_SPINCOUNT": "10000", "OPENBLAS_THREAD_TIMEOUT": "15",
             "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
CASES = [({"OMP_PROC_BIND": "true"}, "reexec"), ({"OMP_PLACES": "cores"}, "reexec"),
         ({"OMP_PROC_BIND": "close"}, "no-reexec"),
         ({"GOMP_CPU_AFFINITY": ",".join(map(str, sorted(START_CPUS)))}, "no-reexec")]


@pytest.mark.parametrize("binding,mode", CASES, ids=lambda v: str(v))
def test_openmp_binding_leaves_the_main_thread_every_cpu(cli, model, binding, mode):
    if len(START_CPUS) < 2:
        pytest.skip(f"this process may run on {len(START_CPUS)} CPU: nothing to narrow")
    env = dict(os.environ, **binding)
    for name in ("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY", "OMP_WAIT_POLICY"):
        if name not in binding:
            env.pop(name, None)
    if mode == "no-reexec":
        env.update(NO_REEXEC)
    else:
        for name in NO_REEXEC:
            env.pop(name, None)
    threads, pid = sample_running(cli, model, env)
    assert threads[pid] == START_CPUS, (binding, threads)
    used = set().union(*threads.values())
    assert len(used) >= 2, f"every thread confined to {used}: {threads}"


def test_the_default_thread_budget_is_the_cpus_the_process_may_use(cli, model):
    # `taskset -c N collage run`, or a container's cpuset: the default (--threads 0) counts
    # the CPUs of the process's mask, not the machine's (two threads on one CPU ran
    # MobileNetV2 5.1 ms a run instead of 4.3 on one).
    if len(START_CPUS) < 2:
        pytest.skip(f"this process may run on {len(START_CPUS)} CPU: nothing to narrow")
    one_cpu = {min(START_CPUS)}
    proc = subprocess.run([cli, "run", str(model), "--backend", "onednn", "--json"],
                          preexec_fn=lambda: os.sched_setaffinity(0, one_cpu),
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["threads"] == 1, proc.stdout
    everything = json.loads(run(cli, "run", model, "--backend", "onednn", "--json").stdout)
    assert everything["threads"] == len(START_CPUS), everything


def make_cpu_limited_cgroup(name):
    """A cgroup allowing one CPU's worth of time (v1 cpu controller, else v2 cpu.max), or
    None where this machine does not let the test make one (no root, read-only mounts)."""
    candidates = [("/sys/fs/cgroup/cpu", {"cpu.cfs_period_us": "100000",
                                          "cpu.cfs_quota_us": "100000"}),
                  ("/sys/fs/cgroup", {"cpu.max": "100000 100000"})]
    for mount, files in candidates:
        path = os.path.join(mount, name)
        try:
            os.makedirs(path, exist_ok=True)
            for f, value in files.items():
                with open(os.path.join(path, f), "w") as out:
                    out.write(value)
            return path
        except OSError:
            try:
                os.rmdir(path)
            except OSError:
                pass
    return None


def test_the_default_thread_budget_follows_a_cgroup_cpu_limit(cli, model):
    # A container's CPU limit (Kubernetes, `docker run --cpus 1`) leaves every CPU in the
    # mask: two threads then ran MobileNetV2 in 29 ms a run instead of 5 on one.
    if len(START_CPUS) < 2:
        pytest.skip(f"this process may run on {len(START_CPUS)} CPU: nothing to limit")
    group = make_cpu_limited_cgroup(f"collage-test-{os.getpid()}")
    if group is None:
        pytest.skip("cannot make a cgroup with a CPU limit here (needs root and a writable "
                    "cgroup cpu controller)")

    def enter():
        with open(os.path.join(group, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))

    try:
        proc = subprocess.run([cli, "run", str(model), "--backend", "onednn", "--json"],
                              preexec_fn=enter, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["threads"] == 1, proc.stdout
    finally:
        os.rmdir(group)
