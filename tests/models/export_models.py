#!/usr/bin/python3
"""Exports real PyTorch models to ONNX in the ONNX test-folder layout.

    export_models.py OUT_DIR [--models resnet50,mobilenet_v2,...]

Each model lands in OUT_DIR/<name>/ as model.onnx plus test_data_set_0/input_K.pb and
output_K.pb holding PyTorch's own outputs, so collage_conformance --dir can check collage
against PyTorch. Weights are random (nothing is downloaded) but reproducible from a fixed seed.

This must run with Debian's /usr/bin/python3, which has python3-torch, python3-torchvision and
python3-onnx. A missing package is an error, never a skip: install-deps installs them, so their
absence means a broken environment that the tests have to report.
"""

import argparse
import os
import sys
import time

try:
    import numpy as np
    import onnx
    import onnx.numpy_helper
    import torch
    import torchvision
except ImportError as e:  # pragma: no cover - the message is the point
    sys.exit(f"export_models.py: cannot import {e.name}: install python3-torch, "
             f"python3-torchvision and python3-onnx (run with /usr/bin/python3): {e}")

SEED = 20240601


def randomize_batchnorm(model, calibration_input):
    """Gives every BatchNorm statistics and affine parameters that matter.

    Default-initialised BN (mean 0, var 1, weight 1, bias 0) is close to the identity, so a
    wrong BN kernel or a broken Conv+BN fold could pass unnoticed. Statistics measured on a
    random batch keep activations in a sane range through 50 layers; the random perturbation
    on top makes sure they are not the batch's exact statistics either.
    """
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None  # cumulative average: the statistics of exactly this batch
    model.train()
    with torch.no_grad():
        model(calibration_input)
    model.eval()
    with torch.no_grad():
        for bn in bns:
            n = bn.num_features
            bn.running_var.mul_(torch.empty(n).uniform_(0.8, 1.25))
            bn.running_mean.add_(0.1 * torch.randn(n) * bn.running_var.sqrt())
            if bn.affine:
                bn.weight.copy_(torch.empty(n).uniform_(0.5, 1.5))
                bn.bias.copy_(0.1 * torch.randn(n))


class SelfAttention(torch.nn.Module):
    """Multi-head self-attention written out with MatMul/Softmax (no fused attention op)."""

    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.query = torch.nn.Linear(hidden, hidden)
        self.key = torch.nn.Linear(hidden, hidden)
        self.value = torch.nn.Linear(hidden, hidden)
        self.out = torch.nn.Linear(hidden, hidden)

    def split_heads(self, x):
        b, s, _ = x.shape
        return x.view(b, s, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x, mask_bias):
        q = self.split_heads(self.query(x))
        k = self.split_heads(self.key(x))
        v = self.split_heads(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / (self.head_dim ** 0.5)
        probs = torch.softmax(scores + mask_bias, dim=-1)
        context = torch.matmul(probs, v).transpose(1, 2)
        b, s, _, _ = context.shape
        return self.out(context.reshape(b, s, self.heads * self.head_dim))


class EncoderLayer(torch.nn.Module):
    def __init__(self, hidden, heads, ffn):
        super().__init__()
        self.attention = SelfAttention(hidden, heads)
        self.norm1 = torch.nn.LayerNorm(hidden, eps=1e-12)
        self.ffn_in = torch.nn.Linear(hidden, ffn)
        self.gelu = torch.nn.GELU()
        self.ffn_out = torch.nn.Linear(ffn, hidden)
        self.norm2 = torch.nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x, mask_bias):
        x = self.norm1(x + self.attention(x, mask_bias))
        return self.norm2(x + self.ffn_out(self.gelu(self.ffn_in(x))))


