#include "ops/einsum_equation.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "collage/error.h"

namespace collage::ops {
namespace {

constexpr int kLetters = 52;

int letter_label(char c) {
  if (c >= 'a' && c <= 'z') return c - 'a';
  if (c >= 'A' && c <= 'Z') return 26 + (c - 'A');
  return -1;
}

// One term's letters, with -1 where its ellipsis stands (at most once).
std::vector<int> parse_term(const std::string& term, const std::string& equation) {
  std::vector<int> out;
  bool ellipsis = false;
  for (size_t i = 0; i < term.size(); ++i) {
    if (term.compare(i, 3, "...") == 0) {
      if (ellipsis)
        fail(ErrorKind::kShape, "einsum '{}': term '{}' has two ellipses", equation, term);
      ellipsis = true;
      out.push_back(-1);
      i += 2;
      continue;
    }
    const int label = letter_label(term[i]);
    if (label < 0)
      fail(ErrorKind::kShape, "einsum '{}': '{}' is not a letter or an ellipsis", equation,
           term[i]);
    out.push_back(label);
  }
  return out;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out(1);
  for (char c : s) {
    if (c == sep)
      out.emplace_back();
    else
      out.back() += c;
  }
  return out;
}

}  // namespace

std::string einsum_label_name(int label) {
  if (label < 26) return std::string(1, static_cast<char>('a' + label));
  if (label < kLetters) return std::string(1, static_cast<char>('A' + label - 26));
  return fmt::format("...{}", label - kLetters);
}

EinsumEquation parse_einsum(const std::string& equation, const std::vector<Shape>& shapes) {
  std::string text;
  for (char c : equation)
    if (!std::isspace(static_cast<unsigned char>(c))) text += c;
  const size_t arrow = text.find("->");
  const bool explicit_output = arrow != std::string::npos;
  const std::vector<std::string> terms = split(text.substr(0, arrow), ',');
  if (terms.size() != shapes.size())
    fail(ErrorKind::kShape, "einsum '{}': {} terms for {} operands", equation, terms.size(),
         shapes.size());

  // Each term's letters, and how many dimensions its ellipsis covers.
  std::vector<std::vector<int>> letters(terms.size());
  std::vector<int64_t> ellipsis_dims(terms.size(), 0);
  int64_t max_ellipsis = 0;
  for (size_t i = 0; i < terms.size(); ++i) {
    letters[i] = parse_term(terms[i], equation);
    const bool has_ellipsis = std::count(letters[i].begin(), letters[i].end(), -1) > 0;
    const int64_t named = static_cast<int64_t>(letters[i].size()) - (has_ellipsis ? 1 : 0);
    const int64_t rank = static_cast<int64_t>(shapes[i].size());
    if (has_ellipsis ? rank < named : rank != named)
      fail(ErrorKind::kShape, "einsum '{}': term '{}' does not fit operand {} of shape {}",
           equation, terms[i], i, shape_to_string(shapes[i]));
    ellipsis_dims[i] = has_ellipsis ? rank - named : 0;
    max_ellipsis = std::max(max_ellipsis, ellipsis_dims[i]);
  }

  EinsumEquation eq;
  eq.sizes.assign(static_cast<size_t>(kLetters + max_ellipsis), -1);
  auto expand = [&](const std::vector<int>& term, int64_t dims) {
    std::vector<int> out;
    for (int label : term) {
      if (label >= 0) {
        out.push_back(label);
        continue;
      }
      for (int64_t k = max_ellipsis - dims; k < max_ellipsis; ++k)
        out.push_back(kLetters + static_cast<int>(k));
    }
    return out;
  };
  std::vector<int> uses(eq.sizes.size(), 0);
  for (size_t i = 0; i < terms.size(); ++i) {
    eq.inputs.push_back(expand(letters[i], ellipsis_dims[i]));
    for (size_t d = 0; d < eq.inputs[i].size(); ++d) {
      const int label = eq.inputs[i][d];
      const int64_t size = shapes[i][d];
      int64_t& known = eq.sizes[label];
      ++uses[label];
      if (known < 0 || known == 1)
        known = size;  // the first sight, or a broadcast 1 met again
      else if (size != known && size != 1)
        fail(ErrorKind::kShape, "einsum '{}': label '{}' is {} in one place and {} in another",
             equation, einsum_label_name(label), known, size);
    }
  }
  for (int64_t& size : eq.sizes) size = std::max<int64_t>(size, 0);

  if (explicit_output) {
    const std::string out_term = text.substr(arrow + 2);
    const std::vector<int> out = parse_term(out_term, equation);
    if (std::count(out.begin(), out.end(), -1) > 0 && max_ellipsis == 0 &&
        std::none_of(letters.begin(), letters.end(), [](const std::vector<int>& t) {
          return std::count(t.begin(), t.end(), -1) > 0;
        }))
      fail(ErrorKind::kShape, "einsum '{}': the output has an ellipsis the inputs do not",
           equation);
    eq.output = expand(out, max_ellipsis);
    for (int label : eq.output) {
      if (uses[label] == 0)
        fail(ErrorKind::kShape, "einsum '{}': output label '{}' is in no input", equation,
             einsum_label_name(label));
      if (std::count(eq.output.begin(), eq.output.end(), label) > 1)
        fail(ErrorKind::kShape, "einsum '{}': output label '{}' appears twice", equation,
             einsum_label_name(label));
    }
  } else {
    for (int64_t k = 0; k < max_ellipsis; ++k) eq.output.push_back(kLetters + static_cast<int>(k));
    // In character order (upper case first), as numpy orders them.
    std::vector<int> once;
    for (int label = 0; label < kLetters; ++label)
      if (uses[label] == 1) once.push_back(label);
    std::sort(once.begin(), once.end(), [](int a, int b) {
      auto key = [](int l) { return l < 26 ? 'a' + l : 'A' + (l - 26); };
      return key(a) < key(b);
    });
    eq.output.insert(eq.output.end(), once.begin(), once.end());
  }
  return eq;
}

}  // namespace collage::ops
