// The mutation policy on real pod objects (kubectl client-side dry run of testdata/*.yaml). Every patch is
// applied by nlohmann-json (an independent RFC 6902 implementation) and the policy is run again on the result.
#include "webhook_test_support.h"

using namespace gpuslice;
using namespace gpuslice::webhook;
using namespace gpuslice::webhook::testing;
using nlohmann::json;

namespace {

const json& container(const json& pod, const char* list, size_t i) {
  return pod.at("spec").at(list).at(i);
}

const json& limits(const json& pod, const char* list, size_t i) {
  return container(pod, list, i).at("resources").at("limits");
}

// An env var's value, or "<absent>".
std::string env_value(const json& c, const std::string& name) {
  std::string found = "<absent>";
  if (!c.contains("env")) return found;
  for (const auto& e : c["env"]) {
    if (e.value("name", "") == name) found = e.value("value", "<no value>");
  }
  return found;
}

size_t env_count(const json& c, const std::string& name) {
  size_t n = 0;
  if (!c.contains("env")) return 0;
  for (const auto& e : c["env"]) n += e.value("name", "") == name ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("single container: scheduler set, resources untouched, annotation injected") {
  Configuration cfg;
  auto pod = fixture("single");
  auto m = mutate_and_apply(pod, cfg);
  REQUIRE(m.result.allowed);
  CHECK(m.result.gpu_pod);
  CHECK_FALSE(m.result.skipped);
  CHECK(m.pod["spec"]["schedulerName"] == "gpuslice-scheduler");
  json before = json::parse(fixture_text("single"));
  CHECK(limits(m.pod, "containers", 0) == limits(before, "containers", 0));
  CHECK(env_value(container(m.pod, "containers", 0), "CUDA_TASK_PRIORITY") == "<absent>");
  CHECK_FALSE(m.pod["spec"].contains("runtimeClassName"));
  PodGpuRequest expect;
  expect.containers = {want("cuda", false, 1, 3000, std::nullopt, 30)};
  CHECK(annotation_of(m.pod) == expect);
  // The metadata the user wrote is still there.
  CHECK(m.pod["metadata"]["name"] == "single");
  CHECK(m.pod["metadata"]["namespace"] == "team-a");
}

TEST_CASE("a bare count gets gpucores 100 (exclusive card), as HAMi does") {
  auto m = mutate_and_apply(fixture("exclusive"), Configuration{});
  const json& l = limits(m.pod, "containers", 0);
  CHECK(l["nvidia.com/gpucores"] == "100");
  CHECK(l.contains("cpu"));
  CHECK(l.contains("memory"));
  PodGpuRequest expect;
  expect.containers = {want("trainer", false, 1, std::nullopt, 100, 100)};
  CHECK(annotation_of(m.pod) == expect);
  // The key is escaped in the patch path (RFC 6901).
  bool escaped = false;
  for (const auto& op : m.result.patch) escaped = escaped || op.path.find("nvidia.com~1gpucores") != std::string::npos;
  CHECK(escaped);
}

TEST_CASE("memory without a count gets nvidia.com/gpu = defaultGPUNum and no gpucores") {
  auto m = mutate_and_apply(fixture("memory_only"), Configuration{});
  const json& l = limits(m.pod, "containers", 0);
  CHECK(l["nvidia.com/gpu"] == "1");
  CHECK_FALSE(l.contains("nvidia.com/gpucores"));
  PodGpuRequest expect;
  expect.containers = {want("infer", false, 1, 4000, std::nullopt, 0)};
  CHECK(annotation_of(m.pod) == expect);

  Configuration two;
  two.devices.default_gpu_num = 2;
  two.devices.memory_factor = 2;
  auto m2 = mutate_and_apply(fixture("memory_only"), two);
  CHECK(limits(m2.pod, "containers", 0)["nvidia.com/gpu"] == "2");
  PodGpuRequest expect2;
  expect2.containers = {want("infer", false, 2, 8000, std::nullopt, 0)};
  CHECK(annotation_of(m2.pod) == expect2);
}

TEST_CASE("percentage of memory on several cards") {
  auto m = mutate_and_apply(fixture("percentage"), Configuration{});
  json before = json::parse(fixture_text("percentage"));
  CHECK(limits(m.pod, "containers", 0) == limits(before, "containers", 0));
  PodGpuRequest expect;
  expect.containers = {want("half", false, 2, std::nullopt, 50, 0)};
  CHECK(annotation_of(m.pod) == expect);
}

TEST_CASE("100 % memory without a count: count defaulted and the card is exclusive") {
  auto m = mutate_and_apply(fixture("percentage_full"), Configuration{});
  const json& l = limits(m.pod, "containers", 0);
  CHECK(l["nvidia.com/gpu"] == "1");
  CHECK(l["nvidia.com/gpucores"] == "100");
  PodGpuRequest expect;
  expect.containers = {want("full", false, 1, std::nullopt, 100, 100)};
  CHECK(annotation_of(m.pod) == expect);
}

TEST_CASE("several GPUs per container") {
  auto m = mutate_and_apply(fixture("several_gpus"), Configuration{}, "team-b");
  PodGpuRequest expect;
  expect.containers = {want("ddp", false, 4, 20000, std::nullopt, 50)};
  CHECK(annotation_of(m.pod) == expect);
}

TEST_CASE("multi container: priority env, defaults per container, CPU sidecar untouched") {
  auto m = mutate_and_apply(fixture("multi_container"), Configuration{});
  json before = json::parse(fixture_text("multi_container"));
  const json& model = container(m.pod, "containers", 0);
  CHECK(env_value(model, "CUDA_TASK_PRIORITY") == "0");
  CHECK(env_value(model, "MODEL_DIR") == "/models");  // appended, not replaced
  CHECK(model["env"].size() == 2);
  CHECK(limits(m.pod, "containers", 1)["nvidia.com/gpu"] == "1");
  CHECK(container(m.pod, "containers", 2) == container(before, "containers", 2));
  PodGpuRequest expect;
  expect.containers = {want("model", false, 1, 8000, std::nullopt, 40),
                       want("embedder", false, 1, 2000, std::nullopt, 0),
                       want("proxy", false, 0, std::nullopt, std::nullopt, 0)};
  CHECK(annotation_of(m.pod) == expect);
}

TEST_CASE("GPU_CORE_UTILIZATION_POLICY goes on every container when configured") {
  Configuration cfg;
  cfg.webhook.gpu_core_policy = "force";
  auto m = mutate_and_apply(fixture("multi_container"), cfg);
  for (size_t i = 0; i < 3; ++i)
    CHECK(env_value(container(m.pod, "containers", i), "GPU_CORE_UTILIZATION_POLICY") == "force");
  CHECK(env_value(container(m.pod, "containers", 0), "CUDA_TASK_PRIORITY") == "0");

  auto init = mutate_and_apply(fixture("init_containers"), cfg);
  CHECK(env_value(container(init.pod, "initContainers", 0), "GPU_CORE_UTILIZATION_POLICY") == "force");
  CHECK(env_value(container(init.pod, "initContainers", 1), "GPU_CORE_UTILIZATION_POLICY") == "force");
  CHECK(env_value(container(init.pod, "containers", 0), "GPU_CORE_UTILIZATION_POLICY") == "force");

  Configuration off;  // default: no env at all
  auto plain = mutate_and_apply(fixture("multi_container"), off);
  CHECK(env_value(container(plain.pod, "containers", 2), "GPU_CORE_UTILIZATION_POLICY") == "<absent>");
}

TEST_CASE("init containers are part of the request, in init-then-app order") {
  auto m = mutate_and_apply(fixture("init_containers"), Configuration{});
  CHECK(limits(m.pod, "initContainers", 1)["nvidia.com/gpucores"] == "100");
  CHECK_FALSE(container(m.pod, "initContainers", 0).contains("resources"));  // the CPU init container is untouched
  PodGpuRequest expect;
  expect.containers = {want("fetch", true, 0, std::nullopt, std::nullopt, 0),
                       want("warmup", true, 1, std::nullopt, 100, 100),
                       want("serve", false, 1, 10000, std::nullopt, 25)};
  CHECK(annotation_of(m.pod) == expect);
}

TEST_CASE("card selection annotations pass through untouched") {
  json before = json::parse(fixture_text("type_annotations"));
  auto m = mutate_and_apply(fixture("type_annotations"), Configuration{});
  json annotations = m.pod["metadata"]["annotations"];
  CHECK(annotations.size() == before["metadata"]["annotations"].size() + 1);
  for (const auto& [k, v] : before["metadata"]["annotations"].items()) CHECK(annotations[k] == v);
  CHECK(annotations["nvidia.com/use-gputype"] == "A100,H100");
  PodGpuRequest expect;
  expect.containers = {want("cuda", false, 1, 16000, std::nullopt, 0)};
  CHECK(annotation_of(m.pod) == expect);
  // Only the scheduler name and our annotation change.
  CHECK(m.result.patch.size() == 2);
}

TEST_CASE("requests are read where limits are absent") {
  auto m = mutate_and_apply(fixture("requests_only"), Configuration{});
  PodGpuRequest expect;
  expect.containers = {want("cuda", false, 1, 1024, std::nullopt, 0)};
  CHECK(annotation_of(m.pod) == expect);
  CHECK(m.pod["spec"]["schedulerName"] == "gpuslice-scheduler");
}

TEST_CASE("default-scheduler pods are taken over, the takeover list and our name are configurable") {
  auto m = mutate_and_apply(fixture("default_scheduler"), Configuration{});
  CHECK(m.pod["spec"]["schedulerName"] == "gpuslice-scheduler");
  bool replaced = false;
  for (const auto& op : m.result.patch)
    replaced = replaced || (op.path == "/spec/schedulerName" && op.kind == PatchOp::Kind::replace);
  CHECK(replaced);

  Configuration hami;
  hami.scheduler_name = "hami-scheduler";
  CHECK(mutate_and_apply(fixture("single"), hami).pod["spec"]["schedulerName"] == "hami-scheduler");

  Configuration no_takeover;
  no_takeover.webhook.takeover_scheduler_names.clear();
  auto r = mutate_pod(fixture("default_scheduler"), "team-a", no_takeover);
  CHECK(r.allowed);
  CHECK(r.skipped);
  CHECK(r.patch.empty());
}

TEST_CASE("an existing env entry is replaced, not duplicated, our own scheduler name is left alone") {
  auto m = mutate_and_apply(fixture("existing_env"), Configuration{});
  const json& c = container(m.pod, "containers", 0);
  CHECK(env_value(c, "CUDA_TASK_PRIORITY") == "0");
  CHECK(env_count(c, "CUDA_TASK_PRIORITY") == 1);
  CHECK(env_value(c, "HOME") == "/root");
  for (const auto& op : m.result.patch) CHECK(op.path != "/spec/schedulerName");
}

TEST_CASE("runtimeClassName is set when configured and absent") {
  Configuration cfg;
  cfg.webhook.runtime_class_name = "nvidia";
  auto m = mutate_and_apply(fixture("single"), cfg);
  CHECK(m.pod["spec"]["runtimeClassName"] == "nvidia");

  auto pod = fixture("single");
  pod["spec"].as_object()["runtimeClassName"] = "kata-nvidia";
  auto kept = mutate_and_apply(pod, cfg);
  CHECK(kept.pod["spec"]["runtimeClassName"] == "kata-nvidia");
}

TEST_CASE("non-GPU pods and non-GPU configurations are allowed with no patch") {
  auto r = mutate_pod(fixture("no_gpu"), "team-a", Configuration{});
  CHECK(r.allowed);
  CHECK_FALSE(r.gpu_pod);
  CHECK_FALSE(r.skipped);
  CHECK(r.patch.empty());

  // With renamed resources HAMi's names are just other extended resources.
  Configuration renamed;
  renamed.devices.gpu_resource = "example.com/vgpu";
  renamed.devices.memory_resource = "example.com/vgpumem";
  renamed.devices.memory_percentage_resource = "example.com/vgpumem-percentage";
  renamed.devices.cores_resource = "example.com/vgpucores";
  auto other = mutate_pod(fixture("single"), "team-a", renamed);
  CHECK(other.allowed);
  CHECK_FALSE(other.gpu_pod);
  CHECK(other.patch.empty());
}

TEST_CASE("skip rules: other schedulers, ignore labels, ignored namespaces") {
  Configuration cfg;
  cfg.webhook.ignored_namespaces = {"gpu-system", "kube-system"};
  struct Case {
    const char* fixture;
    const char* ns;
    const char* needle;
  };
  for (const Case& c :
       {Case{"skip_other_scheduler", "team-a", "\"volcano\""},
        Case{"skip_label_gpuslice", "team-a", "gpuslice.io/webhook: ignore"},
        Case{"skip_label_hami", "team-a", "hami.io/webhook: ignore"},
        Case{"skip_namespace", "gpu-system", "\"gpu-system\""},
        Case{"skip_namespace", "", "\"gpu-system\""},  // the object's namespace when the request has none
        Case{"single", "kube-system", "\"kube-system\""}}) {
    INFO(c.fixture << " in " << c.ns);
    auto r = mutate_pod(fixture(c.fixture), c.ns, cfg);
    CHECK(r.allowed);
    CHECK(r.skipped);
    CHECK_FALSE(r.gpu_pod);
    CHECK(r.patch.empty());
    CHECK_THAT(r.message, Catch::Contains(c.needle));
  }
  // The other scheduler's pod is skipped before the privileged check, as in HAMi.
  CHECK_THAT(mutate_pod(fixture("skip_other_scheduler"), "team-a", cfg).message,
             Catch::Contains("pod already has different scheduler assigned"));
}

TEST_CASE("policy denials are 403 Forbidden and name the container, field and value") {
  struct Case {
    const char* fixture;
    std::vector<const char*> needles;
  };
  for (const Case& c : {Case{"deny_privileged", {"container \"debug\"", "privileged", "nvidia.com/gpu"}},
                        Case{"deny_node_name", {"pod has node assigned", "spec.nodeName", "\"gpu-node-1\""}},
                        Case{"deny_no_containers", {"pod has no containers", "spec.containers"}}}) {
    INFO(c.fixture);
    auto r = mutate_pod(fixture(c.fixture), "team-a", Configuration{});
    CHECK_FALSE(r.allowed);
    CHECK(r.code == 403);
    CHECK(r.reason == "Forbidden");
    CHECK(r.patch.empty());
    for (const char* n : c.needles) CHECK_THAT(r.message, Catch::Contains(n));
  }
}

TEST_CASE("bad values are 400 BadRequest and name the container, field and value") {
  struct Case {
    const char* fixture;
    std::string message;
  };
  for (const Case& c :
       {Case{"deny_percentage", "container \"cuda\": nvidia.com/gpumem-percentage: \"150\" is outside 0..100"},
        Case{"deny_cores", "init container \"prepare\": nvidia.com/gpucores: \"120\" is above 100"},
        Case{"deny_fraction", "container \"cuda\": nvidia.com/gpumem: \"1500m\" is not a whole number"}}) {
    INFO(c.fixture);
    auto r = mutate_pod(fixture(c.fixture), "team-a", Configuration{});
    CHECK_FALSE(r.allowed);
    CHECK(r.code == 400);
    CHECK(r.reason == "BadRequest");
    CHECK(r.message == c.message);
    CHECK(r.patch.empty());
  }
  auto p = mutate_pod(fixture("deny_priority"), "team-a", Configuration{});
  CHECK_FALSE(p.allowed);
  CHECK(p.code == 400);
  CHECK(p.message == "container \"cuda\": nvidia.com/priority: \"0.5\" is not a whole number");
}

TEST_CASE("parents are created when absent and odd shapes are handled") {
  Configuration cfg;
  cfg.webhook.gpu_core_policy = "disable";
  // No metadata at all, resources and env explicitly null.
  auto pod = boost::json::parse(R"({"apiVersion":"v1","kind":"Pod","spec":{"containers":[
      {"name":"a","env":null,"resources":{"limits":{"nvidia.com/gpumem":"1Ki"}}},
      {"name":"b","resources":null},
      {"name":"c","resources":{"requests":{"nvidia.com/gpucores":"5"}}}]}})")
                 .as_object();
  auto m = mutate_and_apply(pod, cfg);
  CHECK(m.pod["spec"]["schedulerName"] == "gpuslice-scheduler");
  CHECK(env_value(container(m.pod, "containers", 0), "GPU_CORE_UTILIZATION_POLICY") == "disable");
  CHECK(env_value(container(m.pod, "containers", 1), "GPU_CORE_UTILIZATION_POLICY") == "disable");
  CHECK(limits(m.pod, "containers", 0)["nvidia.com/gpu"] == "1");
  CHECK(limits(m.pod, "containers", 2)["nvidia.com/gpu"] == "1");  // limits created beside requests
  PodGpuRequest expect;
  expect.containers = {want("a", false, 1, 1024, std::nullopt, 0), want("b", false, 0, std::nullopt, std::nullopt, 0),
                       want("c", false, 1, std::nullopt, 100, 5)};
  CHECK(annotation_of(m.pod) == expect);
}

