// The AdmissionReview codec and review(): v1 and v1beta1 round trips, uid echo, outcomes, and every
// malformed-body case (HTTP 400 with a plain-text reason).
#include "review_reference.h"
#include "webhook_test_support.h"

#include <filesystem>

using namespace gpuslice;
using namespace gpuslice::webhook;
using namespace gpuslice::webhook::testing;
using nlohmann::json;

namespace {

// Checks the envelope of a 200 reply and returns its response object.
json response_of(const ReviewReply& reply, const std::string& api_version, const std::string& uid) {
  REQUIRE(reply.http_status == 200);
  CHECK(reply.content_type == "application/json");
  json body = json::parse(reply.body);
  CHECK(body["apiVersion"] == api_version);
  CHECK(body["kind"] == "AdmissionReview");
  REQUIRE(body.contains("response"));
  CHECK(body["response"]["uid"] == uid);
  CHECK_FALSE(body.contains("request"));
  return body["response"];
}

json decode_patch(const json& response) {
  REQUIRE(response["patchType"] == "JSONPatch");
  auto raw = base64_decode(response["patch"].get<std::string>());
  REQUIRE(raw.has_value());
  return json::parse(*raw);
}

}  // namespace

TEST_CASE("v1 and v1beta1 reviews are answered in their own version with the uid echoed") {
  for (std::string api : {"admission.k8s.io/v1", "admission.k8s.io/v1beta1"}) {
    INFO(api);
    std::string uid = "uid-" + api.substr(api.rfind('/') + 1);
    std::string pod = fixture_text("init_containers");
    ReviewReply reply = review(make_review(pod, api, uid), Configuration{});
    CHECK(reply.outcome == ReviewOutcome::patched);
    json response = response_of(reply, api, uid);
    CHECK(response["allowed"] == true);
    json patched = json::parse(pod).patch(decode_patch(response));
    CHECK(patched["spec"]["schedulerName"] == "gpuslice-scheduler");
    CHECK(annotation_of(patched).containers.size() == 3);
    CHECK(patched["spec"]["initContainers"][1]["resources"]["limits"]["nvidia.com/gpucores"] == "100");
  }
}

TEST_CASE("decode_admission_review reads the request fields") {
  auto r = decode_admission_review(make_review(fixture_text("single"), "admission.k8s.io/v1beta1", "abc-123"));
  REQUIRE(r.ok());
  CHECK(r->api_version == "admission.k8s.io/v1beta1");
  CHECK(r->uid == "abc-123");
  CHECK(r->kind == "Pod");
  CHECK(r->namespace_ == "team-a");
  CHECK(r->operation == "CREATE");
  CHECK_FALSE(r->dry_run);
  REQUIRE(r->object.is_object());
  CHECK(r->object.at_pointer("/metadata/name") == "single");
}

TEST_CASE("encode_admission_response carries denials as status and patches as base64 JSONPatch") {
  AdmissionRequest req;
  req.api_version = "admission.k8s.io/v1";
  req.uid = "u-1";
  MutationResult denied;
  denied.allowed = false;
  denied.code = 403;
  denied.reason = "Forbidden";
  denied.message = "container \"x\" is privileged";
  json d = json::parse(encode_admission_response(req, denied));
  CHECK(d["response"]["allowed"] == false);
  CHECK(d["response"]["status"]["code"] == 403);
  CHECK(d["response"]["status"]["reason"] == "Forbidden");
  CHECK(d["response"]["status"]["message"] == "container \"x\" is privileged");
  CHECK_FALSE(d["response"].contains("patch"));

  MutationResult patched;
  patched.patch.push_back({PatchOp::Kind::add, "/spec/schedulerName", boost::json::value("s")});
  json p = json::parse(encode_admission_response(req, patched));
  CHECK(p["response"]["allowed"] == true);
  CHECK(decode_patch(p["response"]) == json::parse(R"([{"op":"add","path":"/spec/schedulerName","value":"s"}])"));

  MutationResult plain;
  json a = json::parse(encode_admission_response(req, plain));
  CHECK(a["response"]["allowed"] == true);
  CHECK_FALSE(a["response"].contains("patch"));
  CHECK_FALSE(a["response"].contains("patchType"));
}

