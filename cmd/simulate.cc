// `gpuslice simulate`: "what if" placement offline. Reads Node, ResourceQuota and Pod manifests, sends each pod
// through the webhook policy and the scheduler in file order, and prints where each pod lands (or why not).
// Only file reading, the clock and printing live here; the work is simulate/simulate.h.
#include "simulate/simulate.h"
#include "cmd/command.h"
#include "common/config.h"

#include <boost/json/serialize.hpp>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>

namespace {

constexpr std::streamsize kMaxFileBytes = 64 * 1024 * 1024;  // manifests beyond this are not a cluster we model

gpuslice::Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return gpuslice::make_error(path + ": cannot open");
  }
  std::string data;
  char buf[65536];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    data.append(buf, static_cast<size_t>(in.gcount()));
    if (static_cast<std::streamsize>(data.size()) > kMaxFileBytes) {
      return gpuslice::make_error(path + ": larger than 64 MiB");
    }
  }
  return data;
}

struct Options {
  std::vector<std::string> nodes;
  std::vector<std::string> pods;
  std::string config;
  std::string output = "table";
};

int run(const Options& o) {
  gpuslice::Configuration config;
  if (!o.config.empty()) {
    auto c = gpuslice::load_configuration_file(o.config);
    if (!c.ok()) {
      std::fprintf(stderr, "gpuslice simulate: %s\n", c.message().c_str());
      return 2;
    }
    config = std::move(c.value());
  }
  gpuslice::simulate::SimulationInput input;
  auto load = [](const std::vector<std::string>& paths, auto& dst) -> bool {
    for (const std::string& p : paths) {
      auto text = read_file(p);
      if (!text.ok()) {
        std::fprintf(stderr, "gpuslice simulate: %s\n", text.message().c_str());
        return false;
      }
      auto m = gpuslice::simulate::parse_manifests(text.value(), p);
      if (!m.ok()) {
        std::fprintf(stderr, "gpuslice simulate: %s\n", m.message().c_str());
        return false;
      }
      dst.emplace_back(p, std::move(m.value()));
    }
    return true;
  };
  if (!load(o.nodes, input.node_files) || !load(o.pods, input.pod_files)) {
    return 2;
  }
  auto result = gpuslice::simulate::simulate(input, config, static_cast<int64_t>(std::time(nullptr)));
  if (!result.ok()) {
    std::fprintf(stderr, "gpuslice simulate: %s\n", result.message().c_str());
    return 2;
  }
  if (o.output == "json") {
    std::string text = boost::json::serialize(gpuslice::simulate::simulation_to_json(result.value()));
    std::printf("%s\n", text.c_str());
  } else {
    std::fputs(gpuslice::simulate::simulation_to_table(result.value()).c_str(), stdout);
  }
  return 0;
}

std::function<int()> setup(CLI::App& app) {
  auto opts = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand(
      "simulate", "Place pods on nodes offline: Node/ResourceQuota/Pod manifests through the webhook and scheduler");
  sub->add_option("--nodes", opts->nodes, "Node (and ResourceQuota, bound Pod) manifests: multi-document YAML or List")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("--pods", opts->pods, "Pod manifests, placed in file order (repeatable)")->check(CLI::ExistingFile);
  sub->add_option("--config", opts->config, "GpusliceConfiguration file (device defaults, scheduler policies)")
      ->check(CLI::ExistingFile);
  sub->add_option("-o,--output", opts->output, "Output format")->check(CLI::IsMember({"table", "json"}));
  return [opts] { return run(*opts); };
}

GPUSLICE_COMMAND("simulate", setup);

}  // namespace
