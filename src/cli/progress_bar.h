// Progress output for long work: a redrawn bar on a terminal, a line every few seconds
// otherwise (CI logs, pipes).
#pragma once

#include <chrono>
#include <string>

#include "collage/tune.h"

namespace collage::cli {

class ProgressBar {
 public:
  ProgressBar();
  void update(const TuneProgress& p);
  void finish();

 private:
  bool tty_;
  bool drawn_ = false;
  std::string last_phase_;
  std::chrono::steady_clock::time_point last_line_;
};

std::string format_duration(double seconds);

}  // namespace collage::cli
