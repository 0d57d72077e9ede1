# The CLI's OpenMP runtime (src/cli/library_env.cc): where CMake found LLVM's libomp
# (COLLAGE_LIBOMP, passed by ctest; empty when not found), `run` preloads it and every OpenMP
# call of the process goes to it (`run --json` names the runtime the calls bind to); a tuned
# plan's hardware line names it, so costs measured under one runtime are not read under the
# other; COLLAGE_OPENMP=libgomp keeps libgomp, so does a thread-binding variable unless
# COLLAGE_OPENMP=libomp, and libomp goes in front of a user's LD_PRELOAD.
import json
import os

import pytest

from conftest import run

LIBOMP = os.environ.get("COLLAGE_LIBOMP", "")


BINDINGS = ("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY", "KMP_AFFINITY")


def env_with(**extra):
    """This environment without the variables that choose the runtime, plus `extra`."""
    env = {k: v for k, v in os.environ.items()
           if k not in BINDINGS + ("COLLAGE_OPENMP", "LD_PRELOAD")}
    env.update(extra)
    return env


def run_json(cli, model, env):
    args = ["run", model, "--backend", "onednn", "--threads", "2", "--repeat", "2", "--json"]
    return json.loads(run(cli, *args, env=env).stdout)


def test_run_binds_openmp_to_libomp_where_it_is_installed(cli, model):
    out = run_json(cli, model, env_with())
    assert out["openmp"] == ("libomp" if LIBOMP else "libgomp"), out["openmp"]


def test_collage_openmp_libgomp_keeps_libgomp(cli, model):
    out = run_json(cli, model, env_with(COLLAGE_OPENMP="libgomp"))
    assert out["openmp"] == "libgomp", out["openmp"]


@pytest.mark.parametrize("binding", BINDINGS)
def test_a_binding_variable_keeps_libgomp_unless_libomp_is_asked_for(cli, model, binding):
    if not LIBOMP:
        pytest.skip("libomp.so.5 was not found at configure time: nothing is preloaded")
    value = {"OMP_PROC_BIND": "true", "OMP_PLACES": "cores", "GOMP_CPU_AFFINITY": "0",
             "KMP_AFFINITY": "disabled"}[binding]
    assert run_json(cli, model, env_with(**{binding: value}))["openmp"] == "libgomp"
    asked = run_json(cli, model, env_with(COLLAGE_OPENMP="libomp", **{binding: value}))
    assert asked["openmp"] == "libomp", asked["openmp"]


def test_libomp_goes_in_front_of_a_users_own_preload(cli, model):
    if not LIBOMP:
        pytest.skip("libomp.so.5 was not found at configure time: nothing is preloaded")
    # The user's LD_PRELOAD (here libgomp itself) stays, behind libomp, whose definitions
    # come first; the run works.
    out = run_json(cli, model, env_with(LD_PRELOAD="libgomp.so.1"))
    assert out["openmp"] == "libomp", out["openmp"]


def test_a_plan_tuned_under_libomp_names_it(cli, model, workdir):
    plan = workdir / "openmp-plan.json"
    run(cli, "tune", model, "-o", plan, "--backends", "onednn", "--budget", "0", "--cost-db",
        workdir / "openmp-costs.db", "--threads", "1", env=env_with())
    hardware = json.loads(plan.read_text())["hardware"]
    assert hardware.endswith(" | libomp") == bool(LIBOMP), hardware


@pytest.mark.parametrize("global_options", [
    ["--log-level", "info"],  # "info" is a command's name too
    ["--log-level=error"],
    ["--backend-plugin", os.environ["COLLAGE_BROKEN_PLUGIN"]],
])
def test_global_options_before_the_command_keep_the_runtime(cli, model, global_options):
    # The library settings (library_env.cc) are made for commands that run kernels; the
    # command is found past the global options and their values (until 2026-12-08 a run
    # behind `--log-level info` or a plugin's path got libgomp and no spin bound).
    args = [*global_options, "run", model, "--backend", "onednn", "--threads", "2",
            "--repeat", "2", "--json"]
    out = json.loads(run(cli, *args, env=env_with()).stdout)
    assert out["openmp"] == ("libomp" if LIBOMP else "libgomp"), out["openmp"]
