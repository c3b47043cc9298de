#pragma once
// The lab's device agent: an emulation of HAMi v2.10's NVIDIA device plugin Allocate path, driven the way
// kubelet's device manager drives it, for simulated GPU nodes (no NVML, no kubelet). It is never looser than the
// real plugin; every difference is listed in hami-protocol.md §14. Followed upstream (Project-HAMi/HAMi):
//   pkg/device-plugin/nvidiadevice/nvinternal/plugin/server.go  Allocate, getAllocateResponse
//   pkg/device-plugin/nvidiadevice/nvinternal/plugin/util.go    GetNextDeviceRequest, PodAllocationTrySuccess,
//                                                               PodAllocationFailed
//   pkg/util/util.go                                            GetPendingPod, GetAllocatePodByNode
//   pkg/device/devices.go                                       DecodePodDevices (empty entries dropped),
//                                                               EraseNextDeviceTypeFromAnnotation
//   pkg/util/nodelock/nodelock.go                               ParseNodeLock, ReleaseNodeLock (owner check)
//
// For each pod newly bound to a managed node (what kubelet admits), one per node at a time:
//  1. kubelet's calls: init containers (sidecars included) in order, then app containers, only those whose
//     resources.limits has nvidia.com/gpu > 0, each asking for exactly that many devices;
//  2. per call, as the plugin: GET the node, find the pending pod through hami.io/mutex.lock (a lock that does not
//     parse, or names a pod that cannot be read, fails the call with no write; a legacy or absent lock falls back
//     to the first Pending pod on the node with bind-time, bind-phase allocating|success and vgpu-node = node);
//     pop the first non-empty entry of its hami.io/vgpu-devices-to-allocate ("device request not found" when there
//     is none), require its device count to equal the call's ("device number not matched"), compute the
//     environment, patch the annotation with that entry emptied, then re-read the pod and, when no NVIDIA entry
//     is left, set bind-phase=success and release the lock if it names that pod. Any failure sets
//     bind-phase=failed and releases the lock the same way; kubelet then stops admitting the pod;
//  3. the result is recorded on the admitted pod in `lab.gpuslice.io/device-plugin` (JSON, below) and, on
//     failure, as a Warning Event UnexpectedAdmissionError, so e2e tests assert on what containers would get.
// Pods kubelet would not call the plugin for (no container with the limit) and without a device entry are
// left alone. The agent never releases a lock the plugin would not.

#include "kube/client.h"
#include "kube/rate_limiter.h"
#include "kube/reflector.h"
#include "scheduler/allocation.h"
#include "scheduler/loop_api.h"

#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace gpuslice::scheduler {

/// Where the agent records what the emulated plugin returned for each container of an admitted pod:
/// {"result":"admitted"|"rejected","error":"...","containers":[{"name":"main","init":false,"devices":1,
///  "allocated":true,"env":{"NVIDIA_VISIBLE_DEVICES":"GPU-a",...}},...]} (containers in kubelet's order, every
/// container listed; `env` is the plugin's environment overlaid with the container's own literal env for the
/// HAMi-core variables, the way the runtime sees it; `pendingPod` names the pod the plugin took entries from).
inline constexpr std::string_view kDevicePluginRecordAnnotation = "lab.gpuslice.io/device-plugin";

/// One Allocate call kubelet makes for a pod.
struct KubeletAllocateCall {
  std::string container;
  bool init = false;
  int64_t devices = 0;  ///< the container's nvidia.com/gpu limit
};

/// kubelet's device manager order for `pod`: every container (init first) with a positive `gpu_resource` limit.
/// A limit that is not a whole number is skipped (the API server rejects such pods).
std::vector<KubeletAllocateCall> kubelet_allocate_calls(const boost::json::object& pod,
                                                        const std::string& gpu_resource);

/// The v2.10 decode of a device string for one vendor: segments split by `;`, each by `:`, a device needs at
/// least 4 comma fields (otherwise the whole string decodes to nothing, as DecodePodDevices swallows the error),
/// numbers that do not parse become 0, and EMPTY CONTAINER ENTRIES ARE DROPPED.
std::vector<ContainerDevices> plugin_decode_entries(std::string_view text);

