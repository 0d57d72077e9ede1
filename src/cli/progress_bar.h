// Progress output for long work: a redrawn bar on a terminal, a line every few seconds
// otherwise (CI logs, pipes). Used by `collage tune` (on stderr) and by the Python module's
// collage.tune (through Python's sys.stderr).
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "collage/tune.h"

namespace collage::cli {

class ProgressBar {
 public:
  // Writes to stderr; a bar when stderr is a terminal.
  ProgressBar();
  // Writes each piece of text through `write`; `tty` selects the redrawn bar.
  ProgressBar(bool tty, std::function<void(const std::string&)> write);
  void update(const TuneProgress& p);
  void finish();

 private:
  bool tty_;
  std::function<void(const std::string&)> write_;
  bool drawn_ = false;
  std::string last_phase_;
  std::chrono::steady_clock::time_point last_line_;
};

std::string format_duration(double seconds);

}  // namespace collage::cli
