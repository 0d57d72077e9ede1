#!/usr/bin/python3
"""Checks that a zoo model computes what the PyTorch model it stands for computes.

    zoo_vs_pytorch.py --collage build/collage --work-dir DIR MODEL [MODEL...]

For each zoo MODEL (googlenet, inception-v3, gpt2, vit and their -tiny variants):
 1. `collage zoo MODEL` writes the model; its initializers are loaded by name into the PyTorch
    module (torchvision's googlenet / inception_v3 / VisionTransformer, or Hugging Face's
    GPT-2 restated in gpt2_module.py). The mapping is strict: every parameter and buffer of
    the module comes from the zoo file, and every float weight of the file is used. The zoo
    folds each BatchNorm into its conv, as torch.onnx does; the BN then gets the identity
    statistics and the folded shift.
 2. Numerics: PyTorch's output on a random input against `collage run --backend reference`
    on the zoo model with the same input. A wrong kernel size, pad, stride, concat order,
    pooling mode, head count, mask or activation changes the output far beyond rounding.
 3. Structure: the same module (with those weights) exported by torch.onnx.export at the zoo
    model's opset, and both files passed to `collage info`: after import (constant folding)
    they must have the same op histogram, node count, inputs, outputs, parameter count and
    GFLOPs, i.e. the zoo writes the ops the exporter writes.

Runs with Debian's /usr/bin/python3 (python3-torch, python3-torchvision, python3-onnx); a
missing package is an error, never a skip.
"""

import argparse
import functools
import importlib
import os
import subprocess
import sys
import time

try:
    import numpy as np
    import onnx
    import onnx.numpy_helper
    import torch
    import torchvision
    # By module path: torchvision.models.googlenet is also the name of the builder function.
    tv_googlenet = importlib.import_module("torchvision.models.googlenet")
    tv_inception = importlib.import_module("torchvision.models.inception")
    tv_vit = importlib.import_module("torchvision.models.vision_transformer")
except ImportError as e:  # pragma: no cover - the message is the point
    sys.exit(f"zoo_vs_pytorch.py: cannot import {e.name}: install python3-torch, "
             f"python3-torchvision and python3-onnx (run with /usr/bin/python3): {e}")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_module  # noqa: E402

SEED = 20240602

# The zoo's configurations, restated from src/models/*.cc: a drift on either side shows up
# as a shape mismatch or different numbers. structure=False skips the export comparison for
# the full-size transformers (a minute each on top): their op structure is their tiny
# variant's, built by the same code and compared there; their sizes are checked by
# tests/unit/zoo_test.cc; the numerics here still check their configuration (heads, widths,
# vocabulary) and the tied LM head.
CONFIGS = {
    "googlenet": dict(kind="googlenet", width_divisor=1, resolution=224, classes=1000),
    "googlenet-tiny": dict(kind="googlenet", width_divisor=4, resolution=64, classes=10),
    "inception-v3": dict(kind="inception_v3", width_divisor=1, resolution=299, classes=1000),
    "inception-v3-tiny": dict(kind="inception_v3", width_divisor=4, resolution=107, classes=10),
    "gpt2": dict(kind="gpt2", vocab=50257, positions=1024, hidden=768, layers=12, heads=12,
                 seq=128, structure=False),
    "gpt2-tiny": dict(kind="gpt2", vocab=1000, positions=64, hidden=128, layers=2, heads=2,
                      seq=32),
    "vit": dict(kind="vit", image=224, patch=16, layers=12, heads=12, hidden=768, mlp=3072,
                classes=1000, structure=False),
    "vit-tiny": dict(kind="vit", image=64, patch=16, layers=2, heads=2, hidden=64, mlp=256,
                     classes=10),
}

# |collage - torch| <= REL_TOL * max|torch|: float32 sums in another order differ by up to
# 2e-6 of the output's scale here (inception-v3, gpt2); a structural mistake gives errors of
# the order of the scale itself (a swapped Concat, a pool without count_include_pad, a
# missing attention scale: 0.8-1.4x), and erf-GELU in place of GPT-2's tanh-GELU 1.8e-4.
REL_TOL = 2e-5


class Failure(Exception):
    pass


