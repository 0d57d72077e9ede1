// Validators for numeric options whose errors say what is asked. CLI11's PositiveNumber and
// NonNegativeNumber print their range up to DBL_MAX: `run --repeat 0` answered "Value 0 not in
// range 0.000000 to 179769313486231570814527423731704356798070567525844996598917476803157..."
// (300 digits). The help text keeps their names (POSITIVE, NONNEGATIVE).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace collage::cli {

// A number above `bound` (`inclusive`: or equal to it), else "must be ..., got VALUE".
inline CLI::Validator number_above(double bound, bool inclusive, const char* name) {
  return CLI::Validator(
      [bound, inclusive](std::string& input) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(input, value)) return "not a number: " + input;
        if (inclusive ? value >= bound : value > bound) return "";
        return std::string("must be ") + (inclusive ? "at least " : "above ") +
               CLI::detail::to_string(bound) + ", got " + input;
      },
      name);
}

inline const CLI::Validator kPositive = number_above(0, false, "POSITIVE");
inline const CLI::Validator kNonNegative = number_above(0, true, "NONNEGATIVE");

}  // namespace collage::cli
