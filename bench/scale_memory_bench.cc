// Memory of the scheduling loop at fleet scale, without an API server (issue 12 item 4): the objects
// bench/scale_bench.sh creates (N kwok Nodes of C A100 cards registered as lab/nodes.sh a100_register writes them,
// P GPU pods as bench/pods.sh gpu_pod, in the form kube-apiserver returns them) are fed to a SchedulingLoop
// through the same entry points the Reflectors use (relisted pages of 500, then watch events), and the loop binds
// them through a LoopApi that answers at once and delivers each bound pod back as the watch would (nodeName, the
// Binding's annotations and label, then Running as kwok marks it). The heap in use (mallinfo2) is read after each
// phase and reported per node and per pod; run it under heaptrack for the allocation sites.
//
//   build/<you>-rel/bench/scale_memory_bench [--nodes 5000] [--cards 8] [--pods 40000] [--exit-at pending|bound]
//   heaptrack -o /tmp/ht build/<you>-rel/bench/scale_memory_bench --exit-at bound   # what is live once all bound:
//   heaptrack_print -f /tmp/ht.zst --flamegraph-cost-type leaked -F /tmp/ht.stacks   # bytes live per call stack
// --exit-at ends the process there without freeing, so heaptrack's "leaked" is what the loop holds at that point
// (pending: with every pod pending; bound: once all are bound and the status view is dropped).
//
// Phases: nodes listed; pods listed while not synced (all pending: the start of the live run); one status view
// built and kept (the board's, published by a StatusPublisher as serve's is); synced and leading: every pod
// decided, bound and its bound object delivered; a status view published again (the publisher frees the first
// and trims the heap after it); malloc_trim. The figures are the loop's heap, not the process's RSS (no TLS, no
// reflector buffers): bench/scale_bench.sh measures that through a real kube-apiserver.

#include "common/json_access.h"
#include "kube/objects.h"
#include "scheduler/loop.h"
#include "scheduler/loop_api.h"
#include "scheduler/status_publisher.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/json.hpp>

#include <malloc.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <string>
#include <vector>

namespace asio = boost::asio;
namespace json = boost::json;
using namespace gpuslice;
using namespace gpuslice::scheduler;

namespace {

size_t heap_in_use() {
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

size_t rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      return std::strtoull(line.c_str() + 6, nullptr, 10);
    }
  }
  return 0;
}

std::string uuid_of(size_t i, unsigned salt) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%08x-%04x-4%03x-8%03x-%012zx", static_cast<unsigned>(i * 2654435761u) ^ salt,
                static_cast<unsigned>(i & 0xffff), static_cast<unsigned>(salt & 0xfff),
                static_cast<unsigned>((i >> 4) & 0xfff), i * 7919 + salt);
  return buf;
}

// A kwok Node as lab/nodes.sh kwok_node + a100_register write it, with what kube-apiserver and kwok add.
json::object make_node(size_t i, int cards) {
  const std::string name = "a-scale-" + std::to_string(i);
  std::string reg = "[";
  for (int j = 0; j < cards; ++j) {
    reg += (j ? "," : "") + std::string("{\"id\":\"GPU-a-scale-") + std::to_string(i) + "-" + std::to_string(j) +
           "\",\"index\":" + std::to_string(j) +
           ",\"count\":10,\"devmem\":81920,\"devcore\":100,\"type\":\"NVIDIA A100-SXM4-80GB\",\"mode\":\"hami-core\","
           "\"health\":true}";
  }
  reg += "]";
  const std::string slices = std::to_string(cards * 10);
  json::object res{{"cpu", "64"}, {"memory", "512Gi"}, {"pods", "110"}, {"nvidia.com/gpu", slices}};
  return json::object{{"apiVersion", "v1"},
                      {"kind", "Node"},
                      {"metadata",
                       {{"name", name},
                        {"uid", uuid_of(i, 0x5a5a)},
                        {"resourceVersion", std::to_string(1000 + i)},
                        {"creationTimestamp", "2026-12-04T19:40:00Z"},
                        {"labels",
                         {{"kubernetes.io/hostname", name},
                          {"kubernetes.io/os", "linux"},
                          {"kubernetes.io/arch", "amd64"},
                          {"type", "kwok"},
                          {"gpuslice.io/lab", "extra"}}},
                        {"annotations",
                         {{"kwok.x-k8s.io/node", "fake"},
                          {"hami.io/node-nvidia-register", reg},
                          {"node.alpha.kubernetes.io/ttl", "0"}}}}},
                      {"spec", json::object{}},
                      {"status",
                       {{"capacity", res},
                        {"allocatable", res},
                        {"phase", "Running"},
                        {"conditions", json::array{json::object{{"type", "Ready"},
                                                                {"status", "True"},
                                                                {"reason", "KubeletReady"},
                                                                {"message", "kubelet is posting ready status"},
                                                                {"lastHeartbeatTime", "2026-12-04T19:41:00Z"},
                                                                {"lastTransitionTime", "2026-12-04T19:41:00Z"}}}},
                        {"nodeInfo",
                         {{"architecture", "amd64"},
                          {"kubeletVersion", "fake"},
                          {"kubeProxyVersion", "fake"},
                          {"operatingSystem", "linux"}}}}}};
}

