#include "scheduler/loop_service.h"

#include "common/log.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>

#include <unistd.h>

#include <cstdio>
#include <future>
#include <random>

namespace gpuslice::scheduler {

namespace asio = boost::asio;

LoopOptions loop_options_from(const Configuration& config, std::string identity) {
  LoopOptions o;
  o.scheduler_name = config.scheduler_name;
  o.devices = config.devices;
  o.scheduler = config.scheduler;
  o.identity = std::move(identity);
  o.queue_capacity = 100000;
  return o;
}

std::string lease_namespace_for(const Configuration& config, const kube::RestConfig& rest) {
  // The rule is common/config.h's, shared with `gpuslice doctor`; only in-cluster is the running namespace known.
  return effective_lease_namespace(config.scheduler.leader_election,
                                   rest.source == "in-cluster" ? std::string_view(rest.default_namespace) : "");
}

std::string make_identity() {
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0 || host[0] == 0) {
    std::snprintf(host, sizeof host, "gpuslice");
  }
  std::random_device rd;
  char suffix[17];
  std::snprintf(suffix, sizeof suffix, "%08x%08x", rd(), rd());
  return std::string(host) + "_" + suffix;
}

SchedulerService::SchedulerService(std::shared_ptr<kube::Client> client, const Configuration& config,
                                   std::string identity, std::string lease_namespace, LoopClock clock,
                                   ExtraClients extra)
    : client_(std::move(client)),
      side_client_(extra.side ? std::move(extra.side) : client_),
      lock_client_(extra.lock ? std::move(extra.lock) : client_),
      lease_client_(extra.lease ? std::move(extra.lease) : client_),
      config_(config) {
  auto options = loop_options_from(config, identity);
  options.clock = clock;
  loop_ = std::make_shared<SchedulingLoop>(client_->get_executor(), std::move(options), make_client_api(client_),
                                           side_client_ == client_ ? nullptr : make_client_api(side_client_),
                                           lock_client_ == client_ ? nullptr : make_client_api(lock_client_));
  if (config.scheduler.leader_election.enabled) {
    LeaderElector elector(identity, std::move(lease_namespace), config.scheduler.leader_election.lease_name,
                          config.scheduler.leader_election);
    std::weak_ptr<SchedulingLoop> weak = loop_;
    leader_ = std::make_shared<LeaderRunner>(lease_client_, std::move(elector), clock, [weak](bool leading) {
      if (auto l = weak.lock()) {
        l->set_active(leading);
      }
    });
  } else {
    loop_->set_active(true);
  }
  // The status page's and /metrics' data: built on this executor at a bounded rate, read by HTTP threads
  // without ever waiting on the loop.
  {
    std::weak_ptr<SchedulingLoop> weak = loop_;
    std::weak_ptr<LeaderRunner> weak_leader = leader_;
    const bool election = config.scheduler.leader_election.enabled;
    publisher_ = std::make_shared<StatusPublisher>(
        client_->get_executor(),
        [weak, weak_leader, election, identity]() -> status::StatusView {
          auto l = weak.lock();
          if (!l) {
            return {};
          }
          status::SchedulerState st;
          st.source = "gpuslice serve";
          st.leader_election = election;
          auto leader = weak_leader.lock();
          st.leading = election ? (leader && leader->leading()) : true;
          st.identity = identity;
          return l->status_view(st);
        },
        status::PublishPolicy{}, clock.steady);
  }

  auto add = [&](kube::ReflectorOptions ro, int bit, void (SchedulingLoop::*handler)(const kube::ReflectorEvent&)) {
    std::weak_ptr<SchedulingLoop> weak = loop_;
    reflectors_.push_back(std::make_shared<kube::Reflector>(
        client_, std::move(ro), [this, weak, bit, handler](const kube::ReflectorEvent& e) {
          auto l = weak.lock();
          if (!l) {
            return;
          }
          ((*l).*handler)(e);
          if (e.type == kube::ReflectorEventType::relisted && e.relist_complete) {
            on_synced(bit);
          }
        }));
  };
  kube::ReflectorOptions pods;
  pods.resource = kube::resources::pods();
  // Finished pods hold nothing; with this selector they arrive as DELETED when they finish.
  pods.field_selector = "status.phase!=Succeeded,status.phase!=Failed";
  pods.name = "pods";
  add(std::move(pods), 1, &SchedulingLoop::on_pod_event);
  kube::ReflectorOptions nodes;
  nodes.resource = kube::resources::nodes();
  nodes.label_selector = config.scheduler.node_label_selector;
  nodes.name = "nodes";
  add(std::move(nodes), 2, &SchedulingLoop::on_node_event);
  kube::ReflectorOptions quotas;
  quotas.resource = kube::Resource{"", "v1", "resourcequotas", true};
  quotas.name = "resourcequotas";
  add(std::move(quotas), 4, &SchedulingLoop::on_quota_event);
  // What the default plugins read besides pods and nodes (scheduler/framework/cluster_objects.h).
  struct ObjectWatch {
    ClusterObjectKind kind;
    kube::Resource resource;
  };
  const ObjectWatch object_watches[] = {
      {ClusterObjectKind::namespace_labels, kube::resources::namespaces()},
      {ClusterObjectKind::claim, kube::Resource{"", "v1", "persistentvolumeclaims", true}},
      {ClusterObjectKind::volume, kube::Resource{"", "v1", "persistentvolumes", false}},
      {ClusterObjectKind::storage_class, kube::Resource{"storage.k8s.io", "v1", "storageclasses", false}},
      {ClusterObjectKind::csi_node, kube::Resource{"storage.k8s.io", "v1", "csinodes", false}},
      {ClusterObjectKind::disruption_budget, kube::Resource{"policy", "v1", "poddisruptionbudgets", true}},
      {ClusterObjectKind::service, kube::Resource{"", "v1", "services", true}},
      {ClusterObjectKind::replication_controller, kube::Resource{"", "v1", "replicationcontrollers", true}},
      {ClusterObjectKind::replica_set, kube::Resource{"apps", "v1", "replicasets", true}},
      {ClusterObjectKind::stateful_set, kube::Resource{"apps", "v1", "statefulsets", true}},
  };
  int bit = 8;
  for (const ObjectWatch& w : object_watches) {
    kube::ReflectorOptions ro;
    ro.resource = w.resource;
    ro.name = std::string(cluster_object_kind_name(w.kind)) + "s";
    std::weak_ptr<SchedulingLoop> weak = loop_;
    const ClusterObjectKind kind = w.kind;
    reflectors_.push_back(std::make_shared<kube::Reflector>(
        client_, std::move(ro), [this, weak, bit, kind](const kube::ReflectorEvent& e) {
          auto l = weak.lock();
          if (!l) {
            return;
          }
          l->on_cluster_object_event(kind, e);
          if (e.type == kube::ReflectorEventType::relisted && e.relist_complete) {
            on_synced(bit);
          }
        }));
    bit <<= 1;
  }
}

