#!/usr/bin/env python3
"""PyTorch as a peer for the GPU benchmark: runs an ONNX file (a zoo export) with PyTorch ops,
eagerly or under torch.compile, on the GPU (or the CPU), and times it.

    torch_run.py MODEL.onnx [--mode eager|compile] [--device cuda|cpu] [--tf32]
                 [--warmup N] [--repeat N] [--write-inputs DIR] [--inputs DIR]
                 [--compare DIR]

Why an interpreter and not the original nn.Module: collage's zoo writes each model as
torch.onnx.export writes it (BatchNorm folded, weights by PyTorch parameter names), and some
of the zoo has no PyTorch module in the GPU machine's environment (no torchvision or
Hugging Face there). Running the same file's nodes with the same PyTorch ops (F.conv2d,
torch.matmul, ...) on the same weights is PyTorch eager on the same export; torch.compile
traces the forward (a fixed loop over the nodes) into one FX graph, so the interpreter's
Python overhead is gone there. Eager pays a dict lookup per node on top of PyTorch's own
dispatch (a few microseconds a node): say so when reading eager numbers of small models.

Prints one JSON object: {"mode", "device", "tf32", "median_ms", "min_ms", "runs",
"torch": version, "compare": {...} when --compare}. Inputs: random (the seed is fixed) or
the ONNX test-data files of --inputs (input_0.pb, ...); --write-inputs saves them there for
`collage run --inputs`. --compare DIR checks the outputs against output_K.pb files (max
|diff| <= 1e-3 x max |reference|, the bench's rule for ONNX Runtime too).

ctest's models_torch_peer_* (tests/models/torch_peer_check.sh) check it against collage's
reference backend on every small zoo model, on the CPU.
"""

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import onnx
import onnx.numpy_helper
import torch
import torch.nn.functional as F

ONNX_TO_TORCH = {
    onnx.TensorProto.FLOAT: torch.float32,
    onnx.TensorProto.DOUBLE: torch.float64,
    onnx.TensorProto.INT64: torch.int64,
    onnx.TensorProto.INT32: torch.int32,
    onnx.TensorProto.BOOL: torch.bool,
    onnx.TensorProto.FLOAT16: torch.float16,
}