// bench/pods.sh gpu_pod as kube-apiserver returns it (defaults, the service account's projected volume, the
// DefaultTolerationSeconds tolerations), managedFields dropped as the Reflector does.
json::object make_pod(size_t i, const std::string& ns) {
  const std::string name = "gpu-" + std::to_string(i);
  const std::string vol = "kube-api-access-" + uuid_of(i, 0x77).substr(0, 5);
  json::object res{{"nvidia.com/gpu", "1"}, {"nvidia.com/gpucores", "5"}, {"nvidia.com/gpumem", "1000"}};
  return json::object{
      {"kind", "Pod"},
      {"apiVersion", "v1"},
      {"metadata",
       {{"name", name},
        {"namespace", ns},
        {"uid", uuid_of(i, 0x1234)},
        {"resourceVersion", std::to_string(200000 + i)},
        {"creationTimestamp", "2026-12-04T19:43:00Z"},
        {"labels", {{"bench", "gpu"}, {"gpuslice.io/webhook", "ignore"}}}}},
      {"spec",
       {{"volumes",
         json::array{json::object{
             {"name", vol},
             {"projected",
              {{"sources",
                json::array{
                    json::object{{"serviceAccountToken", {{"expirationSeconds", 3607}, {"path", "token"}}}},
                    json::object{{"configMap",
                                  {{"name", "kube-root-ca.crt"},
                                   {"items", json::array{json::object{{"key", "ca.crt"}, {"path", "ca.crt"}}}}}}},
                    json::object{{"downwardAPI",
                                  {{"items", json::array{json::object{
                                                 {"path", "namespace"},
                                                 {"fieldRef",
                                                  {{"apiVersion", "v1"}, {"fieldPath", "metadata.namespace"}}}}}}}}}}},
               {"defaultMode", 420}}}}}},
        {"containers",
         json::array{json::object{
             {"name", "c"},
             {"image", "registry.k8s.io/pause:3.10"},
             {"resources", {{"limits", res}, {"requests", res}}},
             {"volumeMounts",
              json::array{json::object{
                  {"name", vol}, {"readOnly", true}, {"mountPath", "/var/run/secrets/kubernetes.io/serviceaccount"}}}},
             {"terminationMessagePath", "/dev/termination-log"},
             {"terminationMessagePolicy", "File"},
             {"imagePullPolicy", "IfNotPresent"}}}},
        {"restartPolicy", "Always"},
        {"terminationGracePeriodSeconds", 0},
        {"dnsPolicy", "ClusterFirst"},
        {"serviceAccountName", "default"},
        {"serviceAccount", "default"},
        {"securityContext", json::object{}},
        {"schedulerName", "gpuslice-scheduler"},
        {"tolerations", json::array{json::object{{"key", "node.kubernetes.io/not-ready"},
                                                 {"operator", "Exists"},
                                                 {"effect", "NoExecute"},
                                                 {"tolerationSeconds", 300}},
                                    json::object{{"key", "node.kubernetes.io/unreachable"},
                                                 {"operator", "Exists"},
                                                 {"effect", "NoExecute"},
                                                 {"tolerationSeconds", 300}}}},
        {"priority", 0},
        {"enableServiceLinks", true},
        {"preemptionPolicy", "PreemptLowerPriority"}}},
      {"status", {{"phase", "Pending"}, {"qosClass", "BestEffort"}}}};
}

