// What the Python `collage.Plan` object holds: the C++ Plan, plus where it came from when
// known (the model it was tuned for, which show() draws, and the tuning report).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "collage/plan.h"
#include "collage/tune.h"

namespace collage::python {

struct PlanHandle {
  Plan plan;
  std::optional<std::string> model;  // path of the model it is for, when known
  std::map<std::string, int64_t> dims;
  std::shared_ptr<const TuneResult> tuning;  // set by collage.tune
};

}  // namespace collage::python
