#include "scheduler/loop_metrics.h"

namespace gpuslice::scheduler {

LoopMetrics& LoopMetrics::get() {
  static LoopMetrics* m = [] {
    auto& r = metrics::default_registry();
    auto* out = new LoopMetrics{
        r.counter("gpuslice_scheduler_schedule_attempts_total",
                  "Scheduling attempts by result (scheduled, unschedulable, error).", {"result"}),
        r.histogram("gpuslice_scheduler_e2e_scheduling_duration_seconds",
                    "From first seeing a pending pod to its successful binding.", {},
                    metrics::exponential_buckets(0.001, 2, 18)),
        r.histogram("gpuslice_scheduler_scheduling_algorithm_duration_seconds",
                    "One scheduling decision (filter and score over the snapshot) by result, as kube-scheduler's "
                    "scheduler_scheduling_algorithm_duration_seconds.",
                    {"result"}, metrics::exponential_buckets(0.00001, 2, 20)),
        r.gauge("gpuslice_scheduler_pending_pods", "Pods in the scheduling queue by state.", {"queue"}),
        r.gauge("gpuslice_scheduler_binds_in_flight", "Decisions being written and bound.", {}),
        r.counter("gpuslice_scheduler_node_lock_operations_total",
                  "hami.io/mutex.lock operations by the scheduler (taken, conflict: a take found the lock changed and "
                  "re-read the node, released_bind_failed, released_expired, released_owner_gone).",
                  {"operation"}),
        r.counter("gpuslice_scheduler_side_effects_dropped_total",
                  "Events dropped because their queue was full (32 being written and 1000 "
                  "waiting, client-go's maxQueuedEvents); PodScheduled conditions are never dropped.",
                  {}),
        // kube-scheduler's scheduler_preemption_attempts_total and scheduler_preemption_victims (same meaning and
        // buckets, pkg/scheduler/metrics/metrics.go; counted where DefaultPreemption's PostFilter and
        // prepareCandidate count them), and a gauge of what scheduler.preemption.maxInFlight caps.
        r.counter("gpuslice_scheduler_preemption_attempts_total",
                  "Preemption attempts: pods that fit nowhere and went through preemption (eligible or not, waiting "
                  "for victims included), as kube-scheduler's scheduler_preemption_attempts_total.",
                  {}),
        r.histogram("gpuslice_scheduler_preemption_victims",
                    "Pods chosen as victims by each preemption that nominated its pod, as kube-scheduler's "
                    "scheduler_preemption_victims.",
                    {}, metrics::exponential_buckets(1, 2, 7)),
        r.gauge("gpuslice_scheduler_preemptions_in_flight",
                "Preemptors nominated to a node and waiting for their victims to terminate (at most "
                "scheduler.preemption.maxInFlight).",
                {}),
        // With binds_in_flight, the loop's outstanding API operations (each one a coroutine and its timeout
        // timer): what a soak watches for a leak (bench/soak_bench.sh).
        r.gauge("gpuslice_scheduler_side_effects_in_flight",
                "Events and PodScheduled condition patches being written (at most 32).", {}),
        r.gauge("gpuslice_scheduler_side_effects_queued",
                "Events waiting for a free slot to be written (at most 1000; beyond that they are dropped).", {}),
        {},
        {}};
    // Unlabelled series are on /metrics from the start (0, an empty histogram): a restarted scheduler that
    // preempts nothing shows it rather than showing nothing.
    (void)out->preemption_attempts.with({});
    (void)out->preemption_victims.with({});
    (void)out->preemptions_in_flight.with({});
    (void)out->side_effects_in_flight.with({});
    (void)out->side_effects_queued.with({});
    r.add_collector([out](std::string& text) {
      // Copy the rows under the lock and format outside it: a scrape of a large fleet never holds the mutex the
      // loop's update_gauges() takes while it writes 5 lines per card. The copies share the interned node names
      // and types (a reference count each), so the copy is the rows and their UUIDs only.
      std::vector<CardRow> cards;
      {
        std::lock_guard lock(out->cards_mutex);
        cards = out->cards;
      }
      if (cards.empty()) {
        return;
      }
      std::vector<std::string> labels;  // {node="...",device_uuid="...",device_type="..."}, escaped once per card
      labels.reserve(cards.size());
      for (const auto& c : cards) {
        labels.push_back("{node=\"" + metrics::escape_label_value(*c.node) + "\",device_uuid=\"" +
                         metrics::escape_label_value(c.uuid) + "\",device_type=\"" +
                         metrics::escape_label_value(*c.type) + "\"} ");
      }
      text.reserve(text.size() + cards.size() * 5 * (labels.front().size() + 64));
      auto family = [&](const char* name, const char* help, double CardRow::*field) {
        text += "# HELP ";
        text += name;
        text += ' ';
        text += help;
        text += "\n# TYPE ";
        text += name;
        text += " gauge\n";
        for (size_t i = 0; i < cards.size(); ++i) {
          text += name;
          text += labels[i];
          text += metrics::format_value(cards[i].*field);
          text += '\n';
        }
      };
      family("gpuslice_scheduler_card_memory_allocated_bytes", "GPU memory allocated on a card.",
             &CardRow::mem_used_bytes);
      family("gpuslice_scheduler_card_memory_bytes", "GPU memory registered for a card.", &CardRow::mem_total_bytes);
      family("gpuslice_scheduler_card_core_allocated_ratio", "Share of a card's cores allocated (0..1).",
             &CardRow::cores_used_ratio);
      family("gpuslice_scheduler_card_shared_count", "Containers sharing a card.", &CardRow::slots_used);
      family("gpuslice_scheduler_card_slots", "Time-slicing slots of a card.", &CardRow::slots_total);
    });
    return out;
  }();
  return *m;
}

}  // namespace gpuslice::scheduler
