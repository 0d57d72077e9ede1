// Times several ways of running the same model side by side: interleaved rounds, so that
// machine drift (shared cores, frequency) hits all of them alike. With more than one, each
// timed run follows an untimed run of the same one: the first run after another plan's
// pays for that plan's thread pools winding down and for cold caches, which a user running
// one plan never sees. Used by the tuner's final comparison and by `collage bench`.
#pragma once

#include <functional>
#include <vector>

namespace collage {

// samples[i][r]: milliseconds of runs[i] in round r.
std::vector<std::vector<double>> time_interleaved(const std::vector<std::function<void()>>& runs,
                                                  int rounds);

double median_of(std::vector<double> samples);

}  // namespace collage
