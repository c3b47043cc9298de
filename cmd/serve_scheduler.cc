// The scheduler half of `gpuslice serve`: its flags and the component that runs informers, leader election and
// the scheduling loop (scheduler/loop_service.h). Every replica serves the webhook; only the Lease holder
// schedules, and /readyz's "leader" check reports whether this replica is that one (when election is on). The
// health port also serves the status page (/status, /status.json) and /metrics carries HAMi's scheduler series,
// both from the status view (scheduler/status_view.h) that the loop publishes at a bounded rate
// (scheduler/status_publisher.h): the HTTP side reads the last one and never waits on the loop.
#include "cmd/serve.h"
#include "common/log.h"
#include "common/metrics.h"
#include "scheduler/loop_service.h"
#include "scheduler/status_board.h"
#include "scheduler/status_view.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>

namespace {

using gpuslice::Configuration;
using gpuslice::Status;

struct Flags {
  std::string kubeconfig, node_lock, node_lock_timeout, node_policy, gpu_policy, node_label_selector, kube_timeout,
      max_backoff, lease_duration, renew_deadline, retry_period, lease_name, lease_namespace, identity;
  double kube_qps = 0;
  int kube_burst = 0;
  bool leader_elect = true;
  bool hami_legacy_metrics = true;
};

Status set_duration(const CLI::Option* opt, const std::string& flag, const std::string& text,
                    std::chrono::milliseconds& out) {
  if (opt->count() == 0) {
    return {};
  }
  auto d = gpuslice::parse_duration(text);
  if (!d) {
    return gpuslice::make_error(flag + ": " + d.message());
  }
  out = *d;
  return {};
}

/// The status views of the running scheduler, for the page handlers and the metrics collector (which the registry
/// keeps for the life of the process): the board the loop publishes to (scheduler/status_board.h). Reading it never
/// waits on the loop; before the first view and once the component stops there is none.
struct StatusSource {
  std::mutex mutex;
  std::shared_ptr<const gpuslice::scheduler::status::StatusBoard> board;
  std::atomic<bool> legacy{true};  ///< also HAMi's pre-2.8 names (GPUDeviceMemoryAllocated, vGPUMemoryAllocated, ...)

  static StatusSource& get() {
    static StatusSource* source = [] {
      auto* s = new StatusSource();  // never destroyed: the registry's collector may run at exit
      gpuslice::metrics::default_registry().add_collector([s](std::string& out) {
        auto p = s->latest();
        if (p) {
          gpuslice::scheduler::status::append_hami_metrics(out, p->view, s->legacy.load());
          out += gpuslice::scheduler::status::render_board_metrics(p.get(), std::chrono::steady_clock::now());
        }
      });
      return s;
    }();
    return *source;
  }
  std::shared_ptr<const gpuslice::scheduler::status::Published> latest() {
    std::shared_ptr<const gpuslice::scheduler::status::StatusBoard> b;
    {
      std::lock_guard lock(mutex);
      b = board;
    }
    return b ? b->latest() : nullptr;
  }
  bool running() {
    std::lock_guard lock(mutex);
    return board != nullptr;
  }
  void set(std::shared_ptr<const gpuslice::scheduler::status::StatusBoard> b) {
    std::lock_guard lock(mutex);
    board = std::move(b);
  }
};

class SchedulerComponent final : public gpuslice::cmd::Component {
 public:
  SchedulerComponent(const Configuration& config, std::string identity) : config_(config), identity_(identity) {}
  std::string name() const override { return "scheduler"; }

  Status start(gpuslice::cmd::Runtime& runtime) override {
    auto p = gpuslice::scheduler::SchedulerProcess::start(config_, identity_);
    if (!p) {
      return gpuslice::make_error(p.message());
    }
    process_ = std::shared_ptr<gpuslice::scheduler::SchedulerProcess>(std::move(*p));
    StatusSource::get().set(process_->status_board());
    if (runtime.pages != nullptr) {
      pages_ = runtime.pages;
      for (bool json : {false, true}) {
        pages_->add(json ? "/status.json" : "/status", [json](std::string_view query) {
          auto& source = StatusSource::get();
          auto view = source.latest();
          return gpuslice::scheduler::status::board_response(
              json, query, view.get(), std::chrono::steady_clock::now(),
              source.running() ? "the scheduling loop has published no status view yet"
                               : "the scheduler is not running");
        });
      }
    }
    if (runtime.readiness != nullptr) {
      auto* proc = process_.get();
      const bool election = config_.scheduler.leader_election.enabled;
      runtime.readiness->add("informer-sync", [proc]() -> Status {
        return proc->synced() ? Status{} : gpuslice::make_error("scheduler informers have not synced yet");
      });
      if (election) {
        runtime.readiness->add("leader", [proc]() -> Status {
          return proc->leading() ? Status{}
                                 : gpuslice::make_error("not the scheduler leader (identity " + proc->identity() + ")");
        });
      }
    }
    return {};
  }

  void stop() override {
    if (pages_ != nullptr) {
      pages_->remove("/status");
      pages_->remove("/status.json");
    }
    StatusSource::get().set({});
    if (process_) {
      process_->stop();
    }
  }