void SchedulerService::on_synced(int which) {
  const int before = synced_mask_;
  synced_mask_ |= which;
  if (before != kAllSynced && synced_mask_ == kAllSynced) {
    log::info("scheduler informers synced", {{"nodes", static_cast<int64_t>(loop_->snapshot().node_count())},
                                             {"pods", static_cast<int64_t>(loop_->snapshot().pod_count())}});
    loop_->set_synced(true);
  }
}

void SchedulerService::start() {
  auto ex = client_->get_executor();
  for (auto& r : reflectors_) {
    asio::co_spawn(
        ex, [r]() -> asio::awaitable<void> { co_await r->run(); }, asio::detached);
  }
  asio::co_spawn(ex, loop_->run(), asio::detached);
  asio::co_spawn(ex, loop_->run_sweeper(), asio::detached);
  asio::co_spawn(ex, publisher_->run(), asio::detached);
  if (leader_) {
    asio::co_spawn(ex, leader_->run(), asio::detached);
  }
}

void SchedulerService::stop() {
  if (leader_) {
    leader_->stop();
  }
  for (auto& r : reflectors_) {
    r->stop();
  }
  publisher_->stop();
  loop_->stop();
}

bool SchedulerService::leading() const {
  return leader_ ? leader_->leading() : true;
}

bool SchedulerService::ready() const {
  return loop_->synced() && leading();
}

