#include "backends/onednn/lane_memo.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <fstream>
#include <sstream>

#include "backends/onednn/dnnl_common.h"
#include "ir/canonical.h"
#include "util/cpu_info.h"
#include "util/kernel_cache_dir.h"

namespace collage::onednn {
namespace {

constexpr const char* kHeader = "collage onednn lanes 1";

class FileLaneMemo : public LaneMemo {
 public:
  explicit FileLaneMemo(std::filesystem::path path) : path_(std::move(path)) {}

  std::optional<std::vector<LaneStage>> recall() override {
    std::ifstream in(path_);
    if (!in) return std::nullopt;
    std::stringstream text;
    text << in.rdbuf();
    return parse_stages(text.str());
  }

  void remember(const std::vector<LaneStage>& stages) override {
    try {
      write_file_atomically(path_, stages_text(stages));
    } catch (const std::exception& e) {
      // Only the next compile's time is lost: it measures again.
      spdlog::debug("onednn lanes: not remembered in {}: {}", path_.string(), e.what());
    }
  }

 private:
  std::filesystem::path path_;
};

}  // namespace

std::string stages_text(const std::vector<LaneStage>& stages) {
  std::string out = std::string(kHeader) + "\n";
  for (const LaneStage& stage : stages) {
    out += fmt::format("{} {}", stage.begin, stage.end);
    for (const std::vector<size_t>& lane : stage.lanes)
      out += fmt::format(" | {}", fmt::join(lane, " "));
    out += "\n";
  }
  return out;
}

std::optional<std::vector<LaneStage>> parse_stages(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line) || line != kHeader) return std::nullopt;
  std::vector<LaneStage> stages;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    LaneStage stage;
    if (!(words >> stage.begin >> stage.end)) return std::nullopt;
    std::string word;
    while (words >> word) {
      if (word == "|") {
        stage.lanes.emplace_back();
        continue;
      }
      if (stage.lanes.empty() || word.find_first_not_of("0123456789") != std::string::npos)
        return std::nullopt;
      stage.lanes.back().push_back(std::stoull(word));
    }
    stages.push_back(std::move(stage));
  }
  return stages;
}

std::unique_ptr<LaneMemo> region_lane_memo(const Graph& region,
                                           const std::vector<ConvAlgorithm>& algorithms,
                                           int threads) {
  try {
    const KernelCacheDir dir = kernel_cache_dir("onednn-lanes");
    std::string key = fmt::format("onednn-graph {}\n{} | {} | {} threads\n", backend_version(),
                                  this_cpu().model, this_cpu().isa, threads);
    auto nodes_with = [&](ConvAlgorithm a) {
      std::string out;
      for (size_t n = 0; n < algorithms.size(); ++n)
        if (algorithms[n] == a) out += fmt::format(" {}", n);
      return out;
    };
    // A region without blocked or 2x2 Winograd convs keeps the key it had before those.
    key += "winograd" + nodes_with(ConvAlgorithm::kWinograd);
    if (const std::string blocked = nodes_with(ConvAlgorithm::kBlocked); !blocked.empty())
      key += "\nblocked" + blocked;
    if (const std::string w2 = nodes_with(ConvAlgorithm::kWinograd2x2); !w2.empty())
      key += "\nwinograd2x2" + w2;
    key += "\n" + canonical_text(region);
    return std::make_unique<FileLaneMemo>(dir.path / (hash_hex(key) + ".stages"));
  } catch (const std::exception& e) {
    spdlog::debug("onednn lanes: nothing remembered: {}", e.what());
    return nullptr;
  }
}

}  // namespace collage::onednn
