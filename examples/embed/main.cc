// collage_embed MODEL.onnx [--budget S] [--backends a,b] [--cost-db PATH] [--plan-out PATH]
//
// The smallest program that uses collage as a library: load an ONNX model, find the fastest
// placement of its parts on this machine, run it, print the placement and the outputs.
#include <collage/error.h>
#include <collage/model.h>
#include <collage/session.h>
#include <collage/tune.h>
#include <collage/version.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s MODEL.onnx [--budget S] [--backends a,b] [--cost-db PATH] "
                 "[--plan-out PATH]\n",
                 argv[0]);
    return 2;
  }
  collage::TuneOptions options;
  options.budget_s = 10;
  // Measuring candidates in a separate process needs the `collage` CLI as its worker;
  // a library caller measures in-process.
  options.isolate = false;
  std::string plan_out;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--budget") {
      options.budget_s = std::atof(value.c_str());
    } else if (flag == "--cost-db") {
      options.cost_db_path = value;
    } else if (flag == "--plan-out") {
      plan_out = value;
    } else if (flag == "--backends") {
      std::stringstream list(value);
      for (std::string name; std::getline(list, name, ',');) options.backends.push_back(name);
    } else {
      std::fprintf(stderr, "unknown option %s\n", flag.c_str());
      return 2;
    }
  }
  try {
    std::printf("collage %s\n", collage::version());
    collage::Graph graph = collage::load_model(argv[1]);
    collage::TuneResult tuned = collage::tune(graph, options);
    if (!plan_out.empty()) tuned.plan.save(plan_out);
    std::printf("plan: %s, %zu groups, measured %.3f ms\n", tuned.winner.c_str(),
                tuned.plan.groups.size(), tuned.plan.measured_ms);
    for (const collage::BackendShare& share : tuned.shares)
      std::printf("  %-16s %4zu nodes\n", share.backend.c_str(), share.nodes);

    collage::Session session(graph, tuned.plan, collage::SessionOptions{});
    // The CLI's random inputs (`collage run` uses seed 1 too), so its checksums compare.
    std::vector<collage::Tensor> outputs = session.run(collage::random_inputs(session.graph(), 1));
    for (size_t i = 0; i < outputs.size(); ++i) {
      double sum = 0;
      for (int64_t k = 0; k < outputs[i].numel(); ++k) sum += outputs[i].get_as_double(k);
      std::printf("output %zu: %s %s sum=%.6e\n", i, collage::dtype_name(outputs[i].dtype()),
                  collage::shape_to_string(outputs[i].shape()).c_str(), sum);
    }
  } catch (const collage::Error& e) {
    std::fprintf(stderr, "collage_embed: %s: %s\n", collage::error_kind_name(e.kind()), e.what());
    return e.is_bad_input() ? 2 : 1;
  }
  return 0;
}
