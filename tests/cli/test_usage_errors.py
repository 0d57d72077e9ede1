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


def test_a_number_out_of_range_says_what_is_asked(cli, model):
    # CLI11's own range checks printed their bound as DBL_MAX, 300 digits.
    for args, message in ((["run", model, "--repeat", "0"], "--repeat: must be above 0, got 0"),
                          (["run", model, "--warmup", "-1"], "--warmup: must be at least 0, got -1"),
                          (["tune", model, "-o", "p.json", "--budget", "-2"],
                           "--budget: must be at least 0, got -2")):
        proc = run(cli, *args, check=False)
        assert proc.returncode == 2, proc
        assert message in proc.stderr and "179769" not in proc.stderr, proc.stderr