TEST_CASE("a stale or forged gpu-request annotation is replaced") {
  auto pod = fixture("single");
  pod["metadata"].as_object()["annotations"] =
      boost::json::object{{std::string(kGpuRequestAnnotation),
                           R"({"containers":[{"name":"cuda","init":false,"gpus":8,"memMiB":1,"cores":1}]})"}};
  auto m = mutate_and_apply(pod, Configuration{});
  PodGpuRequest expect;
  expect.containers = {want("cuda", false, 1, 3000, std::nullopt, 30)};
  CHECK(annotation_of(m.pod) == expect);
  bool replaced = false;
  for (const auto& op : m.result.patch) replaced = replaced || op.kind == PatchOp::Kind::replace;
  CHECK(replaced);
}

TEST_CASE("an explicit zero count is not a GPU request") {
  auto pod = boost::json::parse(R"({"metadata":{"name":"z"},"spec":{"containers":[
      {"name":"a","resources":{"limits":{"nvidia.com/gpu":"0","nvidia.com/gpumem":"100"}}}]}})")
                 .as_object();
  auto r = mutate_pod(pod, "team-a", Configuration{});
  CHECK(r.allowed);
  CHECK_FALSE(r.gpu_pod);
  CHECK(r.patch.empty());
}

TEST_CASE("a schedulerName or nodeName that is not a string is a bad value") {
  auto pod = boost::json::parse(R"({"spec":{"schedulerName":7,"containers":[{"name":"a"}]}})").as_object();
  auto r = mutate_pod(pod, "team-a", Configuration{});
  CHECK_FALSE(r.allowed);
  CHECK(r.code == 400);
  CHECK(r.message == "spec.schedulerName: 7 is not a string");
  auto n = boost::json::parse(R"({"spec":{"nodeName":["x"],"containers":[
      {"name":"a","resources":{"limits":{"nvidia.com/gpu":1}}}]}})")
               .as_object();
  auto rn = mutate_pod(n, "team-a", Configuration{});
  CHECK_FALSE(rn.allowed);
  CHECK(rn.message == "spec.nodeName: [\"x\"] is not a string");
}

