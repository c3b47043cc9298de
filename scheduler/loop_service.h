#pragma once
// Wiring of the scheduler half of `gpuslice serve`: the informers (pods not yet finished, nodes matching
// scheduler.node_label_selector, resource quotas), the SchedulingLoop and, when enabled, Lease leader election.
// Every replica keeps its informers warm; only the leader's loop writes. ready() is what /readyz's "leader"
// check reports: synced and leading (or leader election disabled).
//
//   auto proc = scheduler::SchedulerProcess::start(config, identity);   // own I/O thread
//   if (!proc) { log::error(...); return 1; }
//   ... (*proc)->ready() ...
//   (*proc)->stop();   // releases the lease, joins the thread

#include "common/config.h"
#include "common/result.h"
#include "kube/client.h"
#include "kube/reflector.h"
#include "scheduler/leader_runner.h"
#include "scheduler/loop.h"
#include "scheduler/status_publisher.h"

#include <boost/asio/io_context.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace gpuslice::scheduler {

/// LoopOptions from the configuration.
LoopOptions loop_options_from(const Configuration& config, std::string identity);

/// The Lease namespace by common/config.h's effective_lease_namespace: leader_election.lease_namespace, else
/// the service account's namespace in-cluster, else gpuslice-system (kDefaultNamespace).
std::string lease_namespace_for(const Configuration& config, const kube::RestConfig& rest);

/// A leader-election identity as client-go makes it: "<hostname>_<random hex>".
std::string make_identity();

/// Informers + loop + leader election on a client's executor (which must be single-threaded).
class SchedulerService {
 public:
  /// Clients besides the bind client, each with its own rate limit (all on the same executor; null: the bind
  /// client), as kube-scheduler builds an event client and a leader-election client beside its main one.
  struct ExtraClients {
    /// Events, PodScheduled=False conditions and labels: they never take a bind's token.
    std::shared_ptr<kube::Client> side;
    /// The node lock's reads and writes (SchedulingLoop's `lock_api`), as HAMi's extender writes the lock with
    /// its own client beside kube-scheduler's.
    std::shared_ptr<kube::Client> lock;
    /// The Lease: renewals never wait behind a burst of binds (kube-scheduler's "leader-election" client).
    std::shared_ptr<kube::Client> lease;
  };
  SchedulerService(std::shared_ptr<kube::Client> client, const Configuration& config, std::string identity,
                   std::string lease_namespace, LoopClock clock = {}, ExtraClients extra = {});
  /// co_spawns everything on the client's executor. Call once.
  void start();
  /// Stops informers, loop and election (releasing the lease); call on the executor.
  void stop();

  bool ready() const;    ///< thread-safe
  bool leading() const;  ///< thread-safe; true when leader election is disabled
  std::shared_ptr<SchedulingLoop> loop() const { return loop_; }
  /// The status views the loop publishes (scheduler/status_publisher.h); thread-safe to read, outlives stop().
  std::shared_ptr<const status::StatusBoard> status_board() const { return publisher_->board(); }

 private:
  void on_synced(int which);

  std::shared_ptr<kube::Client> client_;
  std::shared_ptr<kube::Client> side_client_;
  std::shared_ptr<kube::Client> lock_client_;
  std::shared_ptr<kube::Client> lease_client_;
  Configuration config_;
  std::shared_ptr<SchedulingLoop> loop_;
  std::shared_ptr<LeaderRunner> leader_;  // null when disabled
  std::shared_ptr<StatusPublisher> publisher_;
  std::vector<std::shared_ptr<kube::Reflector>> reflectors_;
  /// One bit per Reflector: pods 1, nodes 2, resourcequotas 4, then one per cluster-object kind.
  static constexpr int kAllSynced = (1 << (3 + kClusterObjectKinds)) - 1;
  int synced_mask_ = 0;
};

/// SchedulerService with its own io_context thread and client, for `gpuslice serve`.
class SchedulerProcess {
 public:
  /// Loads the client config (--kubeconfig, $KUBECONFIG, in-cluster, ~/.kube/config), creates the client with
  /// scheduler.kube_qps/burst/timeout, and starts the service. Errors name what failed (config, client).
  static Result<std::unique_ptr<SchedulerProcess>> start(const Configuration& config, std::string identity = {});
  ~SchedulerProcess();
  /// Stops and joins (idempotent). Gives the lease up when leading.
  void stop();
  bool ready() const { return service_->ready(); }
  bool leading() const { return service_->leading(); }
  bool synced() const { return service_->loop()->synced(); }
  const std::string& identity() const { return identity_; }
  /// The status views the loop publishes at a bounded rate (scheduler/status_board.h): readers take the last
  /// one and never wait on the loop. Thread-safe; the board outlives the process (it keeps the last view).
  std::shared_ptr<const status::StatusBoard> status_board() const { return service_->status_board(); }

 private:
  SchedulerProcess() = default;
  boost::asio::io_context io_;
  std::shared_ptr<kube::Client> client_;
  std::shared_ptr<kube::Client> side_client_;   // Events, conditions, labels: their own rate limit
  std::shared_ptr<kube::Client> lock_client_;   // the node lock (nodeLock: hami): its own rate limit
  std::shared_ptr<kube::Client> lease_client_;  // leader election: its own rate limit
  std::shared_ptr<SchedulerService> service_;
  std::string identity_;
  std::thread thread_;
  std::atomic<bool> stopped_{false};
  bool leader_enabled_ = false;
};

}  // namespace gpuslice::scheduler
