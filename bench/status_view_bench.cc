// Cost of the status view (scheduler/status_view.h) at fleet scale, in memory, one thread: N nodes x 8 cards
// (A100 80 GB, 10 slots) with P bound pods of one container each (20000 MiB / 30 % on one card) and 1,000 pending
// pods carrying a FitError message. Per size, the median of R runs of:
//   build_view        the loop's part on its own thread, once per second at most (serve caches it 1 s)
//   render_json       one /status.json page (50 nodes) and the body size
//   render_hami       the /metrics collector's text (HAMi's series + legacy names) and its size
// Usage: status_view_bench [runs] [nodes...] [pods=N]   (default: 5 runs, 100 1000 5000 nodes, 40000 pods)
#include "scheduler/allocation.h"
#include "scheduler/inventory.h"
#include "scheduler/status_view.h"

#include <boost/json.hpp>

#include <algorithm>
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
  std::printf("%8s %8s %14s %16s %12s %16s %12s\n", "nodes", "pods", "build_view_ms", "render_json_ms", "json_bytes",
              "render_hami_ms", "hami_bytes");
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
    std::vector<double> b, j, h;
    size_t json_bytes = 0, hami_bytes = 0;
    for (int r = 0; r < runs; ++r) {
      status::StatusView v;
      b.push_back(time_ms([&] { v = status::build_view(snap, pending, st); }));
      j.push_back(time_ms([&] { json_bytes = status::render_json(v, status::PageQuery{}).size(); }));
      h.push_back(time_ms([&] { hami_bytes = status::render_hami_metrics(v).size(); }));
    }
    std::printf("%8d %8d %14.2f %16.2f %12zu %16.2f %12zu\n", n, placed, median(b), median(j), json_bytes, median(h),
                hami_bytes);
  }
  return 0;
}