/// The v2.10 encode after erasing: each entry, then `;`.
std::string plugin_encode_entries(const std::vector<ContainerDevices>& entries);

struct EmulatedAllocate {
  bool ok = false;
  std::string error;                        ///< the plugin's error text when !ok
  std::map<std::string, std::string> envs;  ///< the plugin's container environment when ok
  std::string erased_to_allocate;           ///< -to-allocate after this call (the plugin's patch) when ok
};

/// One Allocate for `devices` devices against `pending` (the pod GetPendingPod returned). `shared_cache_id`
/// stands in for the random UUID of CUDA_DEVICE_MEMORY_SHARED_CACHE. Pure.
EmulatedAllocate emulate_allocate(const boost::json::object& pending, int64_t devices, std::string_view shared_cache_id,
                                  std::string_view hook_path = "/usr/local/vgpu");

/// True when `to_allocate` still holds the vendor word (PodAllocationTrySuccess keeps waiting).
bool plugin_has_pending_entries(std::string_view to_allocate);

/// GetPendingPod's fallback: the first (by namespace/name) of `pods` that is Pending on `node` with bind-time,
/// bind-phase allocating|success and hami.io/vgpu-node == node.
std::optional<boost::json::object> plugin_fallback_pending_pod(const std::vector<const boost::json::object*>& pods,
                                                               std::string_view node);

struct MockAgentStats {
  uint64_t admitted = 0;  ///< pods whose every Allocate call succeeded
  uint64_t rejected = 0;  ///< pods with a failed Allocate call
  uint64_t allocate_calls = 0;
  uint64_t locks_released = 0;
  uint64_t conflicts = 0;
  uint64_t status_retries = 0;    ///< pods/status writes of a rejection tried again after an error
  uint64_t status_abandoned = 0;  ///< rejections whose pods/status write never succeeded within the budget
  uint64_t status_resyncs = 0;    ///< rejections written again because the pod had been turned back from Failed
  uint64_t plugin_requests = 0;   ///< API requests made as the device plugin (through the node's own limit)
  uint64_t plugin_throttled = 0;  ///< of those, requests that had to wait for the node's client-side limit
};

/// The device plugin's own API client limit. HAMi's plugin is a DaemonSet: every node's plugin has its own
/// client-go client, with client-go's defaults (rest.DefaultQPS 5, rest.DefaultBurst 10; Project-HAMi/HAMi
/// pkg/util/client/options.go), so each node's Allocate calls queue on that node's 5 requests/s. The agent gives
/// each managed node one token bucket with these values for the requests the plugin makes (GET node, GET pod,
/// PATCH pod, PATCH node); what kubelet or the lab write (the record, the Event, the rejection's pods/status) does
/// not pass through it. `now` is the bucket's clock (injected in tests); qps <= 0 means unlimited.
struct MockAgentPluginRate {
  double qps = 5;
  int burst = 10;
  std::function<std::chrono::steady_clock::time_point()> now = [] { return std::chrono::steady_clock::now(); };
};

/// How the agent retries the pods/status write that moves a rejected pod to phase Failed. kubelet's status
/// manager keeps such a write until it lands (it re-syncs every pod every 10 s, pkg/kubelet/status); the agent
/// retries on ANY error but NotFound (a restarting API server answers 403 until its RBAC cache has synced, 429,
/// 5xx, or nothing at all) with a doubling delay from `first` capped at `cap`, and gives up once the delays add up
/// to `budget`, so a pod deleted behind its back cannot keep a coroutine forever. The write runs beside the node's
/// admission queue, as kubelet's status manager runs beside its admission: the next pod is not held behind it.
///
/// Once written, the rejection is kept as kubelet's status manager keeps a pod's status: every `status_sync`
/// (kubelet: 10 s, syncBatch) each rejected pod the agent still sees is compared with what the API holds, and when
/// another writer has turned it back from Failed (the lab's kwok applies a pod-ready stage it computed before the
/// rejection landed), Failed is written again. Every write carries the pod's UID (kubelet's PatchPodStatus does the
/// same: metadata.uid is immutable, so a pod recreated under the same name answers 422 and is never touched); a
/// rejection is forgotten when its pod is deleted or replaced.
struct MockAgentRetry {
  std::chrono::milliseconds first{500};
  std::chrono::milliseconds cap{5000};
  std::chrono::milliseconds budget{120000};
  std::chrono::milliseconds status_sync{10000};
};

