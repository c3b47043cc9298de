// Fuzz target: HTTP body bytes -> review(). Oracle: never crashes; anything but 200 is a plain-text 4xx/5xx
// marked rejected; a 200 reply is an AdmissionReview in the request's apiVersion echoing its uid, and a
// patch in it decodes from base64 and applies with nlohmann-json (plus the policy oracle of
// webhook_fuzz_oracle.h on the decoded pod); and every reply, 400s included, is byte for byte the reference's
// (tests/webhook/review_reference.h: the whole pod, the policy, boost::json::serialize).
#include "common/base64.h"
#include "tests/webhook/review_reference.h"
#include "webhook/admission.h"
#include "webhook_fuzz_oracle.h"

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpuslice;
  using namespace gpuslice::webhook;
  using fuzzing::fail;
  static const Configuration config;
  std::string_view body(reinterpret_cast<const char*>(data), size);
  ReviewReply reply = review(body, config);
  static const Configuration knobs = fuzzing::knobs_config();
  for (const Configuration* c : {&config, &knobs}) {
    ReviewReply fast = c == &config ? reply : review(body, *c);
    ReviewReply ref = reference::review(body, *c);
    if (fast.http_status != ref.http_status || fast.outcome != ref.outcome || fast.body != ref.body ||
        fast.content_type != ref.content_type) {
      fail("review() differs from the reference", fast.body + "\n--- reference:\n" + ref.body);
    }
  }
  if (reply.http_status != 200) {
    if (reply.http_status != 400) fail("unexpected HTTP status", std::to_string(reply.http_status) + " " + reply.body);
    if (reply.outcome != ReviewOutcome::rejected) fail("a 400 that is not rejected", reply.body);
    if (reply.body.size() < 2 || reply.content_type.rfind("text/plain", 0) != 0)
      fail("400 without a reason", reply.body);
    return 0;
  }
  auto req = decode_admission_review(body);
  if (!req.ok()) fail("200 for a body the decoder rejects", req.message());
  nlohmann::json out = nlohmann::json::parse(reply.body, nullptr, false);
  if (out.is_discarded() || !out.is_object()) fail("200 reply is not JSON", reply.body);
  if (out.value("apiVersion", "") != req->api_version || out.value("kind", "") != "AdmissionReview") {
    fail("reply is not an AdmissionReview in the request's version", reply.body);
  }
  const nlohmann::json& resp = out["response"];
  if (!resp.is_object() || resp.value("uid", "") != req->uid) fail("reply does not echo the uid", reply.body);
  if (!resp.contains("allowed") || !resp["allowed"].is_boolean()) fail("reply without allowed", reply.body);
  bool allowed = resp["allowed"].get<bool>();
  if (!allowed) {
    if (reply.outcome != ReviewOutcome::denied) fail("denied reply with another outcome", reply.body);
    int code = resp["status"].value("code", 0);
    if (code != 400 && code != 403) fail("denial code", reply.body);
  }
  if (!resp.contains("patch")) {
    if (reply.outcome == ReviewOutcome::patched) fail("patched outcome without a patch", reply.body);
    return 0;
  }
  if (!allowed || resp.value("patchType", "") != "JSONPatch") fail("patch without allowed/patchType", reply.body);
  auto raw = base64_decode(resp["patch"].get<std::string>());
  if (!raw) fail("patch is not base64", reply.body);
  nlohmann::json patch = nlohmann::json::parse(*raw, nullptr, false);
  if (patch.is_discarded() || !patch.is_array() || patch.empty()) fail("patch is not a JSON array", *raw);
  if (!req->object.is_object()) fail("patch for an object that is not a pod", reply.body);
  nlohmann::json pod = nlohmann::json::parse(boost::json::serialize(req->object), nullptr, false);
  if (pod.is_discarded()) return 0;
  try {
    (void)pod.patch(patch);
  } catch (const std::exception& e) {
    fail("nlohmann cannot apply the reply's patch", std::string(e.what()) + "\n" + *raw);
  }
  const boost::json::object& obj = req->object.get_object();
  fuzzing::check_mutation(obj, req->namespace_, config, mutate_pod(obj, req->namespace_, config));
  return 0;
}
