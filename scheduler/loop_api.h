#pragma once
// The API writes and point reads the scheduling loop and the mock device agent make, as a seam: the real
// implementation forwards to kube::Client; unit tests use an in-memory fake. Every call is a coroutine on the
// loop's executor and returns the client's error model (nothing throws).

#include "kube/client.h"
#include "kube/error.h"
#include "kube/objects.h"

#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>

#include <memory>
#include <string>

namespace gpuslice::scheduler {

class LoopApi {
 public:
  using Object = boost::json::object;
  template <class T>
  using Task = boost::asio::awaitable<T>;

  virtual ~LoopApi() = default;
  /// Merge patch of pods/{name}; a metadata.resourceVersion inside is a precondition (409 on change).
  virtual Task<kube::ApiResult<Object>> patch_pod(std::string ns, std::string name, std::string merge_patch) = 0;
  /// Merge patch of persistentvolumeclaims/{name} (VolumeBinding's selected-node annotation).
  virtual Task<kube::ApiResult<Object>> patch_claim(std::string ns, std::string name, std::string merge_patch) = 0;
  /// Merge patch of persistentvolumes/{name} (VolumeBinding's static binding: spec.claimRef); a
  /// metadata.resourceVersion inside is a precondition (409 on change).
  virtual Task<kube::ApiResult<Object>> patch_volume(std::string name, std::string merge_patch) = 0;
  /// Merge patch of nodes/{name}; same precondition rule.
  virtual Task<kube::ApiResult<Object>> patch_node(std::string name, std::string merge_patch) = 0;
  /// JSON Patch (RFC 6902) of nodes/{name}: a failed `test` op answers 422 Invalid and changes nothing.
  virtual Task<kube::ApiResult<Object>> json_patch_node(std::string name, std::string json_patch) = 0;
  virtual Task<kube::ApiResult<Object>> get_pod(std::string ns, std::string name) = 0;
  virtual Task<kube::ApiResult<Object>> get_node(std::string name) = 0;
  /// pods/binding with the pod's UID as a precondition, carrying `metadata` (annotations, labels) onto the pod in
  /// the same write (201 ok; 409 already bound or another pod of that name; 404 gone).
  virtual Task<kube::ApiStatus> bind(std::string ns, std::string name, std::string node, std::string uid,
                                     kube::BindingMetadata metadata) = 0;
  /// Strategic-merge patch of pods/{name}/status with one condition.
  virtual Task<kube::ApiResult<Object>> patch_condition(std::string ns, std::string name,
                                                        kube::PodCondition condition) = 0;
  virtual Task<kube::ApiResult<Object>> create_event(kube::EventRecord event) = 0;
  /// Merge patch of events.k8s.io/v1 events/{name} (an Event series' count and lastObservedTime).
  virtual Task<kube::ApiResult<Object>> patch_event(std::string ns, std::string name, std::string merge_patch) = 0;
  /// Merge patch of pods/{name}/status (preemption's status.nominatedNodeName).
  virtual Task<kube::ApiResult<Object>> patch_pod_status(std::string ns, std::string name, std::string merge_patch) = 0;
  /// Graceful DELETE of pods/{name} (the pod's own terminationGracePeriodSeconds) with the UID as a precondition:
  /// 409 when the name now belongs to another pod, 404 when gone.
  virtual Task<kube::ApiStatus> remove_pod(std::string ns, std::string name, std::string uid) = 0;
};

/// The real seam over a kube::Client (which must live on the same executor as the loop).
std::shared_ptr<LoopApi> make_client_api(std::shared_ptr<kube::Client> client);

}  // namespace gpuslice::scheduler
