#pragma once
// `gpuslice simulate`: Node, ResourceQuota and Pod manifests through the webhook policy and the scheduler, in
// file order, on an in-memory snapshot. Pure: the caller reads the files; time is a parameter.

#include "common/config.h"
#include "common/result.h"
#include "scheduler/snapshot.h"
#include "simulate/manifest.h"

#include <boost/json/object.hpp>

#include <optional>
#include <string>
#include <vector>

namespace gpuslice::simulate {

struct SimulatedDevice {
  std::string container;
  std::string uuid;
  std::string type;  ///< the card model from the node's registration
  int64_t mem_mib = 0;
  int64_t cores = 0;
};

/// What a Pending pod would preempt (scheduler/preemption.h) with scheduler.preemption enabled. Nothing is
/// evicted in the simulation: the pod stays Pending and the later pods see the cluster as it is.
struct SimulatedPreemption {
  std::string node;
  std::vector<std::string> victims;  ///< "ns/name", most important first
  size_t budget_violations = 0;
  std::vector<SimulatedDevice> devices;  ///< where the pod would go once they are gone
};

/// An unbound WaitForFirstConsumer claim of a scheduled pod: the existing PV the live loop would bind it to (its
/// claimRef written), or none when it would be provisioned on the node (selected-node written).
struct SimulatedVolume {
  std::string claim;   ///< in the pod's namespace
  std::string volume;  ///< "" for dynamic provisioning
};

struct SimulatedPod {
  std::string ns;
  std::string name;
  std::string status;  ///< Scheduled | Pending | Rejected
  std::optional<std::string> node;
  std::vector<SimulatedDevice> devices;
  std::vector<SimulatedVolume> volumes;  ///< Scheduled only: static bindings first, then provisioned claims
  std::string message;
  std::optional<SimulatedPreemption> preemption;  ///< Pending only: the victims that would make room
};

struct SimulatedCard {
  std::string node;
  std::string uuid;
  std::string type;
  int64_t mem_used_mib = 0;
  int64_t mem_total_mib = 0;
  int64_t cores_used = 0;
  int64_t cores_total = 0;
  std::vector<std::string> pods;  ///< "ns/name", in placement order
};

struct SimulationResult {
  std::vector<SimulatedPod> pods;
  std::vector<SimulatedCard> cards;  ///< node name order, then registration order
};

struct SimulationInput {
  std::vector<std::pair<std::string, std::vector<Manifest>>> node_files;  ///< (file name, objects)
  std::vector<std::pair<std::string, std::vector<Manifest>>> pod_files;
};

/// Nodes, ResourceQuotas and already placed Pods (spec.nodeName or hami.io/vgpu-node set) from every file first, as
/// cluster state; then every other Pod, node files before pod files, in file order:
/// webhook policy (rejected -> Rejected with its message), patch applied, parse_pod, schedule (Pending with the
/// message, and what it would preempt), assume. PodDisruptionBudgets count for preemption. Errors name the file,
/// document index and field (e.g. a bad register annotation).
Result<SimulationResult> simulate(const SimulationInput& input, const Configuration& config, int64_t now_unix);

/// The `-o json` document: {"pods":[...],"cards":[...]} as the issue specifies.
boost::json::object simulation_to_json(const SimulationResult& result);
/// The human table (pods, then one row per card).
std::string simulation_to_table(const SimulationResult& result);

}  // namespace gpuslice::simulate