def attrs_of(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def ints(t):
    return [int(v) for v in t]


def pad_for(pads, n):
    """ONNX pads [b1..bn, e1..en] as F.pad's (last axis first) list."""
    out = []
    for i in reversed(range(n)):
        out += [pads[i], pads[i + n]]
    return out


def conv(x, w, b, a):
    n = x.dim() - 2
    pads = list(a.get("pads", [0] * 2 * n))
    if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        raise NotImplementedError("auto_pad")
    if pads[:n] != pads[n:]:
        x = F.pad(x, pad_for(pads, n))
        pads = [0] * 2 * n
    fn = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[n]
    return fn(x, w, b, stride=a.get("strides", [1] * n), padding=pads[:n],
              dilation=a.get("dilations", [1] * n), groups=a.get("group", 1))


def conv_transpose(x, w, b, a):
    n = x.dim() - 2
    pads = list(a.get("pads", [0] * 2 * n))
    if pads[:n] != pads[n:] or "output_shape" in a:
        raise NotImplementedError("asymmetric pads or output_shape in ConvTranspose")
    fn = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[n]
    return fn(x, w, b, stride=a.get("strides", [1] * n), padding=pads[:n],
              output_padding=a.get("output_padding", [0] * n), groups=a.get("group", 1),
              dilation=a.get("dilations", [1] * n))


def pool(x, a, kind):
    n = x.dim() - 2
    k = a["kernel_shape"]
    pads = list(a.get("pads", [0] * 2 * n))
    strides = a.get("strides", [1] * n)
    ceil = bool(a.get("ceil_mode", 0))
    if kind == "max":
        if pads[:n] != pads[n:]:
            x = F.pad(x, pad_for(pads, n), value=float("-inf"))
            pads = [0] * 2 * n
        fn = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[n]
        return fn(x, k, strides, pads[:n], a.get("dilations", [1] * n), ceil_mode=ceil)
    include = bool(a.get("count_include_pad", 0))
    if pads[:n] != pads[n:]:
        raise NotImplementedError("asymmetric AveragePool pads")
    fn = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[n]
    return fn(x, k, strides, pads[:n], ceil_mode=ceil, count_include_pad=include)


def reduce_axes(node, a, inputs, const):
    if len(node.input) > 1 and node.input[1]:
        return ints(const[node.input[1]])
    return list(a.get("axes", []))


class OnnxModule(torch.nn.Module):
    """The graph of an ONNX model, its nodes run with PyTorch ops in file order."""

    def __init__(self, model, device):
        super().__init__()
        g = model.graph
        # Shapes, axes, pads and pad values the ops read as Python numbers (small constants
        # as flat lists): torch.compile's tracer cannot read numpy arrays held by the module
        # (an AssertionError in wrap_numpy_ndarray on the exported transformers' axes).
        self.consts = {}
        self.tensors = {}
        for init in g.initializer:
            self.add_constant(init.name, onnx.numpy_helper.to_array(init), device)
        for node in g.node:  # Constant nodes are constants too
            if node.op_type == "Constant":
                self.add_constant(node.output[0],
                                  onnx.numpy_helper.to_array(attrs_of(node)["value"]), device)
        self.nodes = [(n, attrs_of(n)) for n in g.node if n.op_type != "Constant"]
        names = set(self.tensors)
        self.input_names = [i.name for i in g.input if i.name not in names]
        self.output_names = [o.name for o in g.output]

    def add_constant(self, name, arr, device):
        self.tensors[name] = torch.from_numpy(np.array(arr, copy=True)).to(device)
        if arr.size <= 64:
            self.consts[name] = arr.flatten().tolist()

    def forward(self, *inputs):
        env = dict(self.tensors)
        env.update(zip(self.input_names, inputs))
        for node, a in self.nodes:
            x = [env[i] if i else None for i in node.input]
            outs = self.run_node(node, a, x)
            if not isinstance(outs, (list, tuple)):
                outs = [outs]
            for name, t in zip(node.output, outs):
                if name:
                    env[name] = t
        return tuple(env[o] for o in self.output_names)

    def run_node(self, node, a, x):  # noqa: C901 - one branch per op
        op, c = node.op_type, self.consts
        if op == "Conv":
            return conv(x[0], x[1], x[2] if len(x) > 2 else None, a)
        if op == "ConvTranspose":
            return conv_transpose(x[0], x[1], x[2] if len(x) > 2 else None, a)
        if op == "BatchNormalization":
            return F.batch_norm(x[0], x[3], x[4], x[1], x[2], False, 0.0, a.get("epsilon", 1e-5))
        if op == "Relu":
            return F.relu(x[0])
        if op in ("Add", "Sub", "Mul", "Div", "Pow"):
            fn = {"Add": torch.add, "Sub": torch.sub, "Mul": torch.mul, "Div": torch.div,
                  "Pow": torch.pow}[op]
            return fn(x[0], x[1])
        if op == "Erf":
            return torch.erf(x[0])
        if op == "Tanh":
            return torch.tanh(x[0])
        if op == "Sqrt":
            return torch.sqrt(x[0])
        if op == "MatMul":
            return torch.matmul(x[0], x[1])
        if op == "Gemm":
            A = x[0].t() if a.get("transA", 0) else x[0]
            B = x[1].t() if a.get("transB", 0) else x[1]
            y = a.get("alpha", 1.0) * torch.matmul(A, B)
            if len(x) > 2 and x[2] is not None:
                y = y + a.get("beta", 1.0) * x[2]
            return y
        if op == "MaxPool":
            return pool(x[0], a, "max")
        if op == "AveragePool":
            return pool(x[0], a, "avg")
        if op == "GlobalAveragePool":
            return x[0].mean(dim=tuple(range(2, x[0].dim())), keepdim=True)
        if op == "Flatten":
            axis = a.get("axis", 1) % max(x[0].dim(), 1)
            return x[0].reshape(int(np.prod(x[0].shape[:axis])), -1)
        if op == "Reshape":
            shape = ints(c[node.input[1]])
            shape = [x[0].shape[i] if s == 0 else s for i, s in enumerate(shape)]
            return x[0].reshape(shape)
        if op == "Transpose":
            return x[0].permute(a["perm"])
        if op == "Concat":
            return torch.cat(x, dim=a["axis"])
        if op == "Split":
            axis = a.get("axis", 0)
            if len(node.input) > 1 and node.input[1]:
                sizes = ints(c[node.input[1]])
            elif "split" in a:
                sizes = list(a["split"])
            else:
                n = a.get("num_outputs", len(node.output))
                sizes = [x[0].shape[axis] // n] * n
            return torch.split(x[0], sizes, dim=axis)
        if op == "Slice":
            starts, ends = ints(c[node.input[1]]), ints(c[node.input[2]])
            axes = ints(c[node.input[3]]) if len(node.input) > 3 and node.input[3] else \
                list(range(len(starts)))
            steps = ints(c[node.input[4]]) if len(node.input) > 4 and node.input[4] else \
                [1] * len(starts)
            index = [slice(None)] * x[0].dim()
            for s, e, ax, st in zip(starts, ends, axes, steps):
                if st <= 0:
                    raise NotImplementedError("Slice with a non-positive step")
                dim = x[0].shape[ax]
                s = max(0, min(dim, s + dim if s < 0 else s))
                e = max(0, min(dim, e + dim if e < 0 else e))
                index[ax] = slice(s, e, st)
            return x[0][tuple(index)]
        if op == "Gather":
            axis = a.get("axis", 0) % x[0].dim()
            idx = x[1].long()
            idx = torch.where(idx < 0, idx + x[0].shape[axis], idx)
            out = torch.index_select(x[0], axis, idx.reshape(-1))
            return out.reshape(x[0].shape[:axis] + idx.shape + x[0].shape[axis + 1:])
        if op == "Expand":
            shape = ints(c[node.input[1]])
            target = list(torch.broadcast_shapes(tuple(x[0].shape), tuple(shape)))
            return x[0].expand(target)
        if op == "Cast":
            return x[0].to(ONNX_TO_TORCH[a["to"]])
        if op == "Clip":
            lo = x[1] if len(x) > 1 and x[1] is not None else a.get("min")
            hi = x[2] if len(x) > 2 and x[2] is not None else a.get("max")
            return torch.clamp(x[0], lo, hi)
        if op == "Pad":
            pads = ints(c[node.input[1]])
            value = float(c[node.input[2]][0]) if len(node.input) > 2 and node.input[2] else 0.0
            if a.get("mode", b"constant") not in (b"constant", "constant"):
                raise NotImplementedError("Pad mode")
            return F.pad(x[0], pad_for(pads, x[0].dim()), value=value)
        if op == "Where":
            return torch.where(x[0], x[1], x[2])
        if op == "ReduceMean":
            axes = reduce_axes(node, a, x, c)
            return x[0].mean(dim=tuple(axes), keepdim=bool(a.get("keepdims", 1)))
        if op == "Softmax":
            return torch.softmax(x[0], dim=a.get("axis", -1))
        if op == "LayerNormalization":
            axis = a.get("axis", -1) % x[0].dim()
            return F.layer_norm(x[0], tuple(x[0].shape[axis:]), x[1],
                                x[2] if len(x) > 2 else None, a.get("epsilon", 1e-5))
        raise NotImplementedError(f"op {op}")


def np_dtype(elem_type):
    if hasattr(onnx.helper, "tensor_dtype_to_np_dtype"):  # onnx >= 1.13
        return onnx.helper.tensor_dtype_to_np_dtype(elem_type)
    return onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[elem_type]


def random_inputs(model, device, seed=1):
    rng = np.random.default_rng(seed)
    names = {i.name for i in model.graph.initializer}
    out = []
    for i in model.graph.input:
        if i.name in names:
            continue
        t = i.type.tensor_type
        shape = [d.dim_value for d in t.shape.dim]
        if t.elem_type == onnx.TensorProto.FLOAT:
            arr = rng.uniform(-1, 1, shape).astype(np.float32)
        elif t.elem_type == onnx.TensorProto.BOOL:
            arr = rng.integers(0, 2, shape).astype(bool)
        else:  # small non-negative integers: valid indices into any table, as collage's
            arr = rng.integers(0, 2, shape).astype(np_dtype(t.elem_type))
        out.append(arr)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--mode", choices=["eager", "compile"], default="eager")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tf32", action="store_true",
                    help="allow TF32 in matmuls and convolutions (default: float32 math)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--write-inputs")
    ap.add_argument("--inputs")
    ap.add_argument("--compare")
    args = ap.parse_args()

    # PyTorch allows TF32 in cuDNN convolutions by default: off unless asked, so "fp32" means
    # float32 math on both sides.
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    model = onnx.load(args.model)
    module = OnnxModule(model, args.device).eval()
    if args.inputs:
        arrays = [onnx.numpy_helper.to_array(onnx.load_tensor(
            os.path.join(args.inputs, f"input_{i}.pb"))) for i in range(len(module.input_names))]
    else:
        arrays = random_inputs(model, args.device)
    if args.write_inputs:
        os.makedirs(args.write_inputs, exist_ok=True)
        for i, arr in enumerate(arrays):
            onnx.save_tensor(onnx.numpy_helper.from_array(arr, module.input_names[i]),
                             os.path.join(args.write_inputs, f"input_{i}.pb"))
    inputs = [torch.from_numpy(np.array(a, copy=True)).to(args.device) for a in arrays]
    run = module
    if args.mode == "compile":
        if not hasattr(torch, "compile"):
            sys.exit(f"torch_run.py: torch {torch.__version__} has no torch.compile")
        run = torch.compile(module)  # default mode, as the issue asks

    def sync():
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()

    samples = []
    with torch.inference_mode():
        outputs = run(*inputs)  # compiles, for torch.compile
        for _ in range(args.warmup):
            run(*inputs)
        sync()
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            run(*inputs)
            sync()
            samples.append((time.perf_counter() - t0) * 1e3)
    result = {"mode": args.mode, "device": args.device, "tf32": args.tf32,
              "torch": torch.__version__, "runs": len(samples),
              "median_ms": statistics.median(samples) if samples else None,
              "min_ms": min(samples) if samples else None}
    if args.compare:
        worst, scale = 0.0, 0.0
        for k, out in enumerate(outputs):
            ref = onnx.numpy_helper.to_array(onnx.load_tensor(
                os.path.join(args.compare, f"output_{k}.pb"))).astype(np.float64)
            got = out.detach().cpu().numpy().astype(np.float64)
            if got.shape != ref.shape:
                worst, scale = float("inf"), 1.0
                break
            worst = max(worst, float(np.max(np.abs(got - ref))) if ref.size else 0.0)
            scale = max(scale, float(np.max(np.abs(ref))) if ref.size else 0.0)
        ok = worst <= 1e-3 * max(scale, 1e-30)
        result["compare"] = {"status": "ok" if ok else "MISMATCH", "max_abs_diff": worst,
                             "max_abs_reference": scale}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
