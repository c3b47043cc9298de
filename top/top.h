#pragma once
// `gpuslice top`'s pure half: the status view (scheduler/status_view.h) from listed Node and Pod objects alone, and
// its terminal tables. cmd/top.cc does the listing (kube/), the clock and the printing; tests call these directly.
//
//   auto view = top::build_view_from_objects(nodes, pods, config.devices, "gpuslice-scheduler", now_unix);
//   std::string text = top::render_top(view, top::TopView::all, /*wide=*/false, status::NodeSort::used);

#include "common/config.h"
#include "common/result.h"
#include "scheduler/status_view.h"

#include <boost/json/object.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gpuslice::top {

namespace status = scheduler::status;

/// The view from listed Node and Pod objects alone (no access to gpuslice): every node into a snapshot, every
/// pod that holds a slice (hami.io/vgpu-node + -allocated, not finished) counted, and as pending every unbound,
/// not deleting pod of `scheduler_name` asking for a GPU and holding no slice, with its PodScheduled=False
/// message. Bad annotations are counted as the loop counts them and reported in `warnings`.
status::StatusView build_view_from_objects(const std::vector<boost::json::object>& nodes,
                                           const std::vector<boost::json::object>& pods, const DeviceConfig& devices,
                                           std::string_view scheduler_name, int64_t now_unix,
                                           std::vector<std::string>* warnings = nullptr);

enum class TopView { all, nodes, cards, pods, pending };
/// "all" | "nodes" | "cards" | "pods" | "pending" (also singular forms); error names the value.
Result<TopView> parse_top_view(std::string_view text);
/// "name" | "used" | "free" | "stranded"; the error names the flag and the value.
Result<status::NodeSort> parse_sort(std::string_view text);

/// The terminal tables: NODES (one row per node), CARDS (one row per card with a memory bar), PODS (one row per
/// container slice), PENDING (reason and asks); `wide` adds UUIDs, slots, modes and the scheduler's message.
/// Nodes and cards in `sort` order; pods by namespace/pod/container; pending oldest first.
std::string render_top(const status::StatusView& view, TopView what, bool wide, status::NodeSort sort);

}  // namespace gpuslice::top
