#pragma once
// The scheduling loop's Prometheus metrics (gpuslice_scheduler_*): attempts, end-to-end and decision latency, queue and
// in-flight gauges, node-lock operations, dropped side effects, priority preemption (attempts, victims per
// preemption, nominations in flight: kube-scheduler's scheduler_preemption_* of pkg/scheduler/metrics/metrics.go),
// and per-card allocation gauges.

#include "common/metrics.h"

#include <mutex>
#include <string>
#include <vector>

namespace gpuslice::scheduler {

/// One card's gauges. The node name and the card type are interned (metrics::LabelInterner): a node's cards share
/// its name, a fleet's cards their few types, by pointer; the UUID is the card's own.
struct CardRow {
  metrics::LabelInterner::Value node;
  std::string uuid;
  metrics::LabelInterner::Value type;
  double mem_used_bytes, mem_total_bytes, cores_used_ratio, slots_used, slots_total;
};

struct LoopMetrics {
  metrics::Family<metrics::Counter>& attempts;
  metrics::HistogramFamily& e2e;
  metrics::HistogramFamily& algorithm;  ///< one schedule() decision over the snapshot, by result
  metrics::Family<metrics::Gauge>& pending;
  metrics::Family<metrics::Gauge>& binds_in_flight;
  metrics::Family<metrics::Counter>& lock_ops;
  metrics::Family<metrics::Counter>& events_dropped;
  metrics::Family<metrics::Counter>& preemption_attempts;   ///< every PostFilter run (scheduler/loop_preemption.cc)
  metrics::HistogramFamily& preemption_victims;             ///< pods chosen per preemption that nominates
  metrics::Family<metrics::Gauge>& preemptions_in_flight;   ///< nominations waiting for their victims
  metrics::Family<metrics::Gauge>& side_effects_in_flight;  ///< Events and condition patches being written
  metrics::Family<metrics::Gauge>& side_effects_queued;     ///< Events waiting for a slot
  std::mutex cards_mutex;
  std::vector<CardRow> cards;

  /// The process-wide families, registered once (the registry does not deduplicate families); the card
  /// gauges are served by a collector from `cards` (update_gauges() replaces them).
  static LoopMetrics& get();
};

}  // namespace gpuslice::scheduler
