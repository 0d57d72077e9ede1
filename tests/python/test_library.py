# Module-level functions against the CLI: backends(), zoo(), zoo_models(), version(), and
# the exception hierarchy (one class per collage::ErrorKind).
import re

import pytest

import collage
from conftest import run_cli


def test_version_matches_the_cli(cli):
    assert collage.__version__ == collage.version()
    assert run_cli(cli, "--version").stdout.splitlines()[0] == f"collage {collage.__version__}"


def test_backends_match_the_cli(cli):
    listed = re.findall(r"^(\S+) (.+?) \((op-level|graph-level),", run_cli(cli, "backends").stdout, re.M)
    mine = collage.backends()
    assert [(b.name, b.version, b.kind) for b in mine] == listed
    assert mine[0].name == "reference"
    # Host backends run everywhere; a GPU backend without a device says why.
    assert all(b.available for b in mine if b.device is None)
    assert all(b.available != bool(b.unavailable_reason) for b in mine)
    assert all(b.patterns > 0 for b in mine if b.name != "reference")
    colours = [b.color for b in mine]
    assert len(set(colours)) == len(colours) and all(re.fullmatch(r"#[0-9a-f]{6}", c)
                                                     for c in colours)


def test_zoo_matches_the_cli(cli, workdir):
    listed = re.findall(r"^(\S+)\s+[\d.]+ M", run_cli(cli, "zoo", "--list").stdout, re.M)
    assert list(collage.zoo_models()) == listed
    assert "resnet-tiny" in collage.zoo_models()
    mine = collage.zoo("mobilenet-tiny", workdir / "zoo-py.onnx")
    run_cli(cli, "zoo", "mobilenet-tiny", "-o", workdir / "zoo-cli.onnx")
    assert open(mine, "rb").read() == open(workdir / "zoo-cli.onnx", "rb").read()
    with pytest.raises(collage.InvalidArgumentError, match="resnet-tiny"):
        collage.zoo("no-such-model", workdir / "x.onnx")


def test_error_hierarchy():
    expected = {
        "ParseError": ("parse error", True), "InvalidModelError": ("invalid model", True),
        "UnsupportedError": ("unsupported", True), "ShapeError": ("shape error", True),
        "LimitError": ("limit exceeded", True), "PathViolationError": ("path violation", True),
        "IoError": ("I/O error", True), "BackendError": ("backend error", False),
        "InvalidArgumentError": ("invalid argument", True),
        "InternalError": ("internal error", False),
    }
    for name, (kind, bad_input) in expected.items():
        cls = getattr(collage, name)
        assert issubclass(cls, collage.Error) and cls.__module__ == "collage"
        assert (cls.kind, cls.bad_input) == (kind, bad_input), name
    assert issubclass(collage.IoError, OSError)
    assert issubclass(collage.InvalidArgumentError, ValueError)


def test_log_level():
    collage.set_log_level("error")
    collage.set_log_level("warn")
    with pytest.raises(collage.InvalidArgumentError, match="log level"):
        collage.set_log_level("loud")


@pytest.mark.parametrize("binding", [{"OMP_PROC_BIND": "true"}, {"OMP_PLACES": "cores"}])
def test_openmp_binding_leaves_the_importing_thread_every_cpu(binding):
    # libgomp binds the thread that loads it to one CPU when a binding variable is set; the
    # module gives it back (collage/__init__.py), or every pool created from it would share it.
    import os
    import subprocess
    import sys
    start = os.sched_getaffinity(0)
    if len(start) < 2:
        pytest.skip(f"this process may run on {len(start)} CPU: nothing to narrow")
    code = "import os, collage; print(sorted(os.sched_getaffinity(0)))"
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, **binding),
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == str(sorted(start)), (binding, out)
