#pragma once
// What kube-scheduler's default spreading reads (kubernetes/kubernetes pkg/scheduler/framework/plugins/helper/
// spread.go, DefaultSelector and GetPodServices): the selectors of Services, ReplicationControllers, ReplicaSets and
// StatefulSets, keyed "namespace/name". Nothing else of those objects is kept (a ReplicaSet is its key and its
// selector), so the thousands of old ReplicaSets Deployments leave behind cost little. Pure: the loop feeds it from
// watches, `gpuslice simulate` from manifests.

#include "common/result.h"
#include "scheduler/framework/pod_facts.h"

#include <boost/json/object.hpp>

#include <map>
#include <string>
#include <string_view>

namespace gpuslice::scheduler {

class SpreadSources {
 public:
  // Each upsert replaces the object of that key; a malformed selector is an error naming the object, field and
  // value, and the object is then not stored (a previous version of it is dropped).
  Status upsert_service(const boost::json::object& svc);
  bool remove_service(std::string_view ns, std::string_view name);
  Status upsert_replication_controller(const boost::json::object& rc);
  bool remove_replication_controller(std::string_view ns, std::string_view name);
  Status upsert_replica_set(const boost::json::object& rs);
  bool remove_replica_set(std::string_view ns, std::string_view name);
  Status upsert_stateful_set(const boost::json::object& ss);
  bool remove_stateful_set(std::string_view ns, std::string_view name);

  /// DefaultSelector for a pod of namespace `ns`: the matchLabels of every Service of the namespace whose
  /// spec.selector matches the pod's labels, merged; with the pod's controller (the ownerReference with
  /// controller: true) a ReplicationController's spec.selector merged too, or a ReplicaSet's / StatefulSet's
  /// spec.selector requirements added. An empty result (no requirement) means no default spreading for the pod.
  LabelSelector default_selector(std::string_view ns, const PodFacts& pod) const;

  size_t size() const {
    return services_.size() + replication_controllers_.size() + replica_sets_.size() + stateful_sets_.size();
  }

 private:
  // Only objects whose selector can contribute a requirement are stored: a Service without spec.selector matches
  // no pod, one with `{}` adds nothing; a ReplicaSet with a nil or empty selector adds nothing.
  std::map<std::string, Labels, std::less<>> services_;                 ///< "ns/name" -> spec.selector
  std::map<std::string, Labels, std::less<>> replication_controllers_;  ///< "ns/name" -> spec.selector
  std::map<std::string, LabelSelector, std::less<>> replica_sets_;      ///< "ns/name" -> spec.selector
  std::map<std::string, LabelSelector, std::less<>> stateful_sets_;     ///< "ns/name" -> spec.selector
};

}  // namespace gpuslice::scheduler
