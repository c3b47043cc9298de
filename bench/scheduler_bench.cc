// Decisions per second of the scheduling core, in memory, one thread: N nodes x 8 cards (NVIDIA A100 80 GB, 10
// slots each) with 40,000 bound pods, for N = 100, 1,000, 5,000 (issue 3, item 11). Cluster and pods come from a
// fixed-seed generator, so runs are comparable. Three measurements per size:
//   decide          schedule() on an unchanging snapshot
//   decide+assume   schedule(), assume() the decision, forget() it again (two index updates per decision)
//   full scan       schedule() with the free-capacity index disabled (same decisions, every node examined)
//   pod walk        schedule() with the pod index disabled (ScheduleOptions::use_pod_index = false): what
//                   InterPodAffinity / PodTopologySpread cost when they walk every bound pod, as before the index;
//                   the decisions must be the same (the bench exits 1 if one differs)
// Workloads: mixed and large GPU pods (below), and the same mixed pods with kube-scheduler's hard constraints
// (issue 11): `anti` - required podAntiAffinity on kubernetes.io/hostname against the pod's own app label (one of
// 200 apps the bound pods carry), `spread` - a DoNotSchedule topologySpreadConstraint over 10 zones (maxSkew 1)
// on the same label. Both make InterPodAffinity / PodTopologySpread count the matching bound pods in PreFilter
// (from the snapshot's pod index), so they run a tenth of the decisions.
// Usage: scheduler_bench [decisions-per-size] [sizes...] [pods=N (bound pods, default 40000)]
#include "scheduler/framework/pod_facts.h"
#include "scheduler/schedule.h"

#include <boost/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

using namespace gpuslice::scheduler;
namespace json = boost::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kCardsPerNode = 8;
int kBoundPods = 40000;
constexpr int kApps = 200;
constexpr int kZones = 10;
constexpr int64_t kCardMem = 81920;

std::string zone_of(const std::string& node) {
  return "zone-" + std::to_string(std::hash<std::string>{}(node) % kZones);
}

json::object make_node(const std::string& name) {
  json::array cards;
  for (int c = 0; c < kCardsPerNode; ++c) {
    json::object d{{"id", name + "-gpu" + std::to_string(c)}, {"count", 10},   {"devmem", kCardMem}, {"devcore", 100},
                   {"type", "NVIDIA A100-SXM4-80GB"},         {"health", true}};
    if (c > 0) {
      d["index"] = c;
    }
    if (c >= kCardsPerNode / 2) {
      d["numa"] = 1;
    }
    cards.push_back(std::move(d));
  }
  return json::object{{"kind", "Node"},
                      {"metadata",
                       {{"name", name},
                        {"labels", {{"kubernetes.io/hostname", name}, {"topology.kubernetes.io/zone", zone_of(name)}}},
                        {"annotations", {{"hami.io/node-nvidia-register", json::serialize(cards)}}}}},
                      {"status",
                       {{"allocatable",
                         {{"cpu", "256"},
                          {"memory", "2Ti"},
                          {"pods", "1000"},
                          {"nvidia.com/gpu", std::to_string(kCardsPerNode * 10)}}}}}};
}

json::object bound_pod(const std::string& name, const std::string& node, const std::string& allocated, int app) {
  json::object ann;
  if (!allocated.empty()) {
    ann["hami.io/vgpu-node"] = node;
    ann["hami.io/vgpu-devices-allocated"] = allocated;
  }
  return json::object{
      {"kind", "Pod"},
      {"metadata",
       {{"name", name},
        {"namespace", "bench"},
        {"labels", {{"app", "app-" + std::to_string(app)}}},
        {"annotations", ann}}},
      {"spec",
       {{"nodeName", node},
        {"containers", json::array{json::object{
                           {"name", "c"}, {"resources", {{"requests", {{"cpu", "100m"}, {"memory", "256Mi"}}}}}}}}}},
      {"status", {{"phase", "Running"}}}};
}

struct Cluster {
  Snapshot snap;
  int gpu_pods = 0;
  int cpu_pods = 0;
  double build_ms = 0;
};

