# Mistakes a user makes on the command line, answered at once and clearly: a tune whose plan
# could not be written fails before it measures anything (not after minutes of tuning), and
# a run asked for more threads than the process may use says so (it runs, much slower).
import os

from conftest import run


def test_tune_refuses_an_output_it_cannot_write_before_tuning(cli, model, workdir):
    costs = workdir / "refused-costs.db"
    for output, why in ((workdir / "no-such-dir" / "plan.json", "no directory"),
                        (workdir, "it is a directory")):
        proc = run(cli, "tune", model, "-o", output, "--cost-db", costs, "--budget", "0",
                   "--backends", "onednn", check=False)
        assert proc.returncode != 0
        assert f"cannot write plan to '{output}': {why}" in proc.stderr, proc.stderr
        # Refused before the cost DB was opened: nothing was measured.
        assert not costs.exists()
        assert "measuring" not in proc.stderr


def test_run_warns_of_more_threads_than_cpus(cli, model):
    # More than the CPUs in the affinity mask (a CPU quota may allow fewer still).
    asked = len(os.sched_getaffinity(0)) + 1
    over = run(cli, "run", model, "--backend", "onednn", "--threads", asked, "--repeat", "1")
    assert f"{asked} threads for the" in over.stderr, over.stderr
    one = run(cli, "run", model, "--backend", "onednn", "--threads", 1, "--repeat", "1")
    assert "CPUs this process may use" not in one.stderr, one.stderr
