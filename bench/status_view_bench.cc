// Cost of the status view (scheduler/status_view.h) at fleet scale, in memory, one thread: N nodes x 8 cards
// (A100 80 GB, 10 slots) with P bound pods of one container each (20000 MiB / 30 % on one card) and 1,000 pending
// pods carrying a FitError message. Per size, the median of R runs of:
//   build_view        the loop's part on its own thread, once per second at most (serve caches it 1 s)
//   render_json       one /status.json page (50 nodes) and the body size
//   render_hami       the /metrics collector's text with HAMi's legacy names (serve's default) and its size
//   render_modern     the same with --hami-legacy-metrics=false (HAMi v2.10's names only) and its size
//   scrape, scrape_modern  the whole /metrics body as serve builds it (metrics::default_registry().serialize():
//                     the loop's families and per-card gauges, scheduler/loop_metrics.cc, plus the status view's
//                     collector as cmd/serve_scheduler.cc registers it), with and without the legacy names
// Usage: status_view_bench [runs] [nodes...] [pods=N]   (default: 5 runs, 100 1000 5000 nodes, 40000 pods)
#include "scheduler/allocation.h"
#include "scheduler/inventory.h"
#include "scheduler/loop_metrics.h"
#include "scheduler/status_board.h"
#include "scheduler/status_view.h"

#include <boost/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace gpuslice::scheduler;
namespace json = boost::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kCards = 8;

json::object node_object(const std::string& name) {
  std::vector<DeviceInfo> cards;
  for (int c = 0; c < kCards; ++c) {
    DeviceInfo d;
    d.id = name + "-gpu" + std::to_string(c);
    d.index = c;
    d.count = 10;
    d.devmem = 81920;
    d.devcore = 100;
    d.type = "NVIDIA A100-SXM4-80GB";
    d.mode = "hami-core";
    d.health = true;
    cards.push_back(d);
  }
  return json::object{
      {"kind", "Node"},
      {"metadata", {{"name", name}, {"annotations", {{kNodeRegisterAnnotation, encode_node_devices_json(cards)}}}}},
      {"status", {{"allocatable", {{"cpu", "128"}, {"memory", "1Ti"}, {"pods", "500"}, {"nvidia.com/gpu", "80"}}}}}};
}

json::object pod_object(int i, const std::string& node, const std::string& uuid) {
  const std::string name = "p" + std::to_string(i);
  json::object ann{{kVgpuNodeAnnotation, node},
                   {kDevicesAllocatedAnnotation, uuid + ",NVIDIA,20000,30:;"},
                   {kBindPhaseAnnotation, kBindPhaseSuccess}};
  return json::object{
      {"kind", "Pod"},
      {"metadata", {{"name", name}, {"namespace", "team-" + std::to_string(i % 50)}, {"annotations", ann}}},
      {"spec",
       {{"nodeName", node},
        {"schedulerName", "gpuslice-scheduler"},
        {"containers", json::array{json::object{{"name", "cuda"}}}}}},
      {"status", {{"phase", "Running"}}}};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <class F>
double time_ms(F&& f) {
  const auto t0 = Clock::now();
  f();
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 5;
  int pods = 40000;
  std::vector<int> sizes;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("pods=", 0) == 0) {
      pods = std::atoi(a.c_str() + 5);
    } else if (i == 1) {
      runs = std::max(1, std::atoi(a.c_str()));
    } else {
      sizes.push_back(std::atoi(a.c_str()));
    }
  }
  if (sizes.empty()) sizes = {100, 1000, 5000};
  // serve's /metrics: the loop's families (and its per-card gauges) and the status view's collector.
  auto& loop_metrics = LoopMetrics::get();
  gpuslice::metrics::LabelInterner card_labels;  // as the loop's update_gauges() shares names and types
  const status::StatusView* scraped = nullptr;
  std::atomic<bool> legacy{true};
  gpuslice::metrics::default_registry().add_collector([&](std::string& out) {
    if (scraped != nullptr) status::append_hami_metrics(out, *scraped, legacy.load());
  });
  std::printf("%8s %8s %14s %16s %12s %16s %12s %18s %14s %10s %13s %17s %14s\n", "nodes", "pods", "build_view_ms",
              "render_json_ms", "json_bytes", "render_hami_ms", "hami_bytes", "render_modern_ms", "modern_bytes",
              "scrape_ms", "scrape_bytes", "scrape_modern_ms", "modern_bytes");
  for (int n : sizes) {
    Snapshot snap;
    for (int i = 0; i < n; ++i) {
      if (!snap.upsert_node(node_object("node-" + std::to_string(i))).ok()) return 1;
    }
    // At most 3 pods of 30 % per card: fill cards in order up to that.
    const int placed = std::min(pods, n * kCards * 3);
    for (int i = 0; i < placed; ++i) {
      const int card = i / 3;
      const std::string node = "node-" + std::to_string(card / kCards);
      if (!snap.upsert_pod(pod_object(i, node, node + "-gpu" + std::to_string(card % kCards))).ok()) return 1;
    }
    std::vector<status::PendingInput> pending;
    for (int i = 0; i < 1000; ++i) {
      pending.push_back({"team-" + std::to_string(i % 50),
                         "wait-" + std::to_string(i),
                         {},
                         "0/" + std::to_string(n) + " nodes are available: " + std::to_string(n) +
                             " CardInsufficientCore (asks 30% of a card's cores, largest free 10%).",
                         1000});
    }
    status::SchedulerState st;
    st.now_unix = 2000;
    std::vector<double> b, j, h, m, sc, scm;
    size_t json_bytes = 0, hami_bytes = 0, modern_bytes = 0, scrape_bytes = 0, scrape_modern_bytes = 0;
    for (int r = 0; r < runs; ++r) {
      status::StatusView v;
      b.push_back(time_ms([&] { v = status::build_view(snap, pending, st); }));
      j.push_back(time_ms([&] { json_bytes = status::render_json(v, status::PageQuery{}).size(); }));
      h.push_back(time_ms([&] { hami_bytes = status::render_hami_metrics(v, true).size(); }));
      m.push_back(time_ms([&] { modern_bytes = status::render_hami_metrics(v, false).size(); }));
      // The loop's card rows, as update_gauges() leaves them.
      std::vector<CardRow> rows;
      for (const auto& node : v.nodes) {
        gpuslice::metrics::LabelInterner::Value name = card_labels.intern(node.name);
        for (const auto& c : node.cards) {
          rows.push_back(CardRow{name, c.uuid, card_labels.intern(c.type), double(c.mem_used_mib) * 1048576.0,
                                 double(c.mem_total_mib) * 1048576.0,
                                 c.cores_total > 0 ? double(c.cores_used) / double(c.cores_total) : 0.0,
                                 double(c.slots_used), double(c.slots_total)});
        }
      }
      {
        std::lock_guard lock(loop_metrics.cards_mutex);
        loop_metrics.cards = std::move(rows);
      }
      scraped = &v;
      legacy = true;
      sc.push_back(time_ms([&] { scrape_bytes = gpuslice::metrics::default_registry().serialize().size(); }));
      legacy = false;
      scm.push_back(time_ms([&] { scrape_modern_bytes = gpuslice::metrics::default_registry().serialize().size(); }));
      scraped = nullptr;
    }
    std::printf("%8d %8d %14.2f %16.2f %12zu %16.2f %12zu %18.2f %14zu %10.2f %13zu %17.2f %14zu\n", n, placed,
                median(b), median(j), json_bytes, median(h), hami_bytes, median(m), modern_bytes, median(sc),
                scrape_bytes, median(scm), scrape_modern_bytes);
  }
  return 0;
}