class TinyBert(torch.nn.Module):
    """A BERT-style encoder: embeddings, 2 post-norm layers, a tanh pooler on token 0."""

    def __init__(self, vocab=1000, hidden=128, heads=4, layers=2, ffn=512, max_len=64):
        super().__init__()
        self.tokens = torch.nn.Embedding(vocab, hidden)
        self.positions = torch.nn.Embedding(max_len, hidden)
        self.norm = torch.nn.LayerNorm(hidden, eps=1e-12)
        self.layers = torch.nn.ModuleList(EncoderLayer(hidden, heads, ffn) for _ in range(layers))
        self.pooler = torch.nn.Linear(hidden, hidden)

    def forward(self, input_ids):
        seq = input_ids.shape[1]
        positions = torch.arange(seq, dtype=torch.int64).unsqueeze(0)
        x = self.norm(self.tokens(input_ids) + self.positions(positions))
        # Token id 0 is padding: a large negative bias keeps attention off it (the
        # Equal/Cast/Mul path every BERT export has).
        mask_bias = (input_ids == 0).to(torch.float32)[:, None, None, :] * -10000.0
        for layer in self.layers:
            x = layer(x, mask_bias)
        return x, torch.tanh(self.pooler(x[:, 0]))


class EinsumBlock(torch.nn.Module):
    """Attention and projections written with torch.einsum, as MaxViT and many research
    transformers are: batched products, a contraction over two labels at once (heads and
    head_dim into the output projection), an ellipsis, and a sum no output keeps."""

    def __init__(self, hidden=64, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(hidden, 3 * hidden)
        self.proj = torch.nn.Parameter(0.2 * torch.randn(heads, hidden // heads, hidden))
        self.gate = torch.nn.Parameter(torch.randn(hidden) / hidden ** 0.5)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) * (c // self.heads) ** -0.5
        context = torch.einsum("bhqk,bhkd->bhqd", scores.softmax(-1), v)
        out = torch.einsum("bhqd,hdc->bqc", context, self.proj) + x
        gate = torch.einsum("...c,c->...", out, self.gate)
        total = torch.einsum("bqc->b", out)
        return torch.relu(out) * torch.sigmoid(gate).unsqueeze(-1) + total[:, None, None] / (n * c)


def einsum_model(opset):
    def build():
        model = EinsumBlock().eval()
        return model, (torch.randn(1, 20, 64),), ["x"], ["y"]

    return build, opset, None


class UNetBlock(torch.nn.Module):
    """A two-level UNet with an FPN-style top-down sum, as segmentation and detection models
    upsample: nearest x2 (PyTorch's default interpolate), bilinear x2 without aligned corners,
    a skip connection concatenated and one added."""

    def __init__(self, width=16):
        super().__init__()
        conv = lambda i, o, s=1: torch.nn.Sequential(  # noqa: E731
            torch.nn.Conv2d(i, o, 3, s, 1), torch.nn.BatchNorm2d(o), torch.nn.ReLU())
        self.enc1 = conv(3, width)
        self.enc2 = conv(width, 2 * width, 2)
        self.enc3 = conv(2 * width, 4 * width, 2)
        self.lateral = torch.nn.Conv2d(2 * width, 4 * width, 1)
        self.dec2 = conv(4 * width, 2 * width)
        self.dec1 = conv(2 * width + width, width)
        self.head = torch.nn.Conv2d(width, 5, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(e1)
        e3 = self.enc3(e2)
        top = torch.nn.functional.interpolate(e3, scale_factor=2.0, mode="nearest")
        d2 = self.dec2(top + self.lateral(e2))
        up = torch.nn.functional.interpolate(d2, scale_factor=2.0, mode="bilinear",
                                             align_corners=False)
        d1 = self.dec1(torch.cat([up, e1], dim=1))
        return self.head(d1)


def unet_model(opset):
    def build():
        model = UNetBlock()
        randomize_batchnorm(model, torch.randn(4, 3, 48, 48))
        return model.eval(), (torch.randn(1, 3, 48, 48),), ["image"], ["mask"]

    return build, opset, None


class GroupNormBlock(torch.nn.Module):
    """A diffusion UNet's residual block (GroupNorm, SiLU, a time embedding added per channel,
    a skip sum), then a wav2vec2-style Conv1d with GroupNorm of one channel per group. PyTorch
    below opset 18 exports each GroupNorm as Reshape [N, G, -1], InstanceNormalization,
    Reshape back, Mul gamma, Add beta."""

    def __init__(self, width=32, groups=8):
        super().__init__()
        self.inp = torch.nn.Conv2d(4, width, 3, 1, 1)
        self.norm1 = torch.nn.GroupNorm(groups, width)
        self.conv1 = torch.nn.Conv2d(width, width, 3, 1, 1)
        self.time = torch.nn.Linear(16, width)
        self.norm2 = torch.nn.GroupNorm(groups, width)
        self.conv2 = torch.nn.Conv2d(width, width, 3, 1, 1)
        self.audio = torch.nn.Conv1d(width, width, 4, 2)
        self.norm3 = torch.nn.GroupNorm(width, width)

    def forward(self, x, t):
        x = self.inp(x)
        h = self.conv1(torch.nn.functional.silu(self.norm1(x)))
        h = h + self.time(t)[:, :, None, None]
        h = x + self.conv2(torch.nn.functional.silu(self.norm2(h)))
        return torch.nn.functional.gelu(self.norm3(self.audio(h.flatten(2))))


def group_norm_model(opset):
    def build():
        model = GroupNormBlock()
        with torch.no_grad():  # defaults (weight 1, bias 0) would hide a dropped affine part
            for m in model.modules():
                if isinstance(m, torch.nn.GroupNorm):
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.normal_(0, 0.1)
        return model.eval(), (torch.randn(1, 4, 16, 16), torch.randn(1, 16)), ["x", "t"], ["y"]

    return build, opset, None


class CRNN(torch.nn.Module):
    """A text recogniser's shape (CRNN): convs and pools down to one row, its columns a
    sequence read by a 2-layer bidirectional LSTM, then a batch-first GRU given an initial
    state and a ReLU RNN, and a per-step classifier. PyTorch exports each recurrent layer as
    an ONNX LSTM/GRU/RNN node (GRU with linear_before_reset=1) between Transposes."""

    def __init__(self, classes=37, hidden=48):
        super().__init__()
        conv = lambda i, o: torch.nn.Sequential(  # noqa: E731
            torch.nn.Conv2d(i, o, 3, 1, 1), torch.nn.BatchNorm2d(o), torch.nn.ReLU())
        self.features = torch.nn.Sequential(
            conv(1, 32), torch.nn.MaxPool2d(2), conv(32, 64), torch.nn.MaxPool2d(2),
            conv(64, 64), torch.nn.MaxPool2d((2, 1)), conv(64, 96), torch.nn.MaxPool2d((4, 1)))
        self.lstm = torch.nn.LSTM(96, hidden, num_layers=2, bidirectional=True)
        self.gru = torch.nn.GRU(2 * hidden, hidden, batch_first=True)
        self.rnn = torch.nn.RNN(hidden, hidden, nonlinearity="relu")
        self.head = torch.nn.Linear(hidden, classes)

    def forward(self, image, h0):
        f = self.features(image).squeeze(2).permute(2, 0, 1)  # (width, batch, channels)
        seq, _ = self.lstm(f)
        seq, _ = self.gru(seq.transpose(0, 1), h0)
        seq, _ = self.rnn(seq.transpose(0, 1))
        return self.head(seq).log_softmax(-1)


def crnn_model(opset):
    def build():
        model = CRNN()
        randomize_batchnorm(model.features, torch.randn(4, 1, 32, 100))
        return (model.eval(), (torch.randn(2, 1, 32, 100), 0.5 * torch.randn(1, 2, 48)),
                ["image", "h0"], ["log_probs"])

    return build, opset, None


class RMSNorm(torch.nn.Module):
    """LLaMA's, T5's and Mistral's norm: x / sqrt(mean(x^2) + eps), scaled; no mean taken
    away, no shift. Exports as Pow/ReduceMean/Add/Sqrt/Div/Mul."""

    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(1 + 0.1 * torch.randn(hidden))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class DecoderLayer(torch.nn.Module):
    """A LLaMA-style pre-norm layer: rotary position embeddings on queries and keys (Slice,
    Neg, Concat, Mul, Add), a causal mask added to the scores, and a SwiGLU MLP
    (silu(gate) * up, then down), no biases anywhere."""

    def __init__(self, hidden, heads, ffn):
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.norm1 = RMSNorm(hidden)
        self.q, self.k, self.v, self.o = (torch.nn.Linear(hidden, hidden, bias=False)
                                          for _ in range(4))
        self.norm2 = RMSNorm(hidden)
        self.gate = torch.nn.Linear(hidden, ffn, bias=False)
        self.up = torch.nn.Linear(hidden, ffn, bias=False)
        self.down = torch.nn.Linear(ffn, hidden, bias=False)

    def split_heads(self, x):
        b, s, _ = x.shape
        return x.view(b, s, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x, cos, sin, mask):
        h = self.norm1(x)
        q, k, v = (self.split_heads(proj(h)) for proj in (self.q, self.k, self.v))
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        scores = torch.matmul(q, k.transpose(-1, -2)) / (self.head_dim ** 0.5) + mask
        context = torch.matmul(torch.softmax(scores, dim=-1), v).transpose(1, 2)
        b, s, _, _ = context.shape
        x = x + self.o(context.reshape(b, s, self.heads * self.head_dim))
        h = self.norm2(x)
        return x + self.down(torch.nn.functional.silu(self.gate(h)) * self.up(h))


class TinyLlama(torch.nn.Module):
    """A LLaMA-style decoder: token embeddings, 2 decoder layers, a final RMSNorm and an
    untied LM head; rotary tables and the causal mask are buffers sliced to the sequence."""

    def __init__(self, vocab=1000, hidden=128, heads=4, layers=2, ffn=344, max_len=64):
        super().__init__()
        self.tokens = torch.nn.Embedding(vocab, hidden)
        self.layers = torch.nn.ModuleList(DecoderLayer(hidden, heads, ffn) for _ in range(layers))
        self.norm = RMSNorm(hidden)
        self.head = torch.nn.Linear(hidden, vocab, bias=False)
        head_dim = hidden // heads
        inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
        angles = torch.outer(torch.arange(max_len).float(), inv_freq)
        angles = torch.cat((angles, angles), dim=-1)[None, None]
        self.register_buffer("cos", angles.cos())
        self.register_buffer("sin", angles.sin())
        causal = torch.full((max_len, max_len), float("-inf")).triu(1)[None, None]
        self.register_buffer("causal", causal)

    def forward(self, input_ids):
        seq = input_ids.shape[1]
        cos, sin = self.cos[:, :, :seq], self.sin[:, :, :seq]
        mask = self.causal[:, :, :seq, :seq]
        x = self.tokens(input_ids)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.head(self.norm(x))


def llama_model(opset):
    def build():
        model = TinyLlama().eval()
        ids = torch.randint(0, 1000, (1, 32), dtype=torch.int64)
        return model, (ids,), ["input_ids"], ["logits"]

    return build, opset, None


def randomize_layernorm(model):
    # LayerNorm defaults (weight 1, bias 0) would hide a kernel that drops the affine part.
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.1)


def image_model(name, opset, batch=1, dynamic_batch=False, **kwargs):
    def build():
        model = getattr(torchvision.models, name)(weights=None, **kwargs)
        x = torch.randn(batch, 3, 224, 224)
        randomize_batchnorm(model, torch.randn(4, 3, 224, 224))
        return model, (x,), ["input"], ["logits"]

    dynamic_axes = {"input": {0: "batch"}, "logits": {0: "batch"}} if dynamic_batch else None
    return build, opset, dynamic_axes


def video_model(name, opset):
    def build():
        # torchvision's video classifiers take (batch, channels, frames, height, width): 16
        # frames of the crop their weights were trained on (112x112 for the R(2+1)D / R3D
        # family, 224x224 for S3D and MViT, whose pooling and position embeddings need it).
        side = torchvision.models.get_model_weights(name).DEFAULT.transforms().crop_size[0]
        model = getattr(torchvision.models.video, name)(weights=None)
        randomize_batchnorm(model, torch.randn(2, 3, 16, side, side))
        return model, (torch.randn(1, 3, 16, side, side),), ["input"], ["logits"]

    return build, opset, None


class SegmentationOutput(torch.nn.Module):
    """torchvision's segmentation models return {"out": ...}: the logits tensor alone."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)["out"]


def segmentation_model(name, opset):
    def build():
        # Default BatchNorm statistics: with randomized ones (randomize_batchnorm) LRASPP's
        # HardSigmoid/HardSwish gates amplify rounding until even the reference backend, in
        # double, misses PyTorch's logits by 0.4 (and every backend by as much).
        model = getattr(torchvision.models.segmentation, name)(
            weights=None, weights_backbone=None, num_classes=21)
        return SegmentationOutput(model.eval()).eval(), (torch.randn(1, 3, 320, 320),), \
            ["image"], ["out"]

    return build, opset, None


def bert_model(opset):
    def build():
        model = TinyBert()
        randomize_layernorm(model)
        model.eval()
        ids = torch.randint(1, 1000, (1, 32), dtype=torch.int64)
        ids[0, 27:] = 0  # trailing padding, so the attention mask does something
        return model, (ids,), ["input_ids"], ["last_hidden_state", "pooled"]

    return build, opset, None


# name -> (builder, opset, dynamic_axes). mobilenet_v2 has a symbolic batch dim and its test
# data uses batch 2, so the runner's input-shape binding is what makes it runnable.
MODELS = {
    "resnet50": image_model("resnet50", 11),
    "mobilenet_v2": image_model("mobilenet_v2", 13, batch=2, dynamic_batch=True),
    "googlenet": image_model("googlenet", 15, aux_logits=False, init_weights=True),
    "bert_opset13": bert_model(13),
    "bert_opset17": bert_model(17),
    "einsum_block": einsum_model(13),
    "unet_block": unet_model(13),
    "llama_block": llama_model(14),
    "crnn": crnn_model(14),
    "groupnorm_block": group_norm_model(17),
}

# Ops each export must (or must not) contain, so a silent change in the exporter cannot
# make a test stop covering what it is meant to cover.
REQUIRED_OPS = {
    "resnet50": {"Conv", "Relu", "MaxPool", "Add", "GlobalAveragePool", "Gemm"},
    "mobilenet_v2": {"Conv", "Clip", "Add", "GlobalAveragePool", "Gemm"},
    "googlenet": {"Conv", "Relu", "MaxPool", "Concat", "Gemm"},
    "bert_opset13": {"Gather", "MatMul", "Softmax", "Erf", "ReduceMean", "Sqrt", "Tanh"},
    "bert_opset17": {"Gather", "MatMul", "Softmax", "Erf", "LayerNormalization", "Tanh"},
    "einsum_block": {"Einsum", "Softmax"},
    "unet_block": {"Resize", "Conv", "Concat", "Add"},
    "llama_block": {"Gather", "MatMul", "Softmax", "Pow", "ReduceMean", "Sqrt", "Neg", "Concat",
                    "Sigmoid"},
    "crnn": {"Conv", "MaxPool", "LSTM", "GRU", "RNN", "LogSoftmax"},
    "groupnorm_block": {"Conv", "Reshape", "InstanceNormalization", "Sigmoid", "Gemm", "Erf"},
}
FORBIDDEN_OPS = {
    "groupnorm_block": {"GroupNormalization"},
    "bert_opset13": {"LayerNormalization"},
    "llama_block": {"LayerNormalization"},
}


# Any other torchvision classifier, as "tv:NAME" (e.g. tv:densenet121): bench/run.sh times
# such held-out models next to the zoo's. Opset 13, batch 1, 1x3x224x224, random weights.
# torchvision's segmentation models too (tv:lraspp_mobilenet_v3_large): 1x3x320x320, their
# "out" logits; and its video classifiers (tv:r2plus1d_18): 1x3x16x112x112 or 1x3x16x224x224.
TORCHVISION_PREFIX = "tv:"


def model_spec(name):
    """MODELS[name], or the torchvision classifier a "tv:NAME" names (None if neither)."""
    if name in MODELS:
        return MODELS[name]
    if name.startswith(TORCHVISION_PREFIX):
        tv_name = name[len(TORCHVISION_PREFIX):]
        if tv_name in torchvision.models.list_models(module=torchvision.models):
            return image_model(tv_name, 13)
        if tv_name in torchvision.models.list_models(module=torchvision.models.segmentation):
            return segmentation_model(tv_name, 13)
        if tv_name in torchvision.models.list_models(module=torchvision.models.video):
            return video_model(tv_name, 13)
    return None


def output_dir_name(name):
    return name[len(TORCHVISION_PREFIX):] if name.startswith(TORCHVISION_PREFIX) else name


def save_tensor(path, array, name):
    with open(path, "wb") as f:
        f.write(onnx.numpy_helper.from_array(np.ascontiguousarray(array), name).SerializeToString())


def export(name, out_dir):
    build, opset, dynamic_axes = model_spec(name)
    torch.manual_seed(SEED)
    np.random.seed(SEED)
    model, inputs, input_names, output_names = build()
    model.eval()
    with torch.no_grad():
        outputs = model(*inputs)
    if isinstance(outputs, torch.Tensor):
        outputs = (outputs,)

    model_dir = os.path.join(out_dir, output_dir_name(name))
    data_dir = os.path.join(model_dir, "test_data_set_0")
    os.makedirs(data_dir, exist_ok=True)
    model_path = os.path.join(model_dir, "model.onnx")
    torch.onnx.export(model, inputs, model_path, opset_version=opset, input_names=input_names,
                      output_names=output_names, dynamic_axes=dynamic_axes,
                      do_constant_folding=True)

    proto = onnx.load(model_path)
    onnx.checker.check_model(proto)
    ops = {node.op_type for node in proto.graph.node}
    missing = REQUIRED_OPS.get(name, set()) - ops
    present = FORBIDDEN_OPS.get(name, set()) & ops
    if missing or present:
        raise RuntimeError(f"{name}: export lacks {sorted(missing)} / has {sorted(present)}; "
                           f"ops: {sorted(ops)}")

    for k, (x, input_name) in enumerate(zip(inputs, input_names)):
        save_tensor(os.path.join(data_dir, f"input_{k}.pb"), x.numpy(), input_name)
    for k, (y, output_name) in enumerate(zip(outputs, output_names)):
        save_tensor(os.path.join(data_dir, f"output_{k}.pb"), y.numpy(), output_name)
    return len(proto.graph.node)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--models", default=",".join(MODELS),
                        help="comma-separated subset of: " + ", ".join(MODELS) +
                        "; or tv:NAME for any torchvision classifier, segmentation or "
                        "video model (tv:densenet121, tv:r2plus1d_18)")
    args = parser.parse_args()
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if model_spec(n) is None]
    if unknown:
        sys.exit(f"export_models.py: unknown models {unknown}; known: {list(MODELS)} and "
                 f"tv:NAME for NAME in torchvision.models.list_models() (classifiers, "
                 f"segmentation, video)")
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    os.makedirs(args.out_dir, exist_ok=True)
    for name in names:
        start = time.time()
        nodes = export(name, args.out_dir)
        print(f"exported {name}: {nodes} nodes in {time.time() - start:.1f} s", flush=True)


if __name__ == "__main__":
    main()