// What the watch shows of a pod once its Binding landed and kwok marked it Running.
json::object bound_pod(json::object pod, const std::string& node, const kube::BindingMetadata& meta) {
  auto& md = pod["metadata"].as_object();
  json::object ann;
  for (const auto& [k, v] : meta.annotations) {
    ann[k] = v;
  }
  md["annotations"] = std::move(ann);
  auto& labels = md["labels"].as_object();
  for (const auto& [k, v] : meta.labels) {
    labels[k] = v;
  }
  md["resourceVersion"] = std::to_string(std::strtoull(md["resourceVersion"].as_string().c_str(), nullptr, 10) + 1);
  pod["spec"].as_object()["nodeName"] = node;
  auto cond = [](const char* type) {
    return json::object{{"type", type}, {"status", "True"}, {"lastTransitionTime", "2026-12-04T19:44:00Z"}};
  };
  pod["status"] = json::object{
      {"phase", "Running"},
      {"conditions", json::array{cond("Initialized"), cond("Ready"), cond("ContainersReady"), cond("PodScheduled")}},
      {"hostIP", "10.0.0.1"},
      {"hostIPs", json::array{json::object{{"ip", "10.0.0.1"}}}},
      {"podIP", "10.0.0.2"},
      {"podIPs", json::array{json::object{{"ip", "10.0.0.2"}}}},
      {"startTime", "2026-12-04T19:44:00Z"},
      {"containerStatuses", json::array{json::object{{"name", "c"},
                                                     {"state", {{"running", {{"startedAt", "2026-12-04T19:44:00Z"}}}}},
                                                     {"lastState", json::object{}},
                                                     {"ready", true},
                                                     {"restartCount", 0},
                                                     {"image", "registry.k8s.io/pause:3.10"},
                                                     {"imageID", ""},
                                                     {"started", true}}}},
      {"qosClass", "BestEffort"}};
  return pod;
}

// Answers every call at once; a Binding is delivered back to the loop as the watch's MODIFIED event.
class InstantApi : public LoopApi {
 public:
  explicit InstantApi(asio::any_io_executor ex) : ex_(ex) {}
  std::function<void(json::object)> deliver;
  size_t binds = 0;

  Task<kube::ApiResult<Object>> patch_pod(std::string, std::string, std::string) override { co_return Object{}; }
  Task<kube::ApiResult<Object>> patch_claim(std::string, std::string, std::string) override { co_return Object{}; }
  Task<kube::ApiResult<Object>> patch_volume(std::string, std::string) override { co_return Object{}; }
  Task<kube::ApiResult<Object>> patch_node(std::string, std::string) override { co_return Object{}; }
  Task<kube::ApiResult<Object>> json_patch_node(std::string, std::string) override { co_return Object{}; }
  Task<kube::ApiResult<Object>> get_pod(std::string ns, std::string name) override {
    co_return make_pod(index_of(name), ns);
  }
  Task<kube::ApiResult<Object>> get_node(std::string) override { co_return kube::ApiError{404, "NotFound", "no"}; }
  Task<kube::ApiStatus> bind(std::string ns, std::string name, std::string node, std::string,
                             kube::BindingMetadata metadata) override {
    ++binds;
    json::object bound = bound_pod(make_pod(index_of(name), ns), node, metadata);
    asio::post(ex_, [this, b = std::move(bound)]() mutable { deliver(std::move(b)); });
    co_return kube::ApiStatus::Ok();
  }
  Task<kube::ApiResult<Object>> patch_condition(std::string, std::string, kube::PodCondition) override {
    co_return Object{};
  }
  Task<kube::ApiResult<Object>> create_event(kube::EventRecord) override { co_return Object{}; }
  Task<kube::ApiResult<Object>> patch_event(std::string, std::string, std::string) override { co_return Object{}; }
  Task<kube::ApiResult<Object>> patch_pod_status(std::string, std::string, std::string) override { co_return Object{}; }
  Task<kube::ApiStatus> remove_pod(std::string, std::string, std::string) override { co_return kube::ApiStatus::Ok(); }