void build(Cluster& cl, int nodes, std::mt19937& rng) {
  auto t0 = Clock::now();
  std::vector<std::string> names;
  for (int i = 0; i < nodes; ++i) {
    names.push_back("node-" + std::to_string(100000 + i));
    (void)cl.snap.upsert_node(make_node(names.back()));
  }
  // A binpack steady state: nodes, in a shuffled order, are filled card by card with pods of 4000-20000 MiB and
  // 5-25 % cores until the next pod no longer fits, up to 40,000 pods or 70 % of the cards. The fullest nodes then
  // have the highest node scores: exactly the ones binpack would look at first and that cannot take a new pod.
  std::vector<int> order(nodes);
  for (int i = 0; i < nodes; ++i) {
    order[i] = i;
  }
  std::shuffle(order.begin(), order.end(), rng);
  std::uniform_int_distribution<int> mem_d(4000, 20000), core_d(5, 25);
  const int max_cards = nodes * kCardsPerNode * 7 / 10;
  int cards_used = 0;
  for (int ni = 0; ni < nodes && cl.gpu_pods < kBoundPods && cards_used < max_cards; ++ni) {
    const std::string& node = names[order[ni]];
    for (int c = 0; c < kCardsPerNode && cl.gpu_pods < kBoundPods && cards_used < max_cards; ++c, ++cards_used) {
      int64_t mem = 0, cores = 0, slots = 0;
      while (cl.gpu_pods < kBoundPods) {
        int64_t m = mem_d(rng), k = core_d(rng);
        if (mem + m > kCardMem || cores + k > 100 || slots + 1 > 10) {
          break;
        }
        mem += m;
        cores += k;
        ++slots;
        std::string alloc =
            node + "-gpu" + std::to_string(c) + ",NVIDIA," + std::to_string(m) + "," + std::to_string(k) + ":;";
        (void)cl.snap.upsert_pod(bound_pod("gpu-" + std::to_string(cl.gpu_pods), node, alloc, cl.gpu_pods % kApps));
        ++cl.gpu_pods;
      }
    }
  }
  std::uniform_int_distribution<int> node_d(0, nodes - 1);
  while (cl.gpu_pods + cl.cpu_pods < kBoundPods) {
    (void)cl.snap.upsert_pod(
        bound_pod("cpu-" + std::to_string(cl.cpu_pods), names[node_d(rng)], "", cl.cpu_pods % kApps));
    ++cl.cpu_pods;
  }
  cl.build_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// mixed: 1000-20000 MiB, 5-30 % cores, 10 % of the pods ask two cards.
// large: 50000-70000 MiB, 40-60 % cores: only nearly idle cards fit, so binpack's first candidates (the fullest
//        nodes) all fail; a full scan walks through them, the index skips them.
enum class Kind { mixed, large, anti, spread };
const char* kind_name(Kind k) {
  return k == Kind::mixed ? "mixed" : k == Kind::large ? "large" : k == Kind::anti ? "anti" : "spread";
}

// The constraint part of an `anti` or `spread` pod, parsed as the loop parses it (parse_pod_facts).
std::shared_ptr<const gpuslice::scheduler::PodFacts> facts_for(Kind kind, int app) {
  const std::string label = "app-" + std::to_string(app);
  json::object spec;
  json::object selector{{"matchLabels", {{"app", label}}}};
  if (kind == Kind::anti) {
    spec["affinity"] = {
        {"podAntiAffinity",
         {{"requiredDuringSchedulingIgnoredDuringExecution",
           json::array{json::object{{"labelSelector", selector}, {"topologyKey", "kubernetes.io/hostname"}}}}}}};
  } else {
    spec["topologySpreadConstraints"] = json::array{json::object{{"maxSkew", 1},
                                                                 {"topologyKey", "topology.kubernetes.io/zone"},
                                                                 {"whenUnsatisfiable", "DoNotSchedule"},
                                                                 {"labelSelector", selector}}};
  }
  json::object pod{{"metadata", {{"name", "x"}, {"namespace", "bench"}, {"labels", {{"app", label}}}}}, {"spec", spec}};
  auto f = gpuslice::scheduler::parse_pod_facts(pod);
  if (!f.ok()) {
    std::fprintf(stderr, "facts: %s\n", f.message().c_str());
    std::exit(1);
  }
  return f.value();
}

std::vector<PodInfo> workload(int count, Kind kind, std::mt19937& rng) {
  const bool large = kind == Kind::large;
  std::vector<PodInfo> pods;
  std::uniform_int_distribution<int> mem_d(large ? 50000 : 1000, large ? 70000 : 20000),
      core_d(large ? 40 : 5, large ? 60 : 30), two_d(0, 9);
  for (int i = 0; i < count; ++i) {
    PodInfo p;
    p.ns = "bench";
    p.name = "new-" + std::to_string(i);
    p.requests.cpu_milli = 500;
    p.requests.memory_bytes = int64_t(1) << 30;
    gpuslice::ContainerGpuRequest c;
    c.name = "main";
    c.gpus = (!large && two_d(rng) == 0) ? 2 : 1;
    c.mem_mib = mem_d(rng);
    c.cores = core_d(rng);
    p.gpu.containers.push_back(c);
    if (kind == Kind::anti || kind == Kind::spread) {
      p.facts = facts_for(kind, i % kApps);
    }
    pods.push_back(std::move(p));
  }
  return pods;
}

struct Measure {
  double per_sec = 0;
  double us = 0;
  double visited = 0;
  int scheduled = 0;
};

// CPU time of this thread: the machine is shared, so wall time would measure the neighbours' builds too.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

template <class F>
Measure run(const std::vector<PodInfo>& pods, F&& f) {
  Measure m;
  size_t visited = 0;
  double c0 = thread_cpu_seconds();
  for (const PodInfo& p : pods) {
    Decision d = f(p);
    visited += d.nodes_visited;
    m.scheduled += d.scheduled ? 1 : 0;
  }
  double secs = thread_cpu_seconds() - c0;
  m.per_sec = static_cast<double>(pods.size()) / secs;
  m.us = secs * 1e6 / static_cast<double>(pods.size());
  m.visited = static_cast<double>(visited) / static_cast<double>(pods.size());
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  int decisions = argc > 1 ? std::atoi(argv[1]) : 20000;
  std::vector<int> sizes;
  for (int i = 2; i < argc; ++i) {
    if (std::string(argv[i]).rfind("pods=", 0) == 0) {
      kBoundPods = std::atoi(argv[i] + 5);
    } else {
      sizes.push_back(std::atoi(argv[i]));
    }
  }
  if (sizes.empty()) {
    sizes = {100, 1000, 5000};
  }
  std::printf(
      "| nodes | workload | cards | bound pods (GPU + other) | build ms | decide/s | us/decision | nodes examined | "
      "decide+assume/s | full scan/s | full scan nodes examined | pod walk/s | scheduled %% |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (int n : sizes) {
    std::mt19937 rng(20261130);
    Cluster cl;
    build(cl, n, rng);
    for (Kind kind : {Kind::mixed, Kind::large, Kind::anti, Kind::spread}) {
      const bool constrained = kind == Kind::anti || kind == Kind::spread;
      std::vector<PodInfo> pods = workload(constrained ? std::max(1, decisions / 10) : decisions, kind, rng);
      ScheduleOptions opt;
      opt.explain_failures = false;  // the failure path explains every node; measured separately in tests
      Measure decide = run(pods, [&](const PodInfo& p) { return schedule(cl.snap, p, opt); });
      Measure churn = run(pods, [&](const PodInfo& p) {
        Decision d = schedule(cl.snap, p, opt);
        if (d.scheduled) {
          (void)cl.snap.assume(p, d.node, d.devices, 0);
          cl.snap.forget(p.ns, p.name);
        }
        return d;
      });
      ScheduleOptions scan = opt;
      scan.use_index = false;
      // The full scan is slow at scale: a tenth of the decisions is enough to measure it.
      std::vector<PodInfo> few(pods.begin(), pods.begin() + std::max<size_t>(1, pods.size() / 10));
      Measure full = run(few, [&](const PodInfo& p) { return schedule(cl.snap, p, scan); });
      ScheduleOptions walk_opt = opt;
      walk_opt.use_pod_index = false;
      Measure walk = run(pods, [&](const PodInfo& p) { return schedule(cl.snap, p, walk_opt); });
      for (const PodInfo& p : few) {
        const Decision a = schedule(cl.snap, p, opt);
        const Decision b = schedule(cl.snap, p, walk_opt);
        if (a.scheduled != b.scheduled || a.node != b.node) {
          std::fprintf(stderr, "pod index and pod walk disagree on %s: %s vs %s\n", p.name.c_str(), a.node.c_str(),
                       b.node.c_str());
          return 1;
        }
      }
      std::printf("| %d | %s | %d | %d (%d + %d) | %.0f | %.0f | %.1f | %.1f | %.0f | %.0f | %.1f | %.0f | %.1f |\n", n,
                  kind_name(kind), n * kCardsPerNode, cl.gpu_pods + cl.cpu_pods, cl.gpu_pods, cl.cpu_pods, cl.build_ms,
                  decide.per_sec, decide.us, decide.visited, churn.per_sec, full.per_sec, full.visited, walk.per_sec,
                  100.0 * decide.scheduled / static_cast<double>(pods.size()));
    }
    std::fflush(stdout);
  }
  return 0;
}
