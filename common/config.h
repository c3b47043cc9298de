#pragma once
// gpuslice's configuration as plain data, with HAMi's defaults. Loaded from a component-config style YAML
// file (apiVersion gpuslice.io/v1alpha1, kind GpusliceConfiguration); command-line flags override it.
// The pure cores (mutation policy, fit/score) take the sub-structs they need by const reference.

#include "common/result.h"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuslice {

inline constexpr std::string_view kConfigApiVersion = "gpuslice.io/v1alpha1";
inline constexpr std::string_view kConfigKind = "GpusliceConfiguration";

/// HAMi's NVIDIA device config (device-config.yaml `nvidia:`): resource names and request defaults.
struct DeviceConfig {
  std::string gpu_resource = "nvidia.com/gpu";
  std::string memory_resource = "nvidia.com/gpumem";
  std::string memory_percentage_resource = "nvidia.com/gpumem-percentage";
  std::string cores_resource = "nvidia.com/gpucores";
  std::string priority_resource = "nvidia.com/priority";
  int64_t default_memory_mib = 0;  ///< 0: the whole card
  int64_t default_cores = 0;
  int64_t default_gpu_num = 1;
  int64_t memory_factor = 1;
};

struct WebhookConfig {
  bool enabled = true;
  std::string bind_address = "0.0.0.0:9443";
  std::string tls_cert_file;
  std::string tls_private_key_file;
  uint64_t max_body_bytes = 4 * 1024 * 1024;
  uint32_t max_header_bytes = 16 * 1024;
  std::chrono::milliseconds read_timeout{10000};  ///< a whole request must arrive within this
  std::chrono::milliseconds idle_timeout{90000};  ///< keep-alive connection with no request
  /// The TLS handshake must end within this after accept; unset: read_timeout (the behaviour before the key).
  std::optional<std::chrono::milliseconds> handshake_timeout;
  /// One whole response must be written within this; unset: read_timeout.
  std::optional<std::chrono::milliseconds> write_timeout;
  /// Accept to the first byte of the TLS ClientHello (bounded by the handshake deadline too).
  std::chrono::milliseconds client_hello_timeout{3000};
  /// Connections per listener (the TLS one, the health one); at the cap an older connection makes room.
  uint32_t max_connections = 4096;
  /// Connections from one address that have not finished their TLS handshake, per listener.
  uint32_t max_pending_per_source = 1024;
  int threads = 2;
  /// Pods with these schedulerNames (or none) are taken over (HAMi's force-overwrite-default-scheduler).
  std::vector<std::string> takeover_scheduler_names = {"default-scheduler"};
  std::vector<std::string> ignored_namespaces;
  std::string runtime_class_name;           ///< set on GPU pods that have none, when non-empty
  std::string gpu_core_policy = "default";  ///< default | force | disable (GPU_CORE_UTILIZATION_POLICY)
  /// HAMi's device-config `overwriteEnv`: every container the webhook sees that asks for no GPU gets
  /// NVIDIA_VISIBLE_DEVICES=none, so a node whose default runtime is nvidia's does not hand it every card.
  bool overwrite_env = false;
};

struct LeaderElectionConfig {
  bool enabled = true;
  std::string lease_name = "gpuslice-scheduler";
  std::string lease_namespace;  ///< empty: see effective_lease_namespace()
  std::chrono::milliseconds lease_duration{15000};
  std::chrono::milliseconds renew_deadline{10000};
  std::chrono::milliseconds retry_period{2000};
};

/// Priority preemption of this scheduler profile (scheduler/preemption.h): kube-scheduler's DefaultPreemption.
struct PreemptionConfig {
  bool enabled = true;     ///< false: a pod that fits nowhere stays Pending, as with DefaultPreemption disabled
  int max_in_flight = 16;  ///< nominations whose victims are still going away; more preemptors wait
};