TEST_CASE("bad values are reported before policy denials") {
  auto pod = fixture("deny_privileged");
  auto& c = pod["spec"].as_object()["containers"].as_array()[0].as_object();
  c["resources"].as_object()["limits"].as_object()["nvidia.com/priority"] = "high";
  auto r = mutate_pod(pod, "team-a", Configuration{});
  CHECK(r.code == 400);
  CHECK(r.message == "container \"debug\": nvidia.com/priority: \"high\" is not a whole number");
  pod["spec"].as_object()["nodeName"] = 3;
  c["resources"].as_object()["limits"].as_object().erase("nvidia.com/priority");
  auto n = mutate_pod(pod, "team-a", Configuration{});
  CHECK(n.code == 400);
  CHECK(n.message == "spec.nodeName: 3 is not a string");
}

namespace {
// kubectl's client-side dry run keeps YAML numbers as JSON numbers; kube-apiserver sends the canonical
// quantity strings. Rewrites every resource quantity of the pod as a string.
void stringify_quantities(boost::json::object& pod) {
  for (const char* list : {"initContainers", "containers"}) {
    auto* arr = pod["spec"].as_object().if_contains(list);
    if (arr == nullptr) continue;
    for (auto& c : arr->as_array()) {
      auto* res = c.as_object().if_contains("resources");
      if (res == nullptr) continue;
      for (const char* section : {"limits", "requests"}) {
        auto* m = res->as_object().if_contains(section);
        if (m == nullptr) continue;
        for (auto& kv : m->as_object()) {
          if (kv.value().is_int64()) kv.value() = std::to_string(kv.value().get_int64());
        }
      }
    }
  }
}
}  // namespace

