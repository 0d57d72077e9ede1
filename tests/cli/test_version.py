# `collage --version`: collage's version and each backend's library version, exit status 0
# (it used to print "A subcommand is required").
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
