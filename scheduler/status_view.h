#pragma once
// The status view model: what the status page (`gpuslice serve`, health port), its JSON and `gpuslice top` show,
// computed by one pure function over the scheduler's Snapshot and the pending pods. No I/O, no clock (the time
// enters as a parameter), no locking: the loop builds it on its own executor (SchedulingLoop::status_view), `top`
// (top/top.h) builds it from a listed cluster, the unit tests call it directly.
//
//   StatusView v = build_view(snapshot, pending, state);      // O(nodes x cards + pods)
//   std::string body = render_json(v, parse_page_query("offset=0&limit=50&sort=used").value());
//   std::string text = render_hami_metrics(v);                // HAMi v2.10's scheduler series (metrics.go)
//
// Stranded capacity of a card (what the page and gpuslice_scheduler_card_stranded_* report): free memory on a
// card that can take no new container because its cores or its time-slicing slots are gone, and free cores on a
// card whose memory or slots are gone. Unhealthy and cordoned cards strand nothing: they are unavailable, and
// counted as such.

#include "common/config.h"
#include "common/gpu_request.h"
#include "common/pages.h"
#include "common/result.h"
#include "scheduler/snapshot.h"

#include <boost/json/object.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuslice::scheduler::status {

/// One container's slice of a card.
struct Holder {
  std::string ns;
  std::string pod;
  std::string container;       ///< container name; "#<slot>" when the pod's spec was not recorded
  size_t container_index = 0;  ///< HAMi's container_index: position in the allocation (init first)
  int64_t mem_mib = 0;
  int64_t cores = 0;     ///< percent of the card
  bool assumed = false;  ///< decided, not yet confirmed by the API
};

struct CardView {
  std::string uuid;
  int32_t index = 0;
  std::string type;
  std::string mode;
  bool health = true;
  bool cordoned = false;
  int64_t mem_total_mib = 0;
  int64_t mem_used_mib = 0;
  int64_t cores_total = 0;
  int64_t cores_used = 0;
  int64_t slots_total = 0;
  int64_t slots_used = 0;
  int64_t stranded_mem_mib = 0;
  int64_t stranded_cores = 0;
  std::vector<Holder> holders;  ///< sorted by namespace, pod, container index
};

struct NodeView {
  std::string name;
  bool registered = false;
  bool unschedulable = false;
  std::string register_error;
  std::vector<CardView> cards;  ///< registration order; only cards HAMi's Fit sees (type contains "nvidia")
  int64_t mem_total_mib = 0, mem_used_mib = 0, cores_total = 0, cores_used = 0;
  int64_t stranded_mem_mib = 0, stranded_cores = 0;
};

/// One container's GPU ask, as the scheduler reads it.
struct Ask {
  std::string container;
  int64_t gpus = 0;
  std::optional<int64_t> mem_mib;
  std::optional<int64_t> mem_percent;
  int64_t cores = 0;
};

/// A pending GPU pod as the caller knows it: its request and the last unschedulable message (kube-scheduler's
/// "0/N nodes are available: ..." or an error), empty when it has not been tried yet.
struct PendingInput {
  std::string ns;
  std::string name;
  PodGpuRequest gpu;
  std::string message;
  int64_t since_unix = 0;  ///< creation (or first seen); 0 unknown
};

struct ReasonCount {
  std::string reason;
  size_t nodes = 0;
  std::string detail;  ///< the figures after the reason: "asks 30% of a card's cores, largest free 10%"
  bool operator==(const ReasonCount&) const = default;
};

struct PendingView {
  std::string ns;
  std::string name;
  std::vector<Ask> asks;  ///< containers with gpus > 0
  std::string message;
  std::vector<ReasonCount> reasons;  ///< parsed from the message, in its order; empty when not tried
  std::string reason;                ///< the first reason, "Waiting" when not tried yet
  int64_t age_seconds = -1;          ///< -1 unknown
};

struct SchedulerState {
  bool scheduler_enabled = true;
  bool synced = false;
  bool leading = false;
  bool leader_election = false;
  std::string identity;
  std::string source;  ///< "gpuslice serve" or "api" (gpuslice top)
  size_t queue_active = 0, queue_backoff = 0, queue_in_flight = 0, binds_in_flight = 0;
  int64_t now_unix = 0;
};

/// Totals per card type (the aggregation the page shows at any scale).
struct TypeTotals {
  std::string type;
  size_t cards = 0;
  int64_t mem_total_mib = 0, mem_used_mib = 0, cores_total = 0, cores_used = 0;
  int64_t stranded_mem_mib = 0, stranded_cores = 0;
};