TEST_CASE("denials and skips travel in a 200 AdmissionReview") {
  Configuration cfg;
  ReviewReply denied = review(make_review(fixture_text("deny_privileged"), "admission.k8s.io/v1", "d1"), cfg);
  CHECK(denied.outcome == ReviewOutcome::denied);
  json r = response_of(denied, "admission.k8s.io/v1", "d1");
  CHECK(r["allowed"] == false);
  CHECK(r["status"]["code"] == 403);
  CHECK(r["status"]["reason"] == "Forbidden");
  CHECK_THAT(r["status"]["message"].get<std::string>(), Catch::Contains("privileged"));
  CHECK_FALSE(r.contains("patch"));

  ReviewReply bad = review(make_review(fixture_text("deny_percentage"), "admission.k8s.io/v1beta1", "d2"), cfg);
  CHECK(bad.outcome == ReviewOutcome::denied);
  json b = response_of(bad, "admission.k8s.io/v1beta1", "d2");
  CHECK(b["status"]["code"] == 400);
  CHECK(b["status"]["reason"] == "BadRequest");

  ReviewReply skipped = review(make_review(fixture_text("skip_other_scheduler"), "admission.k8s.io/v1", "s1"), cfg);
  CHECK(skipped.outcome == ReviewOutcome::skipped);
  json s = response_of(skipped, "admission.k8s.io/v1", "s1");
  CHECK(s["allowed"] == true);
  CHECK_FALSE(s.contains("patch"));

  ReviewReply plain = review(make_review(fixture_text("no_gpu"), "admission.k8s.io/v1", "n1"), cfg);
  CHECK(plain.outcome == ReviewOutcome::allowed);
  CHECK_FALSE(response_of(plain, "admission.k8s.io/v1", "n1").contains("patch"));
}

TEST_CASE("an object that is not a Pod is allowed unchanged") {
  ReviewReply reply =
      review(make_review(fixture_text("deployment"), "admission.k8s.io/v1", "dep-1", "Deployment"), Configuration{});
  CHECK(reply.outcome == ReviewOutcome::allowed);
  json r = response_of(reply, "admission.k8s.io/v1", "dep-1");
  CHECK(r["allowed"] == true);
  CHECK_FALSE(r.contains("patch"));
  CHECK_FALSE(r.contains("patchType"));
}

TEST_CASE("only CREATE is mutated: an UPDATE of a bound GPU pod is allowed unchanged") {
  auto pod = fixture("single");
  pod["spec"].as_object()["nodeName"] = "gpu-node-1";
  std::string body = make_review(boost::json::serialize(pod), "admission.k8s.io/v1", "up-1");
  ReviewReply create = review(body, Configuration{});
  CHECK(create.outcome == ReviewOutcome::denied);  // the same object on CREATE is denied (node assigned)
  std::string update = body;
  const std::string op = "\"operation\":\"CREATE\"";
  update.replace(update.find(op), op.size(), "\"operation\":\"UPDATE\"");
  ReviewReply reply = review(update, Configuration{});
  CHECK(reply.outcome == ReviewOutcome::allowed);
  json r = response_of(reply, "admission.k8s.io/v1", "up-1");
  CHECK(r["allowed"] == true);
  CHECK_FALSE(r.contains("patch"));
}

