#pragma once
// `gpuslice serve` runs a list of components in one process: the webhook server (TLS, probes, /metrics)
// and whatever other files register here (the scheduler loop). A component file adds its own flags and
// decides from the final configuration whether it runs, without editing cmd/serve.cc:
//
//   // cmd/serve_scheduler.cc
//   GPUSLICE_SERVE_COMPONENT("scheduler", [](CLI::App& serve) -> cmd::ApplyFlags {
//     auto kubeconfig = std::make_shared<std::string>();
//     auto* opt = serve.add_option("--kubeconfig", *kubeconfig, "...");
//     return [=](Configuration& c) -> Status { if (opt->count()) c.kubeconfig = *kubeconfig; return {}; };
//   }, [](const Configuration& c) -> std::unique_ptr<cmd::Component> {
//     if (!c.scheduler.enabled) return nullptr;
//     return std::make_unique<SchedulerComponent>(c);
//   });
//
// Start order: the probe/webhook server first (so /livez answers while others start), then components in
// registration-name order; stop in reverse, the server last. A component adds readiness checks through
// Runtime::readiness (e.g. "leader", "informer-sync").

#include "cmd/command.h"
#include "common/config.h"
#include "common/health.h"
#include "common/pages.h"
#include "common/result.h"

#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace gpuslice::cmd {

/// What a running component may use.
struct Runtime {
  const Configuration* config = nullptr;  ///< final configuration (file + flags)
  HealthChecks* liveness = nullptr;       ///< null when no server runs (no webhook, no probe port)
  HealthChecks* readiness = nullptr;
  Pages* pages = nullptr;  ///< read-only pages of the health port; null when no server runs
};

class Component {
 public:
  virtual ~Component() = default;
  virtual std::string name() const = 0;
  /// Starts the component's own threads and returns; errors stop start-up.
  virtual Status start(Runtime& runtime) = 0;
  /// Stops and joins; called once, in reverse start order, on SIGTERM/SIGINT or a failed start-up.
  virtual void stop() = 0;
};

/// Applies the component's explicitly given flags over the loaded configuration.
using ApplyFlags = std::function<Status(Configuration&)>;

struct ServeExtension {
  std::string name;
  std::function<ApplyFlags(CLI::App& serve)> add_flags;
  /// Returns nullptr when the configuration disables the component.
  std::function<std::unique_ptr<Component>(const Configuration&)> make;
};

std::vector<ServeExtension>& serve_extensions();

struct ServeRegistrar {
  ServeRegistrar(std::string name, std::function<ApplyFlags(CLI::App&)> add_flags,
                 std::function<std::unique_ptr<Component>(const Configuration&)> make) {
    serve_extensions().push_back({std::move(name), std::move(add_flags), std::move(make)});
  }
};

}  // namespace gpuslice::cmd

#define GPUSLICE_SERVE_COMPONENT(name, add_flags, make) \
  static ::gpuslice::cmd::ServeRegistrar GPUSLICE_CONCAT(gpuslice_serve_registrar_, __LINE__)(name, add_flags, make)
