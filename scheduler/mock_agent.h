#pragma once
// The lab's mock device agent: for simulated GPU nodes it completes HAMi's allocation protocol the way the
// real device plugin does at Allocate (hami-protocol.md §4 steps 4-5), so the node lock never stalls:
// for each pod bound to a managed node with hami.io/bind-phase=allocating, it empties the consumed
// hami.io/vgpu-devices-to-allocate entries (every container slot kept, each now empty), sets
// bind-phase=success (one merge patch with the pod's resourceVersion), then releases hami.io/mutex.lock on the
// node if the lock names that pod (merge patch with the node's resourceVersion). A lock naming a pod that is
// already success/failed (the agent died between the two patches) is released too.

#include "kube/client.h"
#include "kube/reflector.h"
#include "scheduler/loop.h"
#include "scheduler/loop_api.h"

#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

namespace gpuslice::scheduler {

/// Pure: the merge patch that completes Allocate for `pod` on a managed node, or nullopt when there is nothing
/// to do (not bound to a managed node, bind-phase not allocating, finished). An undecodable -to-allocate is
/// answered like the plugin's error path: bind-phase=failed.
std::optional<std::string> mock_allocate_patch(const boost::json::object& pod,
                                               const std::set<std::string, std::less<>>& managed_nodes);

struct MockAgentStats {
  uint64_t allocated = 0;
  uint64_t failed = 0;
  uint64_t locks_released = 0;
  uint64_t conflicts = 0;
};

class MockDeviceAgent : public std::enable_shared_from_this<MockDeviceAgent> {
 public:
  MockDeviceAgent(boost::asio::any_io_executor executor, std::shared_ptr<LoopApi> api);

  void on_pod_event(const kube::ReflectorEvent& event);
  void on_node_event(const kube::ReflectorEvent& event);
  const MockAgentStats& stats() const { return stats_; }
  std::size_t in_flight() const { return busy_.size(); }

 private:
  void consider_pod(const boost::json::object& pod);
  void consider_node_lock(const std::string& node);
  boost::asio::awaitable<void> allocate(std::string ns, std::string name, std::string node, std::string patch);
  boost::asio::awaitable<void> release_lock(std::string node, std::string ns, std::string name);

  boost::asio::any_io_executor executor_;
  std::shared_ptr<LoopApi> api_;
  std::set<std::string, std::less<>> managed_;
  std::map<std::string, std::pair<std::string, std::optional<std::string>>> nodes_;  // rv, lock
  std::map<std::string, std::string> done_phase_;  // "ns/name" -> bind-phase success|failed (for stale locks)
  std::set<std::string> busy_;                     // pods or "node:<n>" with a write in flight
  MockAgentStats stats_;
};

/// `gpuslice mock-device-agent`: its own client and informers; runs until SIGINT/SIGTERM.
struct MockAgentConfig {
  std::string kubeconfig;
  std::string node_selector;  ///< label selector of the managed nodes ("" = every node)
  double qps = 100;
  int burst = 200;
};
int run_mock_device_agent(const MockAgentConfig& config);

}  // namespace gpuslice::scheduler