class MockDeviceAgent : public std::enable_shared_from_this<MockDeviceAgent> {
 public:
  MockDeviceAgent(boost::asio::any_io_executor executor, std::shared_ptr<LoopApi> api,
                  std::string gpu_resource = "nvidia.com/gpu", MockAgentRetry retry = {});

  void on_pod_event(const kube::ReflectorEvent& event);
  void on_node_event(const kube::ReflectorEvent& event);
  const MockAgentStats& stats() const { return stats_; }
  /// Replaces the per-node plugin client limit (before the first pod arrives).
  void set_plugin_rate(MockAgentPluginRate rate);
  /// Pods queued or being admitted, plus rejections whose pods/status write is still being retried.
  std::size_t in_flight() const;

 private:
  struct NodeQueue {
    std::deque<std::string> pods;  // "ns/name" waiting for admission, in arrival order
    bool running = false;
  };
  void consider_pod(const boost::json::object& pod);
  void kick(const std::string& node);
  boost::asio::awaitable<void> drain(std::string node);
  boost::asio::awaitable<void> admit(std::string node, std::string key);
  /// GetPendingPod: the pod whose entries the next Allocate consumes, or the plugin's error.
  boost::asio::awaitable<Result<boost::json::object>> pending_pod(const std::string& node);
  boost::asio::awaitable<void> finish_pod(const std::string& node, const boost::json::object& pending,
                                          std::string_view phase);
  boost::asio::awaitable<void> release_lock(const std::string& node, const std::string& ns, const std::string& name);
  /// Waits for a token of `node`'s plugin client (HAMi's per-node client-go limit) before one plugin request.
  boost::asio::awaitable<void> plugin_request_slot(const std::string& node);
  /// kubelet's rejection: phase Failed through pods/status, retried per `retry_`.
  boost::asio::awaitable<void> write_rejection(std::string key);
  /// kubelet's status sync: every retry_.status_sync, rejected pods turned back from Failed are written again.
  boost::asio::awaitable<void> status_sync();
  void start_rejection_write(const std::string& key);

  boost::asio::any_io_executor executor_;
  std::shared_ptr<LoopApi> api_;
  std::string gpu_resource_;
  MockAgentRetry retry_;
  MockAgentPluginRate plugin_rate_;
  std::map<std::string, kube::TokenBucket, std::less<>> plugin_buckets_;  // by node
  std::size_t rejections_in_flight_ = 0;
  struct Rejection {
    std::string uid;
    std::string ns, name;
    std::string body;  // the pods/status merge patch, metadata.uid included
    bool writing = false;
  };
  std::map<std::string, Rejection, std::less<>> rejections_;  // by ns/name, until the pod is deleted or replaced
  bool status_sync_running_ = false;
  std::set<std::string, std::less<>> managed_;
  std::set<std::string, std::less<>> listing_;                    // node names of the node list being delivered (paged)
  std::map<std::string, boost::json::object, std::less<>> pods_;  // bound pods on managed nodes, by ns/name
  std::set<std::string> admitted_uids_;                           // kubelet admits a pod once
  std::map<std::string, NodeQueue> queues_;
  uint64_t seq_ = 0;
  MockAgentStats stats_;
};

/// `gpuslice mock-device-agent`: its own client and informers; runs until SIGINT/SIGTERM.
struct MockAgentConfig {
  std::string kubeconfig;
  std::string node_selector;  ///< label selector of the managed nodes ("" = every node)
  double qps = 1000;          ///< the agent's shared client: watches, and what kubelet and the lab write for every node
  int burst = 2000;
  double plugin_qps = 5;  ///< each node's device plugin client (MockAgentPluginRate)
  int plugin_burst = 10;
};
int run_mock_device_agent(const MockAgentConfig& config);

}  // namespace gpuslice::scheduler
