// `gpuslice mock-device-agent`: completes HAMi's Allocate protocol for simulated GPU nodes (the lab's stand-in
// for HAMi's device plugin), so bound pods reach bind-phase=success and the node lock is released. CLI wiring only;
// the work is scheduler/mock_agent.h.
#include "cmd/command.h"
#include "common/log.h"
#include "scheduler/mock_agent.h"

#include <memory>

namespace {

struct Options {
  gpuslice::scheduler::MockAgentConfig agent;
  std::string logging_format = "text";
  int verbosity = 0;
};

std::function<int()> setup(CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* sub =
      app.add_subcommand("mock-device-agent", "Complete HAMi's allocation protocol for simulated GPU nodes (lab only)");
  sub->add_option("--kubeconfig", o->agent.kubeconfig,
                  "kubeconfig file (default: $KUBECONFIG, in-cluster, then ~/.kube/config)");
  sub->add_option("--node-selector", o->agent.node_selector,
                  "label selector of the nodes this agent manages (default: every node)");
  sub->add_option(
         "--kube-qps", o->agent.qps,
         "the agent's shared client (watches; kubelet's and the lab's writes for all nodes): requests per second")
      ->capture_default_str();
  sub->add_option("--kube-burst", o->agent.burst, "client-side burst")->capture_default_str();
  sub->add_option("--plugin-kube-qps", o->agent.plugin_qps,
                  "each node's device plugin client: requests per second (HAMi: client-go's default 5; 0: unlimited)")
      ->capture_default_str();
  sub->add_option("--plugin-kube-burst", o->agent.plugin_burst,
                  "each node's device plugin client: burst (HAMi: client-go's default 10)")
      ->capture_default_str();
  sub->add_option("--logging-format", o->logging_format, "text or json")->capture_default_str();
  sub->add_option("-v,--v", o->verbosity, "log verbosity")->capture_default_str();
  return [o] {
    gpuslice::log::Format format = gpuslice::log::Format::text;
    if (!gpuslice::log::parse_format(o->logging_format, format)) {
      std::fprintf(stderr, "gpuslice mock-device-agent: --logging-format: \"%s\" is not text or json\n",
                   o->logging_format.c_str());
      return 2;
    }
    gpuslice::log::configure(format, o->verbosity);
    return gpuslice::scheduler::run_mock_device_agent(o->agent);
  };
}
GPUSLICE_COMMAND("mock-device-agent", setup);

}  // namespace
