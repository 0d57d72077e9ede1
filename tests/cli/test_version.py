# `collage --version`: collage's version and each backend's library version, exit status 0
# (it used to print "A subcommand is required").
import os
import re

from conftest import run


def test_version_lists_collage_and_every_backend(cli):
    proc = run(cli, "--version")
    lines = proc.stdout.splitlines()
    assert re.fullmatch(r"collage \d+\.\d+\.\d+", lines[0]), proc.stdout
    backends = run(cli, "backends").stdout
    # `backends` starts each backend's entry with "NAME VERSION (".
    listed = re.findall(r"^(\S+) (.+?) \((?:op-level|graph-level),", backends, re.M)
    assert len(listed) == len(re.findall(r"^\S", backends, re.M)), backends
    for name, version in listed:
        assert re.search(rf"^\s+{re.escape(name)}\s+{re.escape(version)} ", proc.stdout, re.M), (
            name, proc.stdout)


def blas_version_and_kernel(cli, env):
    backends = run(cli, "backends", env=env).stdout
    version = re.search(r"^blas (.+?) \(op-level", backends, re.M)
    kernel = re.search(r"^\s+kernel: (\S+)", backends[backends.index("\nblas "):], re.M)
    assert version and kernel, backends
    return version.group(1), kernel.group(1)


def test_blas_version_names_the_openblas_kernel(cli):
    # The version is part of every cost key and of a plan: costs measured with OpenBLAS's
    # AVX2 kernel (OPENBLAS_CORETYPE=Haswell, as these machines export) must not be reused
    # with the kernel OpenBLAS picks for the CPU, nor the other way round.
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    native_version, native_kernel = blas_version_and_kernel(cli, env)
    forced_version, forced_kernel = blas_version_and_kernel(
        cli, {**env, "OPENBLAS_CORETYPE": "Haswell"})
    assert forced_kernel == "Haswell", forced_kernel
    assert native_version.endswith(" " + native_kernel), native_version
    assert forced_version.endswith(" Haswell"), forced_version
    assert (native_version == forced_version) == (native_kernel == "Haswell")