/// Score weights of the scheduling profile (`scheduler.scoreWeights`: plugin name -> weight, 0..100; 0 turns that
/// plugin's score off, its filter stays). Defaults: kube-scheduler's default profile
/// (pkg/scheduler/apis/config/v1/default_plugins.go). How they combine with the GPU node policy: docs/scheduling.md.
struct ScoreWeights {
  int64_t taint_toleration = 3;
  int64_t node_affinity = 2;
  int64_t pod_topology_spread = 2;
  int64_t inter_pod_affinity = 2;
  int64_t node_resources_fit = 1;                  ///< NodeResourcesFit's LeastAllocated score (cpu, memory)
  int64_t node_resources_balanced_allocation = 1;  ///< NodeResourcesBalancedAllocation (cpu, memory)
  bool operator==(const ScoreWeights&) const = default;
};

struct SchedulerConfig {
  bool enabled = true;
  std::string node_scheduler_policy = "binpack";  ///< binpack | spread
  std::string gpu_scheduler_policy = "spread";    ///< spread | binpack
  std::string node_lock = "hami";                 ///< hami | off
  std::chrono::milliseconds node_lock_timeout{300000};
  /// With nodeLock hami: how many feasible nodes, in the policy's order, a GPU pod may look past a busy first choice
  /// (a node whose lock a bind of ours holds or waits for). docs/scheduling.md, "Lock-aware choice".
  int node_lock_lookahead = 64;
  std::string node_label_selector;
  double kube_qps = 50;
  int kube_burst = 100;
  std::chrono::milliseconds kube_timeout{10000};
  std::chrono::milliseconds max_backoff{10000};
  LeaderElectionConfig leader_election;
  PreemptionConfig preemption;
  ScoreWeights score_weights;
  /// PodTopologySpread's system default constraints for a pod without constraints of its own (kube-scheduler's
  /// `defaultingType: System`); false: none (`defaultingType: List` with no defaultConstraints).
  bool default_spreading = true;
  /// Also export HAMi's pre-2.8 metric names (GPUDeviceMemoryAllocated, vGPUMemoryAllocated, ...) beside its v2.10
  /// ones, as HAMi's scheduler does with its LegacyMetrics setting; false saves 44 % of the status series' text.
  bool hami_legacy_metrics = true;
};

struct ServerConfig {
  std::string metrics_bind_address;  ///< empty: /metrics and probes are served on the webhook listener only
  std::string health_bind_address = "0.0.0.0:8080";  ///< plain HTTP probes and /metrics; empty disables
};

struct Configuration {
  std::string scheduler_name = "gpuslice-scheduler";
  DeviceConfig devices;
  WebhookConfig webhook;
  SchedulerConfig scheduler;
  ServerConfig server;
  std::string kubeconfig;
  std::string logging_format = "text";
  int verbosity = 0;
};

/// The namespace of gpuslice's own objects when nothing names one: the manifests' (manifests/base) and the
/// chart's default, where their RBAC grants the Lease.
inline constexpr std::string_view kDefaultNamespace = "gpuslice-system";

/// Where the scheduler's Lease lives, ONE rule for `serve` (which writes it) and `doctor` (which reads it):
/// leaderElection.resourceNamespace when set, else the namespace gpuslice runs in (`running_namespace`: the
/// ServiceAccount's namespace in-cluster, the ConfigMap's for doctor; empty out of cluster), else
/// kDefaultNamespace.
std::string effective_lease_namespace(const LeaderElectionConfig& leader_election, std::string_view running_namespace);

/// Parses a configuration document. Unknown fields and bad values are errors naming the field path and
/// the value, e.g. `scheduler.nodeLockTimeout: "5x" is not a duration`.
Result<Configuration> parse_configuration(std::string_view yaml_text);
/// Reads and parses a file; errors are prefixed with the path.
Result<Configuration> load_configuration_file(const std::string& path);
/// Checks cross-field constraints (also after flags have been applied).
Status validate_configuration(const Configuration& config);

/// Go-style durations: "300ms", "15s", "5m", "1h30m", "1.5s". Negative values are rejected.
Result<std::chrono::milliseconds> parse_duration(std::string_view text);
std::string format_duration(std::chrono::milliseconds d);

}  // namespace gpuslice