class ZooWeights:
    """The zoo file's initializers, handed out by name; remembers which were used."""

    def __init__(self, proto):
        self.arrays = {t.name: onnx.numpy_helper.to_array(t) for t in proto.graph.initializer}
        self.used = set()

    def take(self, name, shape, transpose=False):
        if name not in self.arrays:
            raise Failure(f"the zoo model has no weight '{name}'")
        self.used.add(name)
        array = self.arrays[name].T if transpose else self.arrays[name]
        if tuple(array.shape) != tuple(shape):
            raise Failure(f"weight '{name}'{' transposed' if transpose else ''} is "
                          f"{list(array.shape)}, PyTorch's is {list(shape)}")
        return torch.from_numpy(np.array(array, copy=True))

    def check_all_used(self):
        unused = sorted(n for n, a in self.arrays.items()
                        if n not in self.used and a.dtype == np.float32 and a.size > 1)
        if unused:
            raise Failure(f"{len(unused)} zoo weights have no PyTorch counterpart: {unused[:8]}")


def load_zoo_weights(module, zoo, special):
    """Fills every entry of module's state dict from the zoo (special(key, tensor) may supply
    a value, or None for the plain same-name, same-shape copy)."""
    state = {}
    for key, tensor in module.state_dict().items():
        value = special(key, tensor)
        if value is None:
            value = tensor if key.endswith("num_batches_tracked") else zoo.take(key, tensor.shape)
        state[key] = value
    module.load_state_dict(state, strict=True)
    zoo.check_all_used()


def folded_batchnorm(module, zoo):
    """BasicConv2d's BN, folded into the conv by the zoo (as torch.onnx does): identity
    statistics, and the folded shift (the zoo conv's bias) as the BN's bias."""

    def special(key, tensor):
        for leaf in ("weight", "bias", "running_mean", "running_var"):
            suffix = ".bn." + leaf
            if not key.endswith(suffix):
                continue
            prefix = key[:-len(suffix)]
            if leaf == "bias":
                return zoo.take(prefix + ".conv.bias", tensor.shape)
            if leaf == "running_var":
                eps = module.get_submodule(prefix + ".bn").eps
                return torch.full_like(tensor, 1.0 - eps)
            return torch.ones_like(tensor) if leaf == "weight" else torch.zeros_like(tensor)
        return None

    return special


