// `gpuslice top` (also `kubectl gpuslice top` through the kubectl-gpuslice link): nodes, cards, pods and pending
// GPU pods from the Kubernetes API alone (list nodes, list pods), as tables or JSON. The view is the status page's
// (scheduler/status_view.h, built by top/top.h); only the listing, the clock and printing live here.
#include "top/top.h"
#include "cmd/command.h"
#include "common/config.h"
#include "kube/client.h"
#include "kube/kubeconfig.h"
#include "kube/url.h"
#include "scheduler/status_view.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <limits>

namespace {

namespace asio = boost::asio;
using namespace gpuslice;

struct Options {
  std::string view = "all";
  std::string output;
  std::string kubeconfig;
  std::string config;
  std::string scheduler_name;
  std::string sort = "name";
  std::string timeout = "30s";
};

struct Listed {
  std::vector<boost::json::object> nodes, pods;
  std::string error;
  bool done = false;
};

asio::awaitable<void> list_all(std::shared_ptr<kube::Client> client, Listed& out) {
  kube::ListOptions opts;
  auto nodes = co_await client->list(kube::collection_path(kube::resources::nodes()), opts);
  if (!nodes) {
    out.error = "list nodes: " + nodes.error().to_string();
    out.done = true;
    co_return;
  }
  kube::ListOptions pod_opts;
  pod_opts.field_selector = "status.phase!=Succeeded,status.phase!=Failed";
  auto pods = co_await client->list(kube::collection_path(kube::resources::pods()), pod_opts);
  if (!pods) {
    out.error = "list pods: " + pods.error().to_string();
    out.done = true;
    co_return;
  }
  out.nodes = std::move(nodes.value().items);
  out.pods = std::move(pods.value().items);
  out.done = true;
}

int run(const Options& o) {
  auto view = top::parse_top_view(o.view);
  if (!view) {
    std::fprintf(stderr, "gpuslice top: %s\n", view.message().c_str());
    return 2;
  }
  auto sort = top::parse_sort(o.sort);
  if (!sort) {
    std::fprintf(stderr, "gpuslice top: %s\n", sort.message().c_str());
    return 2;
  }
  auto timeout = parse_duration(o.timeout);
  if (!timeout) {
    std::fprintf(stderr, "gpuslice top: --request-timeout: \"%s\": %s\n", o.timeout.c_str(), timeout.message().c_str());
    return 2;
  }
  Configuration config;
  if (!o.config.empty()) {
    auto c = load_configuration_file(o.config);
    if (!c) {
      std::fprintf(stderr, "gpuslice top: %s\n", c.message().c_str());
      return 2;
    }
    config = std::move(*c);
  }
  const std::string scheduler_name = o.scheduler_name.empty() ? config.scheduler_name : o.scheduler_name;
  auto rest = kube::load_default_config(o.kubeconfig, kube::Environment::system());
  if (!rest) {
    std::fprintf(stderr, "gpuslice top: kubeconfig: %s\n", rest.message().c_str());
    return 1;
  }
  asio::io_context io;
  kube::ClientOptions co;
  co.timeout = *timeout;
  co.user_agent = "gpuslice-top";
  auto client = kube::Client::create(io.get_executor(), std::move(*rest), co);
  if (!client) {
    std::fprintf(stderr, "gpuslice top: kube client: %s\n", client.message().c_str());
    return 1;
  }
  Listed listed;
  asio::co_spawn(io, list_all(*client, listed), asio::detached);
  io.run();
  if (!listed.done || !listed.error.empty()) {
    std::fprintf(stderr, "gpuslice top: %s\n", listed.error.empty() ? "listing did not finish" : listed.error.c_str());
    return 1;
  }
  std::vector<std::string> warnings;
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  auto v = top::build_view_from_objects(listed.nodes, listed.pods, config.devices, scheduler_name, now, &warnings);
  for (const std::string& w : warnings) {
    std::fprintf(stderr, "warning: %s\n", w.c_str());
  }
  if (o.output == "json") {
    scheduler::status::PageQuery q;
    q.sort = *sort;
    q.limit = std::numeric_limits<size_t>::max() / 2;
    q.pending_limit = std::numeric_limits<size_t>::max() / 2;
    std::string body = scheduler::status::render_json(v, q);
    std::fwrite(body.data(), 1, body.size(), stdout);
    std::fputc('\n', stdout);
    return 0;
  }
  std::string text = top::render_top(v, *view, o.output == "wide", *sort);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

std::function<int()> setup(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "top", "Show GPU nodes, cards, pods and pending GPU pods from the Kubernetes API (also: kubectl gpuslice top)");
  auto o = std::make_shared<Options>();
  sub->add_option("view", o->view, "all (default), nodes, cards, pods or pending");
  sub->add_option("-o,--output", o->output, "wide or json (default: tables)")
      ->check(CLI::IsMember({"", "wide", "json"}));
  sub->add_option("--kubeconfig", o->kubeconfig, "kubeconfig (default: $KUBECONFIG, in-cluster, then ~/.kube/config)");
  sub->add_option("--config", o->config, "gpuslice configuration file (resource names, scheduler name)");
  sub->add_option("--scheduler-name", o->scheduler_name, "schedulerName of pending pods (default gpuslice-scheduler)");
  sub->add_option("--sort", o->sort, "Node and card order: name, used, free or stranded")
      ->check(CLI::IsMember({"name", "used", "free", "stranded"}));
  sub->add_option("--request-timeout", o->timeout, "Deadline of each API request (default 30s)");
  return [o] { return run(*o); };
}

GPUSLICE_COMMAND("top", setup);

}  // namespace
