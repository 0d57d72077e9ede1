#include "cli/progress_bar.h"

#include <fmt/core.h>
#include <unistd.h>

#include <cstdio>

namespace collage::cli {

std::string format_duration(double s) {
  if (s < 0) return "?";
  if (s < 60) return fmt::format("{:.0f}s", s);
  return fmt::format("{}m{:02d}s", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
}

ProgressBar::ProgressBar()
    : ProgressBar(isatty(fileno(stderr)) != 0, [](const std::string& text) {
        fmt::print(stderr, "{}", text);
        std::fflush(stderr);
      }) {}

ProgressBar::ProgressBar(bool tty, std::function<void(const std::string&)> write)
    : tty_(tty), write_(std::move(write)), last_line_(std::chrono::steady_clock::now()) {}

void ProgressBar::update(const TuneProgress& p) {
  std::string text;
  if (p.total > 0) {
    constexpr int kWidth = 30;
    int filled = static_cast<int>(kWidth * p.done / p.total);
    text = fmt::format("{:<18} [{}{}] {}/{}  cache hits {}  failed {}  ETA {}", p.phase,
                       std::string(filled, '#'), std::string(kWidth - filled, '.'), p.done, p.total,
                       p.cache_hits, p.failed, format_duration(p.eta_s));
  } else {
    text =
        fmt::format("{:<18} {} {}", p.phase, p.done ? fmt::format("gen {}", p.done) : "", p.detail);
  }
  if (tty_) {
    write_(fmt::format("\r{:<110.110}", text));
    drawn_ = true;
  } else {
    auto now = std::chrono::steady_clock::now();
    bool phase_changed = p.phase != last_phase_;
    bool done = p.total > 0 && p.done == p.total;
    if (phase_changed || done || now - last_line_ > std::chrono::seconds(5)) {
      write_(text + "\n");
      last_line_ = now;
    }
  }
  last_phase_ = p.phase;
}

void ProgressBar::finish() {
  if (tty_ && drawn_) write_("\n");
  drawn_ = false;
}

}  // namespace collage::cli
