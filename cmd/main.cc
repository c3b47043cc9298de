// gpuslice: HAMi-compatible GPU slicing for Kubernetes tenants. One binary, several subcommands.
#include "cmd/command.h"

#include <algorithm>
#include <cstdio>
#include <exception>

namespace gpuslice::cmd {
std::vector<Registration>& registry() {
  static std::vector<Registration> r;
  return r;
}
}  // namespace gpuslice::cmd

int main(int argc, char** argv) {
  CLI::App app{"gpuslice: share GPUs between Kubernetes pods (HAMi-compatible webhook and scheduler)", "gpuslice"};
  app.require_subcommand(1);
  app.set_version_flag("--version", GPUSLICE_VERSION);
  auto& regs = gpuslice::cmd::registry();
  std::sort(regs.begin(), regs.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  std::vector<std::pair<CLI::App*, std::function<int()>>> runners;
  for (auto& r : regs) {
    size_t before = app.get_subcommands({}).size();
    auto run = r.setup(app);
    auto subs = app.get_subcommands({});
    if (subs.size() > before) runners.emplace_back(subs.back(), std::move(run));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (auto& [sub, run] : runners) {
      if (sub->parsed()) return run();
    }
  } catch (const std::exception& e) {
    // Start-up and configuration errors end here with their message; I/O paths never throw.
    std::fprintf(stderr, "gpuslice: %s\n", e.what());
    return 1;
  }
  return 1;
}