TEST_CASE("quantities as strings (as kube-apiserver sends them) give the same decisions") {
  for (const char* name :
       {"single", "exclusive", "memory_only", "percentage", "percentage_full", "several_gpus", "multi_container",
        "init_containers", "type_annotations", "requests_only", "default_scheduler", "existing_env"}) {
    INFO(name);
    auto numbers = mutate_and_apply(fixture(name), Configuration{});
    auto pod = fixture(name);
    stringify_quantities(pod);
    auto strings = mutate_and_apply(pod, Configuration{});
    CHECK(annotation_of(strings.pod) == annotation_of(numbers.pod));
    CHECK(serialize_patch(strings.result.patch) == serialize_patch(numbers.result.patch));
  }
}

TEST_CASE("annotations only the scheduler may write are removed from every pod the webhook sees") {
  auto with_forged = [](boost::json::object pod) {
    pod["metadata"].as_object()["annotations"] =
        boost::json::object{{std::string(kGpuRequestAnnotation),
                             R"({"containers":[{"name":"x","init":false,"gpus":2,"memMiB":1,"cores":1}]})"},
                            {"hami.io/vgpu-devices-to-allocate", "GPU-a,NVIDIA,1,1:;"},
                            {"hami.io/vgpu-node", "gpu-0"},
                            {"hami.io/bind-phase", "allocating"},
                            {"nvidia.com/use-gputype", "A100"}};
    return pod;
  };
  for (const char* name : {"single", "no_gpu"}) {
    INFO(name);
    auto m = mutate_and_apply(with_forged(fixture(name)), Configuration{});
    REQUIRE(m.result.allowed);
    const json& a = m.pod["metadata"]["annotations"];
    CHECK_FALSE(a.contains("hami.io/vgpu-devices-to-allocate"));
    CHECK_FALSE(a.contains("hami.io/vgpu-node"));
    CHECK_FALSE(a.contains("hami.io/bind-phase"));
    CHECK(a["nvidia.com/use-gputype"] == "A100");  // the author's own selection stays
    CHECK(a.contains(std::string(kGpuRequestAnnotation)) == m.result.gpu_pod);
  }
  // Skipped pods (other scheduler) keep everything else but lose gpuslice's annotation too.
  auto other = with_forged(fixture("single"));
  other["spec"].as_object()["schedulerName"] = "volcano";
  auto m = mutate_and_apply(other, Configuration{});
  CHECK(m.result.skipped);
  CHECK_FALSE(m.pod["metadata"]["annotations"].contains(std::string(kGpuRequestAnnotation)));
  CHECK_FALSE(m.pod["metadata"]["annotations"].contains("hami.io/vgpu-node"));
  CHECK(m.pod["spec"]["schedulerName"] == "volcano");
}

