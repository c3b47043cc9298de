// The loop's watches of the cluster objects kube-scheduler's default plugins read besides Pods and Nodes
// (Namespaces' labels, PersistentVolumeClaims, PersistentVolumes, StorageClasses, CSINodes; and the
// PodDisruptionBudgets preemption respects, scheduler/preemption.h; the Services, ReplicationControllers,
// ReplicaSets and StatefulSets whose selectors default spreading reads): each event goes to
// the snapshot's ClusterObjects store (scheduler/framework/cluster_objects.h, which keeps only the fields a plugin
// reads), and every pending pod is re-queued, as kube-scheduler's queue moves pods on these events (a claim
// binding, a PV appearing, a namespace relabelled can each make a refused pod schedulable). The default-spreading
// kinds only change scores, never a filter, so they re-queue nothing (kube-scheduler's PodTopologySpread registers
// no event for them), which also keeps a ReplicaSet's status updates from moving the whole queue.

#include "common/log.h"
#include "kube/objects.h"
#include "scheduler/loop.h"

namespace gpuslice::scheduler {

std::string_view cluster_object_kind_name(ClusterObjectKind kind) {
  switch (kind) {
    case ClusterObjectKind::namespace_labels:
      return "namespace";
    case ClusterObjectKind::claim:
      return "persistentvolumeclaim";
    case ClusterObjectKind::volume:
      return "persistentvolume";
    case ClusterObjectKind::storage_class:
      return "storageclass";
    case ClusterObjectKind::csi_node:
      return "csinode";
    case ClusterObjectKind::disruption_budget:
      return "poddisruptionbudget";
    case ClusterObjectKind::service:
      return "service";
    case ClusterObjectKind::replication_controller:
      return "replicationcontroller";
    case ClusterObjectKind::replica_set:
      return "replicaset";
    case ClusterObjectKind::stateful_set:
      return "statefulset";
  }
  return "object";
}

namespace {

bool spread_source(ClusterObjectKind kind) {
  return kind == ClusterObjectKind::service || kind == ClusterObjectKind::replication_controller ||
         kind == ClusterObjectKind::replica_set || kind == ClusterObjectKind::stateful_set;
}

std::string object_key(ClusterObjectKind kind, const boost::json::object& o) {
  const bool namespaced =
      kind == ClusterObjectKind::claim || kind == ClusterObjectKind::disruption_budget || spread_source(kind);
  return namespaced ? kube::namespace_of(o) + "/" + kube::name_of(o) : kube::name_of(o);
}

Status upsert_object(ClusterObjects& objs, ClusterObjectKind kind, const boost::json::object& o) {
  switch (kind) {
    case ClusterObjectKind::namespace_labels:
      return objs.upsert_namespace(o);
    case ClusterObjectKind::claim:
      return objs.upsert_claim(o);
    case ClusterObjectKind::volume:
      return objs.upsert_volume(o);
    case ClusterObjectKind::storage_class:
      return objs.upsert_storage_class(o);
    case ClusterObjectKind::csi_node:
      return objs.upsert_csi_node(o);
    case ClusterObjectKind::disruption_budget:
      return objs.upsert_disruption_budget(o);
    case ClusterObjectKind::service:
      return objs.spread_sources().upsert_service(o);
    case ClusterObjectKind::replication_controller:
      return objs.spread_sources().upsert_replication_controller(o);
    case ClusterObjectKind::replica_set:
      return objs.spread_sources().upsert_replica_set(o);
    case ClusterObjectKind::stateful_set:
      return objs.spread_sources().upsert_stateful_set(o);
  }
  return Status::Ok();
}

void remove_object(ClusterObjects& objs, ClusterObjectKind kind, const std::string& key) {
  switch (kind) {
    case ClusterObjectKind::namespace_labels:
      objs.remove_namespace(key);
      return;
    case ClusterObjectKind::claim:
    case ClusterObjectKind::disruption_budget: {
      const size_t slash = key.find('/');
      const std::string ns = key.substr(0, slash);
      const std::string name = slash == std::string::npos ? std::string() : key.substr(slash + 1);
      if (kind == ClusterObjectKind::claim) {
        objs.remove_claim(ns, name);
      } else {
        objs.remove_disruption_budget(ns, name);
      }
      return;
    }
    case ClusterObjectKind::volume:
      objs.remove_volume(key);
      return;
    case ClusterObjectKind::storage_class:
      objs.remove_storage_class(key);
      return;
    case ClusterObjectKind::csi_node:
      objs.remove_csi_node(key);
      return;
    case ClusterObjectKind::service:
    case ClusterObjectKind::replication_controller:
    case ClusterObjectKind::replica_set:
    case ClusterObjectKind::stateful_set: {
      const size_t slash = key.find('/');
      const std::string ns = key.substr(0, slash);
      const std::string name = slash == std::string::npos ? std::string() : key.substr(slash + 1);
      SpreadSources& src = objs.spread_sources();
      if (kind == ClusterObjectKind::service) {
        src.remove_service(ns, name);
      } else if (kind == ClusterObjectKind::replication_controller) {
        src.remove_replication_controller(ns, name);
      } else if (kind == ClusterObjectKind::replica_set) {
        src.remove_replica_set(ns, name);
      } else {
        src.remove_stateful_set(ns, name);
      }
      return;
    }
  }
}

}  // namespace

void SchedulingLoop::on_cluster_object_event(ClusterObjectKind kind, const kube::ReflectorEvent& event) {
  ClusterObjects& objs = snapshot_.objects();
  kube::KeyedSet<std::string>& keys = object_keys_[static_cast<size_t>(kind)];
  std::set<std::string>& known = keys.known;
  auto key_of = [kind](const boost::json::object& o) { return object_key(kind, o); };
  auto upsert = [&](const boost::json::object& o) {
    const std::string key = object_key(kind, o);
    known.insert(key);
    if (auto st = upsert_object(objs, kind, o); !st) {
      // The store dropped it (a plugin never reads a half-parsed object): pods using it stay Pending with
      // "not found"-style messages rather than being placed on a guess.
      log::warning("cluster object ignored",
                   {{"kind", std::string(cluster_object_kind_name(kind))}, {"name", key}, {"error", st.message()}});
    }
  };
  auto remove = [&](const std::string& key) { remove_object(objs, kind, key); };
  if (kube::apply_keyed(event, keys, key_of, upsert, remove) && !spread_source(kind)) {
    queue_.move_all_to_active(options_.clock.steady());
    wake();
  }
}

}  // namespace gpuslice::scheduler