TEST_CASE("malformed bodies get HTTP 400 with a plain-text reason") {
  const std::string pod = fixture_text("single");
  struct Case {
    std::string name;
    std::string body;
    std::string reason;
  };
  std::string deep(200, '[');
  deep += std::string(200, ']');
  std::vector<Case> cases = {
      {"empty body", "", "malformed JSON at byte 0: incomplete JSON"},
      {"truncated JSON", make_review(pod).substr(0, 100), "malformed JSON at byte 100: incomplete JSON"},
      {"trailing garbage", make_review(pod) + " x",
       "malformed JSON at byte " + std::to_string(make_review(pod).size() + 1) + ": extra data"},
      {"invalid UTF-8", "{\"kind\":\"\xff\"}", "malformed JSON at byte 9: syntax error"},
      {"nesting too deep", deep, "malformed JSON at byte 64: too deep"},
      {"not an object", "[1,2,3]", "not an AdmissionReview: the body is a JSON array"},
      {"a Pod, not a review", pod, "not an AdmissionReview: kind \"Pod\""},
      {"no kind", R"({"apiVersion":"admission.k8s.io/v1","request":{}})", "not an AdmissionReview: kind is missing"},
      {"unsupported apiVersion", R"({"apiVersion":"admission.k8s.io/v2","kind":"AdmissionReview","request":{}})",
       "unsupported apiVersion \"admission.k8s.io/v2\""},
      {"no apiVersion", R"({"kind":"AdmissionReview","request":{}})", "unsupported apiVersion: apiVersion is missing"},
      {"missing request", R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"})", "missing request"},
      {"null request", R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":null})",
       "missing request"},
      {"request not an object", R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":"x"})",
       "request is a JSON string, not an object"},
      {"missing uid",
       R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"kind":{"kind":"Pod"},"object":{}}})",
       "missing request.uid"},
      {"empty uid", R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"","object":{}}})",
       "missing request.uid"},
      {"missing object",
       R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"kind":"Pod"}}})",
       "missing request.object"},
      {"null object", make_review("null"), "missing request.object"},
      {"a Pod that is not an object", make_review("\"pod\""), "request.object is a JSON string, not a Pod object"},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    ReviewReply reply = review(c.body, Configuration{});
    CHECK(reply.http_status == 400);
    CHECK(reply.outcome == ReviewOutcome::rejected);
    CHECK_THAT(reply.content_type, Catch::StartsWith("text/plain"));
    CHECK_THAT(reply.body, Catch::StartsWith(c.reason));
    if (c.name != "a Pod that is not an object") {
      auto decoded = decode_admission_review(c.body);
      REQUIRE_FALSE(decoded.ok());
      CHECK_THAT(decoded.message(), Catch::StartsWith(c.reason));
    }
  }
}

TEST_CASE("duplicate keys in the review's own objects get 400 naming the key; inside the pod they do not") {
  const std::string pod = boost::json::serialize(fixture("single"));
  const std::string request = R"({"uid":"u1","kind":{"kind":"Pod"},"operation":"CREATE","object":)" + pod + "}";
  const std::string head = R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview",)";
  // Boost.JSON keeps the last of two equal keys; answering for either would be a guess, so neither is.
  const std::pair<std::string, std::string> cases[] = {
      {head + R"("request":)" + request + R"(,"request":)" + request + "}", "duplicate key \"request\""},
      {R"({"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":)" + request +
           "}",
       "duplicate key \"kind\""},
      {head + R"("request":{"uid":"u1","uid":"u2","kind":{"kind":"Pod"},"operation":"CREATE","object":)" + pod + "}}",
       "duplicate key \"request.uid\""},
      {head + R"("request":{"uid":"u1","kind":{"kind":"Pod"},"operation":"CREATE","object":)" + pod + R"(,"object":)" +
           pod + "}}",
       "duplicate key \"request.object\""},
  };
  for (const auto& [body, reason] : cases) {
    INFO(body.substr(0, 120));
    ReviewReply reply = review(body, Configuration{});
    CHECK(reply.http_status == 400);
    CHECK(reply.outcome == ReviewOutcome::rejected);
    CHECK_THAT(reply.body, Catch::StartsWith("not an AdmissionReview: " + reason));
    auto decoded = decode_admission_review(body);
    REQUIRE_FALSE(decoded.ok());
    CHECK(decoded.message() == "not an AdmissionReview: " + reason);
  }
  // The same key in different objects, and duplicates deeper down (the pod is the API server's, decoded by it
  // already), are not the review's concern.
  std::string nested = pod;
  nested.insert(nested.find('{') + 1, R"("x":{"a":1,"a":2},)");
  ReviewReply ok =
      review(head + R"("request":{"uid":"u1","kind":{"kind":"Pod"},"operation":"CREATE","object":)" + nested + "}}",
             Configuration{});
  CHECK(ok.http_status == 200);
  CHECK(ok.outcome == ReviewOutcome::patched);
}