TEST_CASE("overwriteEnv: containers without a GPU get NVIDIA_VISIBLE_DEVICES=none, GPU containers do not") {
  Configuration cfg;
  cfg.webhook.overwrite_env = true;
  auto pod = boost::json::parse(R"({"metadata":{"name":"o"},"spec":{
      "initContainers":[{"name":"setup"}],
      "containers":[{"name":"gpu","resources":{"limits":{"nvidia.com/gpu":"1"}}},
                    {"name":"log"},
                    {"name":"own","env":[{"name":"NVIDIA_VISIBLE_DEVICES","value":"all"}]}]}})")
                 .as_object();
  auto m = mutate_and_apply(pod, cfg);
  REQUIRE(m.result.gpu_pod);
  CHECK(env_value(container(m.pod, "initContainers", 0), "NVIDIA_VISIBLE_DEVICES") == "none");
  CHECK(env_value(container(m.pod, "containers", 0), "NVIDIA_VISIBLE_DEVICES") == "<absent>");
  CHECK(env_value(container(m.pod, "containers", 1), "NVIDIA_VISIBLE_DEVICES") == "none");
  CHECK(env_value(container(m.pod, "containers", 2), "NVIDIA_VISIBLE_DEVICES") == "all");  // the author's own
  // A CPU-only pod the webhook sees: every container.
  auto cpu = mutate_and_apply(fixture("no_gpu"), cfg);
  CHECK_FALSE(cpu.result.gpu_pod);
  CHECK(env_value(container(cpu.pod, "containers", 0), "NVIDIA_VISIBLE_DEVICES") == "none");
  // Off (the default): untouched.
  CHECK(mutate_pod(fixture("no_gpu"), "team-a", Configuration{}).patch.empty());
}

TEST_CASE("a count in requests only gets its limit: kubelet allocates by the limit") {
  auto pod = boost::json::parse(R"({"metadata":{"name":"r"},"spec":{"containers":[
      {"name":"a","resources":{"requests":{"nvidia.com/gpu":"2","nvidia.com/gpumem":"100"}}}]}})")
                 .as_object();
  auto m = mutate_and_apply(pod, Configuration{});
  CHECK(limits(m.pod, "containers", 0)["nvidia.com/gpu"] == "2");
}
