// `gpuslice version`: prints the version, as `--version` does, for scripts that prefer a subcommand.
#include "cmd/command.h"

#include <cstdio>

namespace {
std::function<int()> setup(CLI::App& app) {
  app.add_subcommand("version", "Print the gpuslice version");
  return [] {
    std::printf("gpuslice %s\n", GPUSLICE_VERSION);
    return 0;
  };
}
GPUSLICE_COMMAND("version", setup);
}  // namespace