TEST_CASE("a review larger than the stack buffer still decodes (heap spill)") {
  auto pod = fixture("single");
  boost::json::object labels;
  for (int i = 0; i < 2000; ++i) labels["label-" + std::to_string(i)] = std::string(20, 'v');
  pod["metadata"].as_object()["labels"] = std::move(labels);
  ReviewReply reply = review(make_review(boost::json::serialize(pod)), Configuration{});
  CHECK(reply.outcome == ReviewOutcome::patched);
  CHECK(reply.body.size() < 4096);  // the reply carries the patch, not the pod
}

TEST_CASE("outcome names are the metric label values") {
  CHECK(std::string(outcome_name(ReviewOutcome::patched)) == "patched");
  CHECK(std::string(outcome_name(ReviewOutcome::allowed)) == "allowed");
  CHECK(std::string(outcome_name(ReviewOutcome::skipped)) == "skipped");
  CHECK(std::string(outcome_name(ReviewOutcome::denied)) == "denied");
  CHECK(std::string(outcome_name(ReviewOutcome::rejected)) == "rejected");
}

namespace {

// Replaces every occurrence of `from` in `text` by `to`.
std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

Configuration knobs() {
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
  return c;
}

void check_same_as_reference(const std::string& body, const Configuration& config) {
  ReviewReply fast = review(body, config);
  ReviewReply ref = reference::review(body, config);
  CHECK(fast.http_status == ref.http_status);
  CHECK(fast.content_type == ref.content_type);
  CHECK(fast.outcome == ref.outcome);
  CHECK(fast.body == ref.body);
}

}  // namespace

TEST_CASE("review() answers byte for byte as the whole-document decode, the policy and boost::json::serialize") {
  const Configuration configs[] = {Configuration{}, knobs()};
  std::vector<std::string> pods;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(GPUSLICE_SOURCE_DIR) + "/tests/webhook/testdata")) {
    if (e.path().extension() == ".json") pods.push_back(read_text(e.path().string()));
  }
  REQUIRE(pods.size() > 20);
  const std::string escaped_key(5000, 'k');
  for (const std::string& pod : pods) {
    // Keys the parse must recognise through escapes (and a long escaped key the parser hands over in parts, in a
    // dropped member and in a kept one), duplicated members (the last wins, kept or dropped), control characters
    // and quotes in the echoed strings.
    std::string escaped = replace_all(
        replace_all(replace_all(pod, R"("spec":)", R"("\u0073pec":)"), R"("containers":)", R"("contai\u006eers":)"),
        R"("metadata":)", R"("met\u0061data":)");
    escaped.insert(escaped.find('{') + 1, "\"" + escaped_key + "\\n\":[1,{\"a\":\"b\"}],");
    std::string duplicated = pod;
    duplicated.insert(duplicated.find('{') + 1,
                      R"("spec":{"containers":[{"name":"x","image":"y"}]},"status":1,"status":{"a":[]},)");
    for (const std::string& object : {pod, escaped, duplicated}) {
      for (const Configuration& config : configs) {
        INFO(object.substr(0, 200));
        check_same_as_reference(make_review(object), config);
        check_same_as_reference(
            make_review(object, "admission.k8s.io/v1beta1", R"(u\"\\\u0001\u001f\n\t\u007f\/é)", "Pod", ""), config);
        check_same_as_reference(make_review(object, "admission.k8s.io/v1", "u-3", "Pod", "kube-system"), config);
        check_same_as_reference(make_review(object, "admission.k8s.io/v1", "u-4", "Deployment"), config);
        check_same_as_reference(replace_all(make_review(object), R"("operation":"CREATE")", R"("operation":"UPDATE")"),
                                config);
        check_same_as_reference(replace_all(make_review(object), R"("request":)", R"("req\u0075est":)"), config);
      }
    }
  }
}
