# A code-generating backend (halide) whose kernel cache folder cannot be written builds in a
# private temporary folder, and the process removes that folder when it exits: before, every
# such process left one behind in /tmp.
import os

from conftest import run


def test_unwritable_cache_dir_leaves_no_temporary_folder(cli, model, tmp_path):
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "COLLAGE_CACHE_DIR": "/proc/collage-cannot-create-this",
           "TMPDIR": str(temp)}
    proc = run(cli, "run", model, "--backend", "halide", env=env)
    # It did build in a temporary folder (the warning says so), and ran halide kernels.
    assert "compiled kernels will not persist" in proc.stdout + proc.stderr, proc.stderr
    assert "halide" in proc.stdout, proc.stdout
    assert list(temp.iterdir()) == []
