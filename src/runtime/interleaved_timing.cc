#include "runtime/interleaved_timing.h"

#include <algorithm>
#include <chrono>

namespace collage {

std::vector<std::vector<double>> time_interleaved(const std::vector<std::function<void()>>& runs,
                                                  int rounds) {
  using Clock = std::chrono::steady_clock;
  std::vector<std::vector<double>> samples(runs.size());
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < runs.size(); ++i) {
      if (runs.size() > 1) runs[i]();
      auto start = Clock::now();
      runs[i]();
      samples[i].push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    }
  return samples;
}

double median_of(std::vector<double> samples) {
  if (samples.empty()) return 0;
  std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
  return samples[samples.size() / 2];
}

}  // namespace collage