 private:
  static size_t index_of(const std::string& name) { return std::strtoull(name.c_str() + 4, nullptr, 10); }
  asio::any_io_executor ex_;
};

struct Phase {
  const char* name;
  size_t heap;
  size_t rss_kib;
};

}  // namespace

int main(int argc, char** argv) {
  size_t nodes = 5000, pods = 40000;
  int cards = 8;
  std::string exit_at;  // "pending" | "bound": end the process there without freeing (heaptrack's "leaked" = live)
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--nodes")) {
      nodes = std::strtoull(argv[i + 1], nullptr, 10);
    } else if (!std::strcmp(argv[i], "--cards")) {
      cards = std::atoi(argv[i + 1]);
    } else if (!std::strcmp(argv[i], "--exit-at")) {
      exit_at = argv[i + 1];
    } else if (!std::strcmp(argv[i], "--pods")) {
      pods = std::strtoull(argv[i + 1], nullptr, 10);
    } else {
      std::fprintf(stderr, "usage: scale_memory_bench [--nodes N] [--cards C] [--pods P] [--exit-at pending|bound]\n");
      return 2;
    }
  }
  const std::string ns = "gpuslice-scale";
  std::vector<Phase> phases;
  auto mark = [&](const char* name) {
    phases.push_back({name, heap_in_use(), rss_kib()});
    std::fprintf(stderr, "[%s] heap %.1f MiB, RSS %.1f MiB\n", name, phases.back().heap / 1048576.0,
                 phases.back().rss_kib / 1024.0);
  };

  asio::io_context io;
  // The API server's pods are made again from their index when read (get_pod, bind): none is kept here.
  auto api = std::make_shared<InstantApi>(io.get_executor());
  LoopOptions o;
  o.scheduler.node_lock = "off";
  o.identity = "bench";
  malloc_trim(0);
  mark("start");
  auto loop = std::make_shared<SchedulingLoop>(io.get_executor(), o, api);
  api->deliver = [&](json::object pod) {
    kube::ReflectorEvent e;
    e.type = kube::ReflectorEventType::modified;
    e.object = &pod;
    loop->on_pod_event(e);
  };
  mark("loop constructed");

  // Nodes: the list, page by page (each page built and dropped, as the Reflector does).
  {
    std::vector<json::object> page;
    const size_t base = heap_in_use();
    (void)base;
    for (size_t at = 0; at < nodes; at += 500) {
      page.clear();
      for (size_t i = at; i < std::min(nodes, at + 500); ++i) {
        page.push_back(make_node(i, cards));
      }
      kube::ReflectorEvent e;
      e.type = kube::ReflectorEventType::relisted;
      e.items = &page;
      e.relist_begins = at == 0;
      e.relist_complete = at + 500 >= nodes;
      loop->on_node_event(e);
    }
  }
  {
    std::vector<json::object> none;
    kube::ReflectorEvent e;
    e.type = kube::ReflectorEventType::relisted;
    e.items = &none;
    loop->on_quota_event(e);
    for (size_t k = 0; k < kClusterObjectKinds; ++k) {
      loop->on_cluster_object_event(static_cast<ClusterObjectKind>(k), e);
    }
  }
  malloc_trim(0);
  mark("nodes listed");

  // Pods: the list page by page.
  {
    std::vector<json::object> page;
    for (size_t at = 0; at < pods; at += 500) {
      page.clear();
      for (size_t i = at; i < std::min(pods, at + 500); ++i) {
        page.push_back(make_pod(i, ns));
      }
      kube::ReflectorEvent e;
      e.type = kube::ReflectorEventType::relisted;
      e.items = &page;
      e.relist_begins = at == 0;
      e.relist_complete = at + 500 >= pods;
      loop->on_pod_event(e);
    }
  }
  malloc_trim(0);
  mark("pods listed (all pending)");
  if (exit_at == "pending") {
    std::fflush(nullptr);
    _exit(0);
  }

  status::SchedulerState state;
  state.synced = true;
  state.leading = true;
  // The board's view, published as serve's StatusPublisher does (publish_now: build, publish, and when that
  // freed the previous view, return the freed heap pages).
  auto publisher = std::make_shared<StatusPublisher>(io.get_executor(),
                                                     [&]() -> status::StatusView { return loop->status_view(state); });
  publisher->publish_now();
  malloc_trim(0);
  mark("status view built (pending)");

  loop->set_synced(true);
  loop->set_active(true);
  asio::co_spawn(io, loop->run(), asio::detached);
  size_t peak = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (api->binds < pods || loop->binds_in_flight() > 0) {
    io.run_for(std::chrono::milliseconds(20));
    io.restart();
    peak = std::max(peak, heap_in_use());
    if (std::chrono::steady_clock::now() - t0 > std::chrono::minutes(20)) {
      std::fprintf(stderr, "gave up: %zu binds\n", api->binds);
      break;
    }
  }
  io.run_for(std::chrono::milliseconds(50));
  io.restart();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "bound %zu pods in %.1f s (%.0f pods/s)\n", api->binds, secs, api->binds / secs);
  publisher->publish_now();
  mark("all bound, status view rebuilt");
  std::fprintf(stderr, "status view published: build %.1f ms, then the publisher's trim %.1f ms\n",
               publisher->board()->latest()->build_time.count() / 1000.0, publisher->last_trim().count() / 1000.0);
  malloc_trim(0);
  mark("all bound, after malloc_trim");
  publisher.reset();  // and the board with it: the view is freed
  malloc_trim(0);
  mark("status view dropped");
  if (exit_at == "bound") {
    std::fflush(nullptr);
    _exit(0);
  }

  const double mib = 1048576.0;
  // phases: 0 start, 1 loop constructed, 2 nodes listed, 3 pods listed, 4 view (pending), 5 all bound + view,
  // 6 after trim, 7 view dropped
  const size_t loop0 = phases[1].heap;
  auto row = [&](const char* what, size_t heap, double per, const char* unit, size_t rss) {
    std::printf("| %s | %.1f | %.0f %s | %.1f |\n", what, (heap - loop0) / mib, per, unit, rss / 1024.0);
  };
  std::printf("| phase (%zu nodes x %d cards, %zu pods) | loop heap (MiB) | increment | RSS (MiB) |\n", nodes, cards,
              pods);
  std::printf("|---|---|---|---|\n");
  row("nodes listed", phases[2].heap, double(phases[2].heap - loop0) / nodes, "B/node", phases[2].rss_kib);
  row("+ pods listed, all pending", phases[3].heap, double(phases[3].heap - phases[2].heap) / pods, "B/pending pod",
      phases[3].rss_kib);
  row("+ status view (pending)", phases[4].heap, double(phases[4].heap - phases[3].heap) / pods, "B/pending pod",
      phases[4].rss_kib);
  std::printf("| peak while binding | %.1f | | |\n", (peak - loop0) / mib);
  row("all bound, status view rebuilt", phases[5].heap, double(phases[5].heap - phases[2].heap) / pods,
      "B/bound pod (view incl.)", phases[5].rss_kib);
  row("all bound, after malloc_trim", phases[6].heap, double(phases[6].heap - phases[2].heap) / pods,
      "B/bound pod (view incl.)", phases[6].rss_kib);
  row("all bound, status view dropped", phases[7].heap, double(phases[7].heap - phases[2].heap) / pods, "B/bound pod",
      phases[7].rss_kib);
  loop->stop();
  io.run_for(std::chrono::milliseconds(50));
  return 0;
}