 private:
  Configuration config_;
  std::string identity_;
  std::shared_ptr<gpuslice::scheduler::SchedulerProcess> process_;
  gpuslice::Pages* pages_ = nullptr;
};

auto g_flags = std::make_shared<Flags>();

gpuslice::cmd::ApplyFlags add_flags(CLI::App& serve) {
  auto f = g_flags;
  auto* kubeconfig = serve.add_option("--kubeconfig", f->kubeconfig,
                                      "kubeconfig (default: $KUBECONFIG, in-cluster, then ~/.kube/config)");
  auto* node_lock = serve
                        .add_option("--node-lock", f->node_lock,
                                    "hami: take hami.io/mutex.lock before binding (for HAMi's device plugin); off")
                        ->check(CLI::IsMember({"hami", "off"}));
  auto* node_lock_timeout =
      serve.add_option("--node-lock-timeout", f->node_lock_timeout, "Age after which a node lock is overwritten (5m)");
  auto* node_policy = serve.add_option("--node-scheduler-policy", f->node_policy, "binpack (default) or spread")
                          ->check(CLI::IsMember({"binpack", "spread"}));
  auto* gpu_policy = serve.add_option("--gpu-scheduler-policy", f->gpu_policy, "spread (default) or binpack")
                         ->check(CLI::IsMember({"binpack", "spread"}));
  auto* selector = serve.add_option("--node-label-selector", f->node_label_selector,
                                    "Only nodes matching this label selector are scheduled to");
  auto* qps = serve.add_option("--kube-qps", f->kube_qps, "Client-side API requests per second (default 50)");
  auto* burst = serve.add_option("--kube-burst", f->kube_burst, "Client-side API burst (default 100)");
  auto* timeout = serve.add_option("--kube-timeout", f->kube_timeout, "Deadline of each API request (default 10s)");
  auto* backoff =
      serve.add_option("--max-backoff", f->max_backoff, "Cap of an unschedulable pod's retry backoff (10s)");
  auto* elect = serve.add_option("--leader-elect", f->leader_elect,
                                 "Elect a leader on a Lease; only the leader schedules (default true)");
  auto* lease_duration = serve.add_option("--leader-elect-lease-duration", f->lease_duration, "default 15s");
  auto* renew_deadline = serve.add_option("--leader-elect-renew-deadline", f->renew_deadline, "default 10s");
  auto* retry_period = serve.add_option("--leader-elect-retry-period", f->retry_period, "default 2s");
  auto* lease_name =
      serve.add_option("--leader-elect-resource-name", f->lease_name, "Lease name (default gpuslice-scheduler)");
  auto* lease_ns = serve.add_option("--leader-elect-resource-namespace", f->lease_namespace,
                                    "Lease namespace (default: the pod's namespace in-cluster, else kube-system)");
  serve.add_option("--leader-elect-identity", f->identity, "Holder identity (default <hostname>_<random>)");
  auto* legacy = serve.add_option(
      "--hami-legacy-metrics", f->hami_legacy_metrics,
      "scheduler.hamiLegacyMetrics: also export HAMi's legacy metric names (GPUDeviceMemoryAllocated, "
      "vGPUMemoryAllocated, ...) for older dashboards; at 40,000 cards they are 50 of the status series' 114 MB "
      "(default true)");
  return [=](Configuration& c) -> Status {
    auto& s = c.scheduler;
    auto& le = s.leader_election;
    if (kubeconfig->count()) c.kubeconfig = f->kubeconfig;
    if (node_lock->count()) s.node_lock = f->node_lock;
    if (node_policy->count()) s.node_scheduler_policy = f->node_policy;
    if (gpu_policy->count()) s.gpu_scheduler_policy = f->gpu_policy;
    if (selector->count()) s.node_label_selector = f->node_label_selector;
    if (qps->count()) s.kube_qps = f->kube_qps;
    if (burst->count()) s.kube_burst = f->kube_burst;
    if (elect->count()) le.enabled = f->leader_elect;
    if (lease_name->count()) le.lease_name = f->lease_name;
    if (lease_ns->count()) le.lease_namespace = f->lease_namespace;
    if (legacy->count()) s.hami_legacy_metrics = f->hami_legacy_metrics;
    for (auto st : {set_duration(node_lock_timeout, "--node-lock-timeout", f->node_lock_timeout, s.node_lock_timeout),
                    set_duration(timeout, "--kube-timeout", f->kube_timeout, s.kube_timeout),
                    set_duration(backoff, "--max-backoff", f->max_backoff, s.max_backoff),
                    set_duration(lease_duration, "--leader-elect-lease-duration", f->lease_duration, le.lease_duration),
                    set_duration(renew_deadline, "--leader-elect-renew-deadline", f->renew_deadline, le.renew_deadline),
                    set_duration(retry_period, "--leader-elect-retry-period", f->retry_period, le.retry_period)}) {
      if (!st.ok()) {
        return st;
      }
    }
    if (le.enabled && !(le.retry_period < le.renew_deadline && le.renew_deadline < le.lease_duration)) {
      return gpuslice::make_error("leader election: need retry period < renew deadline < lease duration, got " +
                                  gpuslice::format_duration(le.retry_period) + " / " +
                                  gpuslice::format_duration(le.renew_deadline) + " / " +
                                  gpuslice::format_duration(le.lease_duration));
    }
    return {};
  };
}

std::unique_ptr<gpuslice::cmd::Component> make(const Configuration& config) {
  if (!config.scheduler.enabled) {
    return nullptr;
  }
  StatusSource::get().legacy = config.scheduler.hami_legacy_metrics;
  return std::make_unique<SchedulerComponent>(config, g_flags->identity);
}

GPUSLICE_SERVE_COMPONENT("scheduler", add_flags, make);

}  // namespace