struct Summary {
  size_t nodes = 0, nodes_registered = 0, cards = 0, cards_unavailable = 0, cards_full = 0;
  int64_t mem_total_mib = 0, mem_used_mib = 0, cores_total = 0, cores_used = 0, slots_total = 0, slots_used = 0;
  int64_t stranded_mem_mib = 0, stranded_cores = 0;
  size_t cards_stranded = 0;
  size_t pods_holding = 0;  ///< pods holding at least one card slice
  size_t pending = 0;
  /// Largest free memory and cores on any card that can take a new container (what a pending pod could get).
  int64_t best_free_mem_mib = 0, best_free_cores = 0;
  std::vector<TypeTotals> by_type;           ///< type order
  std::vector<ReasonCount> pending_reasons;  ///< pods per first reason, most first
};

struct StatusView {
  SchedulerState state;
  Summary summary;
  std::vector<NodeView> nodes;       ///< name order
  std::vector<PendingView> pending;  ///< oldest first, then namespace/name
};

/// Card stranding (see the header comment). Pure helpers, exposed for tests.
int64_t stranded_memory(const CardView& card);
int64_t stranded_cores(const CardView& card);

/// Parses kube-scheduler's FitError message: "0/3 nodes are available: 1 CardInsufficientCore (asks 30% of a card's
/// cores, largest free 10%), 2 node(s) were unschedulable." -> {{CardInsufficientCore,1,"asks 30% ..."},
/// {node(s) were unschedulable,2,""}}. Other texts give {}.
std::vector<ReasonCount> parse_fit_message(std::string_view message);

StatusView build_view(const Snapshot& snapshot, const std::vector<PendingInput>& pending, const SchedulerState& state);

enum class NodeSort { name, used, stranded, free };

/// The page of the view a request asks for: `offset`, `limit` (1..1000, default 50), `sort`
/// (name|used|stranded|free), `q` (node name or card type/UUID substring, case-insensitive), `pending_limit`
/// (0..1000, default 100). Unknown parameters are ignored; bad values are errors naming the parameter and value.
struct PageQuery {
  size_t offset = 0;
  size_t limit = 50;
  NodeSort sort = NodeSort::name;
  std::string filter;
  size_t pending_offset = 0;
  size_t pending_limit = 100;
};
Result<PageQuery> parse_page_query(std::string_view query);

/// Indices into view.nodes matching the query's filter, in the query's sort order.
std::vector<size_t> select_nodes(const StatusView& view, const PageQuery& query);

/// The JSON document of /status.json: {"state", "summary", "nodes": {"total","offset","limit","items"},
/// "pending": {"total","offset","limit","items"}}. Field names are camelCase, memory in MiB.
std::string render_json(const StatusView& view, const PageQuery& query);

/// HAMi v2.10's scheduler series (cmd/scheduler/metrics.go, label zone="vGPU" as its registerer adds):
/// hami_gpu_memory_limit_bytes, hami_gpu_core_limit_ratio, hami_gpu_memory_allocated_bytes,
/// hami_gpu_shared_count, hami_gpu_core_allocated_ratio, hami_node_gpu_overview,
/// hami_node_gpu_memory_allocated_ratio, hami_vgpu_memory_allocated_bytes, hami_vgpu_core_allocated_ratio;
/// with `legacy`, also the pre-2.8 names HAMi exports behind its legacy flag (GPUDeviceMemoryAllocated,
/// vGPUMemoryAllocated, ...), which older dashboards query. Plus gpuslice's stranded-capacity gauges and
/// histograms (gpuslice_scheduler_card_stranded_*). Prometheus text format 0.0.4.
std::string render_hami_metrics(const StatusView& view, bool legacy = true);

/// The status page (scheduler/status_page.html, compiled in): one self-contained HTML document, no external
/// asset, that renders `initial_json` (a render_json document) at once and then polls `status.json` (relative to
/// its own URL) every 2 s. `initial_json` is embedded with every '<' escaped, so no text of the cluster can end
/// the script element.
std::string render_page(std::string_view initial_json);
/// The health port's answers (common/pages.h): `json` true for /status.json (render_json), else the page
/// (render_page over the first JSON). A bad query is a 400 naming the parameter; a null `view` (the loop gave none)
/// is a 503 carrying `why`. Bodies are bounded by the query's limits (at most 1000 nodes and 1000 pending pods).
Page status_response(bool json, std::string_view query, const StatusView* view, std::string_view why);
/// The asset as compiled in, with its placeholder.
std::string_view page_asset();

}  // namespace gpuslice::scheduler::status
