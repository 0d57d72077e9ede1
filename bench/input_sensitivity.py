#!/usr/bin/python3
"""How much a model's own outputs move under a tiny change of its inputs (bench/run.sh).

    input_sensitivity.py perturb IN_DIR OUT_DIR SCALE   inputs scaled by (1 + SCALE)

When ONNX Runtime's outputs and collage's disagree, bench/run.sh runs the reference backend
on the inputs and on the inputs scaled by (1 + 1e-6) and compares the two: a model whose
outputs move by more than the check's tolerance under such a change (random weights with
randomised BatchNorm statistics make some EfficientNets chaotic: logits ~1e4 that a 1e-6
input change moves by 17 %) cannot match another runtime's rounding, and the table says so
beside the mismatch. The two runs' outputs are compared by the ORT check's own code
(`node bench/peers/ort_run.js --compare-dirs A B`: max |a - b| over max |a|, the largest over
the outputs), so the two numbers the table shows side by side follow one rule.
"""
import os
import sys

import numpy as np
import onnx
import onnx.numpy_helper


def load(path):
    tensor = onnx.TensorProto()
    with open(path, "rb") as f:
        tensor.ParseFromString(f.read())
    return tensor.name, onnx.numpy_helper.to_array(tensor)


def pb_files(folder, prefix):
    return sorted((f for f in os.listdir(folder) if f.startswith(prefix) and f.endswith(".pb")),
                  key=lambda f: int(f[len(prefix):-3]))


def perturb(in_dir, out_dir, scale):
    os.makedirs(out_dir, exist_ok=True)
    for f in pb_files(in_dir, "input_"):
        name, a = load(os.path.join(in_dir, f))
        if np.issubdtype(a.dtype, np.floating):
            a = (a * (1 + scale)).astype(a.dtype)
        with open(os.path.join(out_dir, f), "wb") as out:
            out.write(onnx.numpy_helper.from_array(a, name).SerializeToString())


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "perturb":
        perturb(sys.argv[2], sys.argv[3], float(sys.argv[4]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
