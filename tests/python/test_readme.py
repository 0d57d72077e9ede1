# The README's Python quick start, run exactly as written: its set-up (PYTHONPATH pointing
# at the build tree's module, Debian's python3) and its code, unchanged, in a fresh folder.
# The user cache (cost DB) is redirected into the build tree: not the tester's own, and kept
# between runs (cold, the quick start measures ~430 candidates: minutes on a busy machine).
import os
import re
import subprocess
import sys

import pytest


def readme_section(title):
    readme = open(os.path.join(os.environ["COLLAGE_SOURCE_DIR"], "README.md")).read()
    start = readme.index(f"## {title}\n")
    end = readme.find("\n## ", start + 1)
    return readme[start:end if end >= 0 else len(readme)]


def test_python_quick_start_runs_as_written(tmp_path):
    section = readme_section("Python quick start")
    setup = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    # The set-up the README gives is the one this test runs under.
    assert "export PYTHONPATH=$PWD/build/python" in setup
    assert "/usr/bin/python3 quickstart.py" in setup
    module_dir = os.environ["PYTHONPATH"].split(os.pathsep)[0]
    assert os.path.basename(module_dir) == "python" and os.path.isfile(
        os.path.join(module_dir, "collage", "__init__.py"))
    assert sys.executable == "/usr/bin/python3"

    (tmp_path / "quickstart.py").write_text(code)
    cache = os.path.join(os.environ["COLLAGE_CACHE_DIR"], "xdg")
    env = dict(os.environ, XDG_CACHE_HOME=cache)
    proc = subprocess.run(["/usr/bin/python3", "quickstart.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout.splitlines()
    assert out[0].startswith("plan (") and "predicted" in out[0], proc.stdout
    assert any(re.match(r"\s+\[\s*0\] \S+", line) for line in out), proc.stdout
    assert re.fullmatch(r"\d", out[-1]), proc.stdout  # argmax of 10 logits
    assert (tmp_path / "plan.json").exists() and (tmp_path / "resnet-tiny.onnx").exists()
    # The tune used the default cost DB, under the (redirected) user cache.
    assert os.path.exists(os.path.join(cache, "collage", "costs.db"))
