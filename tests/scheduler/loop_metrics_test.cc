// The loop's Prometheus series for priority preemption (scheduler/loop_metrics.h) as /metrics renders them: the
// names, types and buckets of kube-scheduler's scheduler_preemption_attempts_total and scheduler_preemption_victims
// (kubernetes pkg/scheduler/metrics/metrics.go: ExponentialBuckets(1, 2, 7)) under gpuslice_scheduler_, and the
// nominations-in-flight gauge. What the loop counts into them is asserted in loop_preemption_test.cc.
#include "scheduler/loop_metrics.h"

#include <catch2/catch.hpp>

#include <sstream>
#include <string>

using namespace gpuslice;
using namespace gpuslice::scheduler;
using Catch::Matchers::Contains;

namespace {

/// The value of the sample `series` (name with its labels, as rendered) in exposition text; -1 when absent.
double sample(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() > series.size() && line.compare(0, series.size(), series) == 0 && line[series.size()] == ' ') {
      return std::stod(line.substr(series.size() + 1));
    }
  }
  return -1;
}

}  // namespace

TEST_CASE("loop metrics: the preemption series are on /metrics from the start, with kube-scheduler's names and types",
          "[loop_metrics][preemption]") {
  (void)LoopMetrics::get();
  const std::string text = metrics::default_registry().serialize();
  CHECK_THAT(text, Contains("# TYPE gpuslice_scheduler_preemption_attempts_total counter\n"));
  CHECK_THAT(text, Contains("# HELP gpuslice_scheduler_preemption_attempts_total Preemption attempts"));
  CHECK_THAT(text, Contains("as kube-scheduler's scheduler_preemption_attempts_total."));
  CHECK_THAT(text, Contains("# TYPE gpuslice_scheduler_preemption_victims histogram\n"));
  CHECK_THAT(text, Contains("as kube-scheduler's scheduler_preemption_victims."));
  CHECK_THAT(text, Contains("# TYPE gpuslice_scheduler_preemptions_in_flight gauge\n"));
  CHECK_THAT(text, Contains("scheduler.preemption.maxInFlight"));
  // Unlabelled series exist before anything is counted (a restarted scheduler shows 0, not nothing).
  CHECK(sample(text, "gpuslice_scheduler_preemption_attempts_total") >= 0);
  CHECK(sample(text, "gpuslice_scheduler_preemptions_in_flight") >= 0);
  CHECK(sample(text, "gpuslice_scheduler_preemption_victims_count") >= 0);
  // kube-scheduler's buckets: 1, 2, 4, ..., 64, then +Inf; nothing else.
  for (const char* le : {"1", "2", "4", "8", "16", "32", "64", "+Inf"}) {
    CHECK(sample(text, std::string("gpuslice_scheduler_preemption_victims_bucket{le=\"") + le + "\"}") >= 0);
  }
  CHECK(sample(text, "gpuslice_scheduler_preemption_victims_bucket{le=\"128\"}") == -1);
  CHECK(sample(text, "gpuslice_scheduler_preemption_victims_bucket{le=\"0.5\"}") == -1);
}

TEST_CASE("loop metrics: a preemption of 3 victims lands in the le=4 bucket; attempts count up, the gauge is set",
          "[loop_metrics][preemption]") {
  auto& m = LoopMetrics::get();
  const std::string before = metrics::default_registry().serialize();
  m.preemption_attempts.with({}).inc();
  m.preemption_attempts.with({}).inc();
  m.preemption_victims.with({}).observe(3);
  m.preemptions_in_flight.with({}).set(5);
  const std::string after = metrics::default_registry().serialize();
  auto delta = [&](const std::string& series) { return sample(after, series) - sample(before, series); };
  CHECK(delta("gpuslice_scheduler_preemption_attempts_total") == 2);
  CHECK(delta("gpuslice_scheduler_preemption_victims_bucket{le=\"2\"}") == 0);
  CHECK(delta("gpuslice_scheduler_preemption_victims_bucket{le=\"4\"}") == 1);
  CHECK(delta("gpuslice_scheduler_preemption_victims_bucket{le=\"64\"}") == 1);
  CHECK(delta("gpuslice_scheduler_preemption_victims_bucket{le=\"+Inf\"}") == 1);
  CHECK(delta("gpuslice_scheduler_preemption_victims_count") == 1);
  CHECK(delta("gpuslice_scheduler_preemption_victims_sum") == 3);
  CHECK(sample(after, "gpuslice_scheduler_preemptions_in_flight") == 5);
  m.preemptions_in_flight.with({}).set(0);
}

TEST_CASE("loop metrics: the side effects in flight gauge is on /metrics from the start (the soak samples it)",
          "[loop_metrics]") {
  auto& m = LoopMetrics::get();
  const std::string text = metrics::default_registry().serialize();
  CHECK_THAT(text, Contains("# TYPE gpuslice_scheduler_side_effects_in_flight gauge\n"));
  CHECK(sample(text, "gpuslice_scheduler_side_effects_in_flight") >= 0);
  m.side_effects_in_flight.with({}).set(3);
  CHECK(sample(metrics::default_registry().serialize(), "gpuslice_scheduler_side_effects_in_flight") == 3);
  m.side_effects_in_flight.with({}).set(0);
}

TEST_CASE("loop metrics: card rows share their node name and type by pointer and render as before", "[loop_metrics]") {
  auto& m = LoopMetrics::get();
  metrics::LabelInterner names;
  auto node = names.intern("gpu-\"1\"");
  auto type = names.intern("NVIDIA A100-SXM4-80GB");
  std::vector<CardRow> rows{{node, "GPU-a", type, 1048576.0 * 100, 1048576.0 * 1000, 0.25, 2, 10},
                            {node, "GPU-b", names.intern("NVIDIA A100-SXM4-80GB"), 0, 1048576.0 * 1000, 0, 0, 10}};
  CHECK(rows[0].type.get() == rows[1].type.get());
  CHECK(rows[0].node.get() == rows[1].node.get());
  std::vector<CardRow> before;
  {
    std::lock_guard lock(m.cards_mutex);
    before.swap(m.cards);
    m.cards = rows;
  }
  const std::string text = metrics::default_registry().serialize();
  const std::string labels = R"({node="gpu-\"1\"",device_uuid="GPU-a",device_type="NVIDIA A100-SXM4-80GB"})";
  CHECK(sample(text, "gpuslice_scheduler_card_memory_allocated_bytes" + labels) == 104857600);
  CHECK(sample(text, "gpuslice_scheduler_card_memory_bytes" + labels) == 1048576000);
  CHECK(sample(text, "gpuslice_scheduler_card_core_allocated_ratio" + labels) == 0.25);
  CHECK(sample(text, "gpuslice_scheduler_card_shared_count" + labels) == 2);
  CHECK(sample(text,
               "gpuslice_scheduler_card_slots"
               R"({node="gpu-\"1\"",device_uuid="GPU-b",device_type="NVIDIA A100-SXM4-80GB"})") == 10);
  {
    std::lock_guard lock(m.cards_mutex);
    m.cards.swap(before);
  }
  before.clear();
  rows.clear();
  node.reset();
  type.reset();
  names.prune();
  CHECK(names.size() == 0);
}
