# `collage show`: graphviz is run without a shell (the user's paths are argv entries, never
# shell text), labels are escaped, and every registered backend has its own colour.
import os
import re

from conftest import run


def test_svg_path_with_quote_and_command_substitution(cli, workdir, model, plan):
    out_dir = workdir / "show-injection"
    out_dir.mkdir()
    marker = out_dir / "PWNED"
    # Before the fix this went through std::system inside single quotes: the quote ends the
    # string and $(...) runs.
    # Run from out_dir, so a shell would create PWNED there.
    svg = out_dir / "it's $(touch PWNED) \"odd\".svg"
    proc = run(cli, "show", model, "--plan", plan, "--svg", svg, cwd=out_dir, check=False)
    assert not marker.exists(), "a shell ran part of the output path"
    assert proc.returncode == 0, proc.stderr
    assert svg.exists(), os.listdir(out_dir)
    text = svg.read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text
    # No temporary .dot file left beside the output.
    assert sorted(os.listdir(out_dir)) == [svg.name]


def test_svg_without_graphviz_is_an_io_error(cli, workdir, model, plan):
    env = dict(os.environ, PATH=str(workdir / "no-such-dir"))
    proc = run(cli, "show", model, "--plan", plan, "--svg", workdir / "x.svg", check=False, env=env)
    assert proc.returncode == 2, proc.stderr
    assert "graphviz" in proc.stderr


def test_dot_colours_each_backend_distinctly(cli, workdir, model, plan):
    dot = workdir / "placement.dot"
    run(cli, "show", model, "--plan", plan, "--dot", dot)
    text = dot.read_text()
    legend = {}
    for m in re.finditer(r'"?(legend_\w+)"? \[label="([^"]+)", fillcolor="(#[0-9a-f]{6})"\]', text):
        legend[m.group(2)] = m.group(3)
    assert len(legend) >= 2, text
    assert len(set(legend.values())) == len(legend), legend
