"""collage: runs ONNX models fastest by mixing backends (oneDNN, OpenBLAS, XNNPACK, ...).

    import collage, numpy as np
    plan = collage.tune("model.onnx", output="plan.json")      # measure, search, never slower
    sess = collage.InferenceSession("model.onnx", plan=plan)    # like onnxruntime's
    outputs = sess.run(None, {"input": np.zeros((1, 3, 224, 224), np.float32)})

Everything is implemented in C++ (the `_collage` extension over libcollage_core); this file
only sets the process defaults the CLI sets and re-exports the extension.
"""
import os as _os

# Thread pools keep idle workers spinning after each parallel call, stealing the cores the
# next backend's kernel needs; the CLI bounds that spinning for libgomp and OpenBLAS, which
# read these variables once, when they are loaded -- that is, by the import below. A value
# the user set wins; a library already loaded by an earlier import (torch) keeps its own.
if "OMP_WAIT_POLICY" not in _os.environ and "GOMP_SPINCOUNT" not in _os.environ:
    _os.environ["GOMP_SPINCOUNT"] = "10000"
_os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "15")

# With OMP_PROC_BIND, OMP_PLACES or GOMP_CPU_AFFINITY set, libgomp binds the thread that loads
# it to one CPU; every thread pool created from this thread afterwards (XNNPACK's, Halide's, the
# tuner's measure workers) would inherit that one CPU. The importing thread gets its CPUs back
# (the CLI does the same: src/cli/library_env.cc); libgomp's workers keep their places.
_start_cpus = _os.sched_getaffinity(0)
from . import _collage  # noqa: E402

if _os.sched_getaffinity(0) != _start_cpus:
    _os.sched_setaffinity(0, _start_cpus)
from ._collage import (  # noqa: E402,F401
    BackendError,
    BackendInfo,
    Error,
    InferenceSession,
    InternalError,
    InvalidArgumentError,
    InvalidModelError,
    IoError,
    LimitError,
    NodeArg,
    ParseError,
    PathViolationError,
    Plan,
    PlanGroup,
    PlanTiming,
    ShapeError,
    TuneProgress,
    TuneReport,
    UnsupportedError,
    backends,
    load_backend_plugin,
    set_log_level,
    tune,
    version,
    zoo,
    zoo_models,
)
from . import _paths  # noqa: E402

__version__ = version()

# The CLI beside this copy of the module measures tuning candidates in a separate process.
if _os.access(_paths.CLI, _os.X_OK):
    _collage._set_measure_worker(_paths.CLI)

__all__ = [name for name in dir(_collage) if not name.startswith("_")]