Result<std::unique_ptr<SchedulerProcess>> SchedulerProcess::start(const Configuration& config, std::string identity) {
  auto rest = kube::load_default_config(config.kubeconfig, kube::Environment::system());
  if (!rest) {
    return make_error("kubeconfig: " + rest.message());
  }
  std::unique_ptr<SchedulerProcess> p(new SchedulerProcess());
  p->identity_ = identity.empty() ? make_identity() : std::move(identity);
  kube::ClientOptions co;
  co.qps = config.scheduler.kube_qps;
  co.burst = config.scheduler.kube_burst;
  co.timeout = config.scheduler.kube_timeout;
  co.user_agent = "gpuslice-scheduler";
  // Up to max_binds_in_flight binders write at once: a pool as large keeps each one's connection (with a smaller
  // pool, each burst closed the surplus and the next opened them again: a TLS handshake on the API server per
  // connection; 77 per 2,000 binds with 32).
  co.max_idle_connections = LoopOptions{}.max_binds_in_flight;
  const std::string lease_ns = lease_namespace_for(config, *rest);
  const std::string source = rest->source;
  // Events, conditions and labels: a second client with the same limits and its own token bucket (kube-scheduler
  // builds its event client the same way), so a burst of reports never delays a Binding.
  kube::ClientOptions side = co;
  side.user_agent = "gpuslice-scheduler/events";
  side.max_idle_connections = LoopOptions{}.max_side_effects_in_flight;  // 8 opened 274 per 2,000 Scheduled events
  auto side_client = kube::Client::create(p->io_.get_executor(), *rest, side);
  if (!side_client) {
    return make_error("kube client (events): " + side_client.message());
  }
  // The node lock: a third client with the same limits (HAMi's lock is written by its scheduler extender's own
  // client, beside kube-scheduler's), so a GPU pod's two writes, lock and Binding, each have a token bucket and a
  // burst binds at the client QPS rather than half of it. Only with nodeLock: hami.
  std::shared_ptr<kube::Client> lock_client;
  if (config.scheduler.node_lock == "hami") {
    kube::ClientOptions lock = co;
    lock.user_agent = "gpuslice-scheduler/nodelock";
    auto c = kube::Client::create(p->io_.get_executor(), *rest, lock);
    if (!c) {
      return make_error("kube client (node lock): " + c.message());
    }
    lock_client = *c;
  }
  // The Lease: its own client, as kube-scheduler's leader-election client, so a renewal never queues behind binds
  // (and the binds pay nothing for the election).
  std::shared_ptr<kube::Client> lease_client;
  if (config.scheduler.leader_election.enabled) {
    kube::ClientOptions lease = co;
    lease.user_agent = "gpuslice-scheduler/leader-election";
    lease.max_idle_connections = 2;
    auto c = kube::Client::create(p->io_.get_executor(), *rest, lease);
    if (!c) {
      return make_error("kube client (leader election): " + c.message());
    }
    lease_client = *c;
  }
  auto client = kube::Client::create(p->io_.get_executor(), std::move(*rest), co);
  if (!client) {
    return make_error("kube client: " + client.message());
  }
  p->client_ = *client;
  p->side_client_ = *side_client;
  p->lock_client_ = lock_client;
  p->lease_client_ = lease_client;
  p->service_ = std::make_shared<SchedulerService>(
      p->client_, config, p->identity_, lease_ns, LoopClock{},
      SchedulerService::ExtraClients{.side = p->side_client_, .lock = p->lock_client_, .lease = p->lease_client_});
  p->leader_enabled_ = config.scheduler.leader_election.enabled;
  log::info("scheduler starting", {{"identity", p->identity_},
                                   {"schedulerName", config.scheduler_name},
                                   {"config", source},
                                   {"leaderElection", config.scheduler.leader_election.enabled},
                                   {"leaseNamespace", lease_ns},
                                   {"nodeLock", config.scheduler.node_lock}});
  p->service_->start();
  p->thread_ = std::thread([io = &p->io_] {
    auto guard = asio::make_work_guard(*io);
    io->run();
  });
  return p;
}

void SchedulerProcess::stop() {
  if (stopped_.exchange(true)) {
    return;
  }
  std::promise<void> done;
  auto fut = done.get_future();
  asio::post(io_, [this, &done] {
    service_->stop();
    done.set_value();
  });
  fut.wait();
  // Give the lease release (one request, bounded by the client's timeout) time to finish, then end the thread.
  for (int i = 0; i < 240 && service_->leading() && leader_enabled_; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  io_.stop();
  if (thread_.joinable()) {
    thread_.join();
  }
}

SchedulerProcess::~SchedulerProcess() {
  stop();
}

}  // namespace gpuslice::scheduler
