// Process-wide settings of the Python module: the collage CLI that serves as the tuner's
// measure worker (set by __init__.py from the path CMake wrote into _paths.py) and the
// backend plugins loaded with load_backend_plugin, which that worker must load too.
#pragma once

namespace collage::python {

// Points the tuner's candidate isolation at the CLI (if one was found) with the plugins
// loaded so far. Called under compile_mutex() before each tune.
void configure_measure_worker();

}  // namespace collage::python
