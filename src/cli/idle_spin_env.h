#pragma once

namespace collage::cli {

// For the commands that run kernels (run, tune, bench, measure-worker): re-executes the
// process once with short idle-spin limits for the thread pools that read them from the
// environment at load time, unless the user chose them. Returns when nothing was changed
// (or exec failed).
void bound_idle_spinning(int argc, char** argv);

}  // namespace collage::cli
