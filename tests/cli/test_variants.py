# Variants seen from the command line: `run --backend NAME/VARIANT` builds every kernel the
# backend offers that variant for as it (and still matches the reference), and `--profile`
# shows, per step, the variant it was built as (text and --json).
import json

from conftest import run


def test_run_backend_variant_profile(cli, model):
    proc = run(cli, "run", model, "--backend", "onednn/winograd", "--json", "--profile",
               "--verify", "--threads", "1")
    out = json.loads(proc.stdout)
    assert out["verified"] is True
    steps = out["profile"]["steps"]
    built = {(s["backend"], s["variant"]) for s in steps}
    # resnet-tiny has 3x3 stride-1 convs (Winograd) and 1x1 / strided ones (direct).
    assert ("onednn", "winograd") in built and ("onednn", "") in built, built
    text = run(cli, "run", model, "--backend", "onednn/winograd", "--profile",
               "--threads", "1").stdout
    assert "onednn/winograd" in text, text


def test_run_backend_unknown_variant_is_the_default(cli, model):
    # A variant the backend offers nowhere builds nothing differently: every step default.
    out = json.loads(run(cli, "run", model, "--backend", "onednn/no-such", "--json",
                         "--profile", "--threads", "1").stdout)
    assert {s["variant"] for s in out["profile"]["steps"]} == {""}
