#pragma once
// Shared oracle of the webhook fuzz targets: a policy result must be internally consistent, its patch must
// apply with nlohmann-json (independent RFC 6902) and with gpuslice::apply_patch to the same document, and
// the policy run again on the patched pod must change nothing.

#include "common/gpu_request.h"
#include "common/json_patch.h"
#include "webhook/policy.h"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace gpuslice::webhook::fuzzing {

[[noreturn]] inline void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "webhook fuzz oracle: %s\n%s\n", what, detail.c_str());
  std::abort();
}

inline void check_mutation(const boost::json::object& pod, std::string_view ns, const Configuration& config,
                           const MutationResult& r) {
  if (!r.allowed) {
    if (r.code != 400 && r.code != 403) fail("denial code is not 400 or 403", std::to_string(r.code));
    if (r.message.empty()) fail("denial without a message", "");
    if (!r.patch.empty()) fail("denial carries a patch", serialize_patch(r.patch));
    return;
  }
  // A skipped or GPU-less pod is only cleaned: annotations nobody but the scheduler may write are removed and,
  // with overwriteEnv on a GPU-less pod, its containers are told to see no card.
  if (r.skipped || !r.gpu_pod) {
    for (const PatchOp& op : r.patch) {
      bool annotation_removal = op.kind == PatchOp::Kind::remove && op.path.rfind("/metadata/annotations/", 0) == 0;
      bool env_op = !r.skipped && config.webhook.overwrite_env && op.path.find("/env") != std::string::npos;
      if (!annotation_removal && !env_op) fail("skipped or GPU-less pod carries a mutation", serialize_patch(r.patch));
    }
  }
  if (r.patch.empty()) return;

  const std::string before = boost::json::serialize(pod);
  nlohmann::json doc = nlohmann::json::parse(before, nullptr, false);
  if (doc.is_discarded()) return;  // a number nlohmann cannot read back; not the policy's concern
  const std::string patch_text = serialize_patch(r.patch);
  nlohmann::json applied;
  try {
    applied = doc.patch(nlohmann::json::parse(patch_text));
  } catch (const std::exception& e) {
    fail("nlohmann cannot apply the patch", std::string(e.what()) + "\npatch: " + patch_text + "\npod: " + before);
  }
  auto ours = apply_patch(boost::json::value(pod), r.patch);
  if (!ours.ok()) fail("apply_patch rejects the patch", ours.message() + "\npatch: " + patch_text);
  if (nlohmann::json::parse(boost::json::serialize(ours.value()), nullptr, false) != applied) {
    fail("apply_patch and nlohmann disagree", "patch: " + patch_text + "\npod: " + before);
  }

  boost::system::error_code ec;
  boost::json::value again_doc = boost::json::parse(applied.dump(), ec);
  if (ec || !again_doc.is_object()) return;
  MutationResult again = mutate_pod(again_doc.get_object(), ns, config);
  if (!again.allowed || again.gpu_pod != r.gpu_pod || !again.patch.empty()) {
    fail("second pass is not a no-op", "first: " + patch_text + "\nsecond: " + serialize_patch(again.patch) +
                                           "\nmessage: " + again.message + "\npod: " + before);
  }
  // metadata may be anything in a fuzzed pod (a real API server sends an object); only an object has annotations.
  nlohmann::json annotations = nlohmann::json::object();
  if (auto m = applied.find("metadata"); m != applied.end() && m->is_object()) {
    if (auto a = m->find("annotations"); a != m->end() && a->is_object()) {
      annotations = *a;
    }
  }
  const std::string key(kGpuRequestAnnotation);
  if (!r.gpu_pod) {
    if (annotations.contains(key)) {
      fail("GPU-less or skipped pod keeps gpuslice.io/gpu-request", applied.dump());
    }
    return;
  }
  // The annotation is what the scheduler compares with: it must decode to the pod's own request, and the
  // mutated spec must give the same request under kubelet's rule (every GPU container has its count limit).
  if (!annotations.contains(key) || !annotations[key].is_string()) {
    fail("GPU pod without a string gpuslice.io/gpu-request annotation after the patch", applied.dump());
  }
  auto decoded = decode_gpu_request(annotations[key].get<std::string>());
  auto expected = extract_gpu_request(again_doc.get_object(), config.devices);
  auto kubelet = extract_gpu_request(again_doc.get_object(), config.devices, CountRule::kubelet);
  if (!decoded.ok() || !expected.ok() || !(decoded.value() == expected.value())) {
    fail("annotation does not decode to the pod's request", applied.dump());
  }
  if (!kubelet.ok() || !(kubelet.value() == expected.value())) {
    fail("mutated pod's request under kubelet's rule differs", applied.dump());
  }
}

/// A configuration with every knob away from its default, so the fuzzers reach those branches too.
inline Configuration knobs_config() {
  Configuration c;
  c.scheduler_name = "hami-scheduler";
  c.webhook.takeover_scheduler_names = {"default-scheduler", "kube-batch"};
  c.webhook.ignored_namespaces = {"kube-system"};
  c.webhook.runtime_class_name = "nvidia";
  c.webhook.gpu_core_policy = "force";
  c.webhook.overwrite_env = true;
  c.devices.memory_factor = 4;
  c.devices.default_memory_mib = 1024;
  c.devices.default_cores = 5;
  c.devices.default_gpu_num = 2;
  return c;
}

}  // namespace gpuslice::webhook::fuzzing
