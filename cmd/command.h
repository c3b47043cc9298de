#pragma once
// Subcommand registry: each cmd/<name>.cc registers its CLI11 subcommand with GPUSLICE_COMMAND, so main.cc
// stays the same as subcommands are added. Only CLI wiring lives in cmd/; the work is in the libraries.

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace gpuslice::cmd {

/// Adds the subcommand to `app` and returns the function that runs it (exit code) once parsed.
using Setup = std::function<std::function<int()>(CLI::App& app)>;

struct Registration {
  std::string name;
  Setup setup;
};

std::vector<Registration>& registry();

struct Registrar {
  Registrar(std::string name, Setup setup) { registry().push_back({std::move(name), std::move(setup)}); }
};

}  // namespace gpuslice::cmd

#define GPUSLICE_CONCAT_INNER(a, b) a##b
#define GPUSLICE_CONCAT(a, b) GPUSLICE_CONCAT_INNER(a, b)
#define GPUSLICE_COMMAND(name, setup_fn) \
  static ::gpuslice::cmd::Registrar GPUSLICE_CONCAT(gpuslice_command_registrar_, __LINE__)(name, setup_fn)