def scaled_conv_block(basic_conv, divisor):
    """torchvision's BasicConv2d with every channel count divided (the tiny variants); the
    blocks themselves are torchvision's, unchanged."""

    def make(in_channels, out_channels, **kwargs):
        cin = in_channels if in_channels == 3 else in_channels // divisor
        return basic_conv(cin, out_channels // divisor, **kwargs)

    return make


def build_googlenet(c):
    if c["width_divisor"] == 1:
        model = torchvision.models.googlenet(weights=None, aux_logits=False, init_weights=False)
    else:
        conv = scaled_conv_block(tv_googlenet.BasicConv2d, c["width_divisor"])
        model = tv_googlenet.GoogLeNet(
            aux_logits=False, transform_input=False, init_weights=False,
            blocks=[conv, functools.partial(tv_googlenet.Inception, conv_block=conv), None])
        model.fc = torch.nn.Linear(1024 // c["width_divisor"], c["classes"])
    # The zoo has no input transform: torchvision's default without pretrained weights.
    assert not model.transform_input and not model.aux_logits
    return model


def build_inception_v3(c):
    if c["width_divisor"] == 1:
        model = torchvision.models.inception_v3(weights=None, aux_logits=False,
                                                init_weights=False)
    else:
        conv = scaled_conv_block(tv_inception.BasicConv2d, c["width_divisor"])
        blocks = [conv] + [functools.partial(block, conv_block=conv) for block in (
            tv_inception.InceptionA, tv_inception.InceptionB, tv_inception.InceptionC,
            tv_inception.InceptionD, tv_inception.InceptionE, tv_inception.InceptionAux)]
        model = tv_inception.Inception3(aux_logits=False, transform_input=False,
                                        inception_blocks=blocks, init_weights=False)
        model.fc = torch.nn.Linear(2048 // c["width_divisor"], c["classes"])
    assert not model.transform_input and not model.aux_logits
    return model


def build_vit(c):
    if c["image"] == 224 and c["layers"] == 12:
        model = torchvision.models.vit_b_16(weights=None)
    else:
        model = tv_vit.VisionTransformer(
            image_size=c["image"], patch_size=c["patch"], num_layers=c["layers"],
            num_heads=c["heads"], hidden_dim=c["hidden"], mlp_dim=c["mlp"],
            num_classes=c["classes"])
    return model


def vit_special(zoo):
    # nn.Linear weights on 3-D inputs are MatMuls with the pre-transposed weight, [in, out];
    # out_proj and the head are Gemm(transB=1) with PyTorch's [out, in].
    def special(key, tensor):
        if key.endswith(("self_attention.in_proj_weight", "mlp.0.weight", "mlp.3.weight")):
            return zoo.take(key, tensor.shape, transpose=True)
        return None

    return special


def gpt2_special(zoo, c):
    def special(key, tensor):
        if key == "lm_head.weight":
            # Tied: the zoo's MatMul weight must be exactly the token embedding, transposed.
            head = zoo.take("lm_head.weight", tensor.shape, transpose=True)
            wte = zoo.take("transformer.wte.weight", tensor.shape)
            if not torch.equal(head, wte):
                raise Failure("lm_head.weight is not the transposed token embedding")
            return wte
        if key.endswith(".attn.bias"):
            # The causal-mask buffer: the zoo's constant must be its [S, S] corner.
            seq = c["seq"]
            mask = torch.from_numpy(np.array(zoo.arrays["causal_mask"], copy=True))
            if not torch.equal(mask, tensor[:, :, :seq, :seq]):
                raise Failure("the zoo's causal_mask is not tril(ones) of the sequence")
            return tensor
        return None

    return special


def build_module(name, zoo):
    """The PyTorch model for zoo model `name`, with the zoo's weights, and its input."""
    c = CONFIGS[name]
    kind = c["kind"]
    if kind == "googlenet" or kind == "inception_v3":
        model = build_googlenet(c) if kind == "googlenet" else build_inception_v3(c)
        special = folded_batchnorm(model, zoo)
        x = torch.randn(1, 3, c["resolution"], c["resolution"])
        names = (["input"], ["logits"])
    elif kind == "vit":
        model = build_vit(c)
        special = vit_special(zoo)
        x = torch.randn(1, 3, c["image"], c["image"])
        names = (["input"], ["logits"])
    else:
        model = gpt2_module.GPT2LMHeadModel(vocab=c["vocab"], positions=c["positions"],
                                            hidden=c["hidden"], layers=c["layers"],
                                            heads=c["heads"])
        special = gpt2_special(zoo, c)
        x = torch.randint(0, c["vocab"], (1, c["seq"]), dtype=torch.int64)
        names = (["input_ids"], ["logits"])
    model.eval()
    load_zoo_weights(model, zoo, special)
    return model, x, names


def run(cmd, what):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise Failure(f"{what} failed ({result.returncode}): {' '.join(cmd)}\n"
                      f"{result.stdout}{result.stderr}")
    return result.stdout


def save_tensor(path, array, name):
    with open(path, "wb") as f:
        f.write(onnx.numpy_helper.from_array(np.ascontiguousarray(array), name).SerializeToString())


def info_lines(collage, path):
    """`collage info` without the line naming the file."""
    out = run([collage, "info", path], "collage info")
    return [line for line in out.splitlines() if not line.startswith("model:")]


class Phases:
    """Wall time of each step, printed with the result (the full-size models take minutes)."""

    def __init__(self):
        self.start = self.last = time.time()
        self.spent = []

    def done(self, what):
        now = time.time()
        self.spent.append(f"{what} {now - self.last:.0f}")
        self.last = now

    def __str__(self):
        return f"{time.time() - self.start:.0f} s ({', '.join(self.spent)})"


def check_model(name, collage, work_dir):
    phases = Phases()
    model_dir = os.path.join(work_dir, name)
    inputs_dir = os.path.join(model_dir, "inputs")
    outputs_dir = os.path.join(model_dir, "outputs")
    os.makedirs(inputs_dir, exist_ok=True)
    os.makedirs(outputs_dir, exist_ok=True)
    zoo_path = os.path.join(model_dir, "zoo.onnx")
    run([collage, "zoo", name, "-o", zoo_path], "collage zoo")
    proto = onnx.load(zoo_path)
    opset = next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
    zoo = ZooWeights(proto)
    del proto
    phases.done("zoo")

    torch.manual_seed(SEED)
    model, x, (input_names, output_names) = build_module(name, zoo)
    del zoo
    with torch.no_grad():
        expected = model(x).numpy()
    phases.done("torch")

    # Numerics: collage (reference backend) on the zoo file vs PyTorch.
    save_tensor(os.path.join(inputs_dir, "input_0.pb"), x.numpy(), input_names[0])
    run([collage, "run", zoo_path, "--backend", "reference", "--inputs", inputs_dir,
         "--outputs", outputs_dir], "collage run")
    phases.done("collage run")
    with open(os.path.join(outputs_dir, "output_0.pb"), "rb") as f:
        got = onnx.numpy_helper.to_array(onnx.TensorProto.FromString(f.read()))
    if got.shape != expected.shape:
        raise Failure(f"output shape {list(got.shape)}, PyTorch's {list(expected.shape)}")
    scale = float(np.abs(expected).max())
    spread = float(expected.std())
    if not np.isfinite(expected).all() or spread < 1e-3 * max(scale, 1e-30) or scale < 1e-4:
        raise Failure(f"PyTorch's output is degenerate (max |y| {scale:.3g}, std {spread:.3g})")
    err = float(np.abs(got.astype(np.float64) - expected).max())
    numerics = f"max |collage - torch| {err:.3g} (max |torch| {scale:.3g}, tolerance " \
               f"{REL_TOL * scale:.3g})"
    if not err <= REL_TOL * scale:
        raise Failure("outputs differ: " + numerics)

    if not CONFIGS[name].get("structure", True):
        print(f"{name}: ok in {phases}; {numerics}; structure: see {name}-tiny", flush=True)
        os.remove(zoo_path)
        return

    # Structure: torch.onnx's export of the same module imports to the same graph.
    export_path = os.path.join(model_dir, "torch_export.onnx")
    # Not under no_grad: there nn.MultiheadAttention takes its fused fast path, which has no
    # ONNX export (users export with grad mode on, as here).
    torch.onnx.export(model, (x,), export_path, opset_version=opset, input_names=input_names,
                      output_names=output_names, do_constant_folding=True)
    del model
    phases.done("export")
    zoo_info = info_lines(collage, zoo_path)
    export_info = info_lines(collage, export_path)
    phases.done("info")
    if zoo_info != export_info:
        raise Failure("`collage info` differs between the zoo model and torch.onnx's export "
                      f"(opset {opset}):\n--- zoo\n" + "\n".join(zoo_info) +
                      "\n--- torch.onnx.export\n" + "\n".join(export_info))
    stats = ", ".join(line.strip() for line in zoo_info
                      if line.startswith(("nodes:", "parameters:", "GFLOPs:")))
    print(f"{name}: ok in {phases}; {numerics}; structure equal to "
          f"torch.onnx's opset-{opset} export ({stats})", flush=True)
    for path in (zoo_path, export_path):  # the full-size files are hundreds of MB
        os.remove(path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--collage", required=True, help="the collage executable")
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("models", nargs="+", help="zoo models: " + ", ".join(CONFIGS))
    args = parser.parse_args()
    unknown = [m for m in args.models if m not in CONFIGS]
    if unknown:
        sys.exit(f"zoo_vs_pytorch.py: no PyTorch counterpart for {unknown}; known: "
                 f"{list(CONFIGS)}")
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    failed = []
    for name in args.models:
        try:
            check_model(name, args.collage, args.work_dir)
        except Failure as e:
            print(f"{name}: FAILED: {e}", flush=True)
            failed.append(name)
    if failed:
        sys.exit(f"zoo_vs_pytorch.py: {len(failed)} of {len(args.models)} failed: {failed}")


if __name__ == "__main__":
    main()
