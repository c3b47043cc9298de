// The decisions of `gpuslice doctor`: error mapping, each check's verdict, the report format.
#include "doctor/diagnose.h"
#include "certs/certs.h"
#include "common/base64.h"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <catch2/catch.hpp>

#include <chrono>

namespace json = boost::json;
using namespace gpuslice::doctor;
using Catch::Matchers::Contains;

namespace {

constexpr int64_t kNow = 1796000000;  // 2026-11-30, an arbitrary fixed "now"

json::object obj(std::string_view text) {
  return json::parse(text).as_object();
}

json::object webhook_config(std::string_view client_config) {
  return obj(std::string(R"({"apiVersion":"admissionregistration.k8s.io/v1","kind":"MutatingWebhookConfiguration",
    "metadata":{"name":"gpuslice"},"webhooks":[{"name":"mutate.gpuslice.io","failurePolicy":"Ignore",
    "timeoutSeconds":5,"clientConfig":)") +
             std::string(client_config) + "}]}");
}

json::object service_config(std::string_view ca_b64, int port = 9443) {
  return webhook_config(R"({"service":{"namespace":"gpuslice-system","name":"gpuslice-webhook","port":)" +
                        std::to_string(port) + R"(,"path":"/mutate"},"caBundle":")" + std::string(ca_b64) + "\"}");
}

json::object external_name_service(int port = 9443) {
  return obj(R"({"kind":"Service","metadata":{"name":"gpuslice-webhook","namespace":"gpuslice-system"},
    "spec":{"type":"ExternalName","externalName":"localhost","ports":[{"name":"webhook","port":)" +
             std::to_string(port) + "}]}}");
}

gpuslice::certs::Bundle bundle_for(std::string service, std::string ns = "gpuslice-system", int64_t nb = kNow - 3600) {
  gpuslice::certs::ServingRequest req;
  req.service = std::move(service);
  req.namespace_ = std::move(ns);
  req.days = 30;
  auto b = gpuslice::certs::generate(req, nb);
  REQUIRE(b.ok());
  return *b;
}

WebhookRef ref_with_ca(const std::string& ca_pem) {
  WebhookRef r;
  r.entry = "mutate.gpuslice.io";
  r.service_namespace = "gpuslice-system";
  r.service_name = "gpuslice-webhook";
  r.port = 9443;
  r.ca_bundle_pem = ca_pem;
  return r;
}

json::object gpu_node(std::string name, std::string reg, std::string alloc) {
  json::object n = obj(R"({"kind":"Node","metadata":{"annotations":{}},"status":{"allocatable":{}}})");
  n["metadata"].as_object()["name"] = name;
  if (!reg.empty()) {
    n["metadata"].as_object()["annotations"].as_object()["hami.io/node-nvidia-register"] = reg;
  }
  if (!alloc.empty()) {
    n["status"].as_object()["allocatable"].as_object()["nvidia.com/gpu"] = alloc;
  }
  return n;
}

const std::string kA100 =
    R"([{"id":"GPU-a-0","index":0,"count":10,"devmem":81920,"devcore":100,"type":"NVIDIA A100-SXM4-80GB","health":true}])";

const std::string kGuardMessage =
    "admission webhook denied: ValidatingAdmissionPolicy 'gpuslice-scheduler-guard' with binding "
    "'gpuslice-scheduler-guard' denied request: gpuslice-scheduler-guard: refused GPU pod default/x";

}  // namespace

TEST_CASE("admission errors map to named causes", "[doctor][diagnose]") {
  Names names;
  auto cause_of = [&](int code, std::string reason, std::string msg) {
    return diagnose_admission_error(ApiError{code, std::move(reason), std::move(msg)}, names).cause;
  };
  CHECK_THAT(
      cause_of(500, "InternalError",
               "Internal error occurred: failed calling webhook \"mutate.gpuslice.io\": failed to call webhook: "
               "Post \"https://gpuslice-webhook.gpuslice-system.svc:9443/mutate?timeout=5s\": No agent available"),
      Contains("Konnectivity agent not connected"));
  CHECK_THAT(cause_of(500, "InternalError",
                      "failed calling webhook: tls: failed to verify certificate: x509: certificate signed by unknown "
                      "authority"),
             Contains("caBundle mismatch"));
  CHECK_THAT(cause_of(500, "InternalError",
                      "failed calling webhook: tls: failed to verify certificate: x509: certificate is valid for "
                      "localhost, not gpuslice-webhook.gpuslice-system.svc"),
             Contains("SAN mismatch"));
  CHECK_THAT(cause_of(500, "InternalError", "x509: certificate has expired or is not yet valid"), Contains("expired"));
  CHECK_THAT(cause_of(500, "InternalError", "dial tcp 127.0.0.1:9443: connect: connection refused"),
             Contains("not listening"));
  CHECK_THAT(cause_of(500, "InternalError", "Post \"https://x.svc:9443/mutate\": context deadline exceeded"),
             Contains("did not answer within timeoutSeconds"));
  CHECK_THAT(cause_of(403, "Invalid", kGuardMessage), Contains("webhook was not reached"));
  CHECK_THAT(cause_of(403, "Invalid", kGuardMessage), Contains("held back"));
  CHECK_THAT(cause_of(403, "Forbidden", "pods is forbidden: User \"x\" cannot create resource \"pods\""),
             Contains("may not create pods"));
  CHECK_THAT(cause_of(404, "NotFound", "namespaces \"nope\" not found"), Contains("does not exist"));
  CHECK_THAT(cause_of(0, gpuslice::kube::kReasonTransport, "connect 127.0.0.1:16443: Connection refused"),
             Contains("not reachable"));
  CHECK_THAT(cause_of(418, "Teapot", "short and stout"), Contains("unrecognised"));
  // Every diagnosis carries a fix.
  CHECK_FALSE(diagnose_admission_error(ApiError{500, "", "No agent available"}, names).fix.empty());
}

TEST_CASE("webhook-config: present, service-referenced, caBundle, Service port", "[doctor][webhook]") {
  Names names;
  std::optional<WebhookRef> ref;
  auto b = gpuslice::certs::generate({.service = "gpuslice-webhook", .namespace_ = "gpuslice-system"}, kNow);
  REQUIRE(b.ok());
  std::string ca_b64 = gpuslice::base64_encode(b->ca_cert_pem);

  SECTION("missing configuration") {
    auto r = check_webhook_config(std::nullopt, std::nullopt, names, ref);
    CHECK(r.verdict == Verdict::fail);
    CHECK_THAT(r.evidence.at(0), Contains("not found"));
    CHECK_FALSE(ref.has_value());
  }
  SECTION("healthy") {
    auto r = check_webhook_config(service_config(ca_b64), external_name_service(), names, ref);
    CHECK(r.verdict == Verdict::pass);
    REQUIRE(ref.has_value());
    CHECK(ref->server_name() == "gpuslice-webhook.gpuslice-system.svc");
    CHECK(ref->ca_bundle_pem == b->ca_cert_pem);
    CHECK(ref->failure_policy == "Ignore");
    CHECK_THAT(r.evidence.at(0), Contains("service gpuslice-system/gpuslice-webhook:9443/mutate"));
    CHECK_THAT(r.evidence.at(1), Contains("ExternalName localhost"));
  }
  SECTION("empty caBundle") {
    auto r = check_webhook_config(service_config(""), external_name_service(), names, ref);
    CHECK(r.verdict == Verdict::fail);
    CHECK_THAT(r.cause, Contains("caBundle missing"));
  }
  SECTION("caBundle not base64") {
    auto r = check_webhook_config(service_config("!!!"), external_name_service(), names, ref);
    CHECK(r.verdict == Verdict::fail);
    CHECK_THAT(r.cause, Contains("not valid base64"));
  }
  SECTION("url mode bypasses the tunnel") {
    auto r =
        check_webhook_config(webhook_config(R"({"url":"https://127.0.0.1:9443/mutate","caBundle":")" + ca_b64 + "\"}"),
                             std::nullopt, names, ref);
    CHECK(r.verdict == Verdict::fail);
    CHECK_THAT(r.cause, Contains("bypasses the Konnectivity tunnel"));
  }
  SECTION("Service missing") {
    auto r = check_webhook_config(service_config(ca_b64), std::nullopt, names, ref);
    CHECK(r.verdict == Verdict::fail);
    CHECK_THAT(r.cause, Contains("Service does not exist"));
  }
  SECTION("Service port differs from clientConfig.service.port") {
    auto r = check_webhook_config(service_config(ca_b64, 443), external_name_service(9443), names, ref);
    CHECK(r.verdict == Verdict::fail);
    CHECK_THAT(r.cause, Contains("no port 443"));
  }
  SECTION("named entry that does not exist") {
    names.webhook = "other.example.com";
    auto parsed = parse_webhook_config(service_config(ca_b64), names);
    REQUIRE_FALSE(parsed.ok());
    CHECK_THAT(parsed.message(), Contains("mutate.gpuslice.io"));
  }
}

TEST_CASE("serving-cert: chain, SAN, expiry against the caBundle", "[doctor][tls]") {
  auto good = bundle_for("gpuslice-webhook");

  SECTION("chains and names the Service") {
    auto r = check_serving_cert(ref_with_ca(good.ca_cert_pem), good.cert_pem, "test", kNow);
    INFO(format_report("t", {r}));
    CHECK(r.verdict == Verdict::pass);
    CHECK_THAT(r.evidence.back(), Contains("SAN gpuslice-webhook.gpuslice-system.svc: present"));
  }
  SECTION("signed by another CA: caBundle mismatch") {
    auto other = bundle_for("gpuslice-webhook");
    auto r = check_serving_cert(ref_with_ca(other.ca_cert_pem), good.cert_pem, "test", kNow);
    CHECK(r.verdict == Verdict::fail);
    CHECK_THAT(r.cause, Contains("caBundle mismatch"));
  }
  SECTION("certificate for another Service: SAN mismatch") {
    auto wrong = bundle_for("other-svc");
    auto r = check_serving_cert(ref_with_ca(wrong.ca_cert_pem), wrong.cert_pem, "test", kNow);
    CHECK(r.verdict == Verdict::fail);
    CHECK_THAT(r.cause, Contains("SAN mismatch"));
    CHECK_THAT(r.cause, Contains("gpuslice-webhook.gpuslice-system.svc"));
  }
  SECTION("expired") {
    auto r = check_serving_cert(ref_with_ca(good.ca_cert_pem), good.cert_pem, "test", kNow + 40 * 86400);
    CHECK(r.verdict == Verdict::fail);
    CHECK_THAT(r.cause, Contains("expired"));
  }
  SECTION("caBundle holds the serving certificate, not a CA") {
    auto r = check_serving_cert(ref_with_ca(good.cert_pem), good.cert_pem, "test", kNow);
    CHECK(r.verdict == Verdict::fail);
    CHECK_THAT(r.cause, Contains("not a CA"));
  }
  SECTION("caBundle is not PEM") {
    auto r = check_serving_cert(ref_with_ca("hello"), good.cert_pem, "test", kNow);
    CHECK(r.verdict == Verdict::fail);
    CHECK_THAT(r.evidence.at(0), Contains("no PEM certificate"));
  }
  SECTION("serving certificate unreadable: only the CA is checked") {
    auto r = check_serving_cert(ref_with_ca(good.ca_cert_pem), std::nullopt, "Secret x/y: 403 Forbidden", kNow);
    CHECK(r.verdict == Verdict::pass);
    CHECK_THAT(r.evidence.back(), Contains("not verified"));
  }
}

TEST_CASE("tls.crt from a kubernetes.io/tls Secret", "[doctor][tls]") {
  auto s = obj(R"({"kind":"Secret","data":{"tls.crt":")" + gpuslice::base64_encode("PEM") + "\"}}");
  auto crt = tls_crt_from_secret(s);
  REQUIRE(crt.ok());
  CHECK(*crt == "PEM");
  auto missing = tls_crt_from_secret(obj(R"({"kind":"Secret","data":{}})"));
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.message(), Contains("data[tls.crt]"));
}

TEST_CASE("tunnel: No agent available fails, a dial from the worker side passes", "[doctor][tunnel]") {
  auto down =
      check_tunnel("a-worker-0", ApiError{500, "InternalError", "error trying to reach service: No agent available"});
  CHECK(down.verdict == Verdict::fail);
  CHECK_THAT(down.cause, Contains("Konnectivity agent not connected"));
  auto up = check_tunnel("a-worker-0", ApiError{503, "ServiceUnavailable",
                                                "error trying to reach service: dial tcp 10.244.0.1:10250: connect: "
                                                "network is unreachable"});
  CHECK(up.verdict == Verdict::pass);
  CHECK(check_tunnel("a-worker-0", std::nullopt).verdict == Verdict::pass);
  CHECK(check_tunnel("", std::nullopt).verdict == Verdict::skip);
  CHECK(check_tunnel("n", ApiError{0, gpuslice::kube::kReasonTransport, "refused"}).verdict == Verdict::skip);
  CHECK(check_tunnel("n", ApiError{504, "Timeout", "context deadline exceeded"}).verdict == Verdict::fail);
}

TEST_CASE("gpu-pod-dry-run: mutated passes, unmutated or denied fails", "[doctor][dryrun]") {
  Names names;
  auto pod = make_probe_pod(true, "default");
  CHECK(json::serialize(pod).find("nvidia.com/gpu") != std::string::npos);
  CHECK(pod.at("metadata").at("namespace").as_string() == "default");

  SECTION("mutated") {
    auto mutated = pod;
    mutated["spec"].as_object()["schedulerName"] = "gpuslice-scheduler";
    mutated["metadata"].as_object()["annotations"] = json::object{{"gpuslice.io/gpu-request", "[...]"}};
    auto r = check_gpu_dry_run(DryRun{mutated, {}}, names);
    CHECK(r.verdict == Verdict::pass);
    CHECK_THAT(format_report("t", {r}), Contains("spec.schedulerName: gpuslice-scheduler"));
  }
  SECTION("admitted unmutated (failed open, no guard)") {
    auto plain = pod;
    plain["spec"].as_object()["schedulerName"] = "default-scheduler";
    auto r = check_gpu_dry_run(DryRun{plain, {}}, names);
    CHECK(r.verdict == Verdict::fail);
    CHECK_THAT(r.cause, Contains("unmutated"));
  }
  SECTION("partly mutated") {
    auto half = pod;
    half["spec"].as_object()["schedulerName"] = "gpuslice-scheduler";
    auto r = check_gpu_dry_run(DryRun{half, {}}, names);
    CHECK(r.verdict == Verdict::fail);
    CHECK_THAT(r.cause, Contains("partly"));
  }
  SECTION("refused by the guard") {
    auto r = check_gpu_dry_run(DryRun{std::nullopt, ApiError{403, "Invalid", kGuardMessage}}, names);
    CHECK(r.verdict == Verdict::fail);
    CHECK_THAT(r.evidence.at(0), Contains("gpuslice-scheduler-guard"));
    CHECK_THAT(r.cause, Contains("GPU pods are being held back"));
  }
}

TEST_CASE("plain-pod-dry-run: untouched passes, mutated fails", "[doctor][dryrun]") {
  Names names;
  auto pod = make_probe_pod(false, "default");
  CHECK(json::serialize(pod).find("nvidia.com") == std::string::npos);
  auto admitted = pod;
  admitted["spec"].as_object()["schedulerName"] = "default-scheduler";
  CHECK(check_plain_dry_run(DryRun{admitted, {}}, names).verdict == Verdict::pass);
  auto touched = admitted;
  touched["metadata"].as_object()["annotations"] = json::object{{"hami.io/vgpu-devices-to-allocate", "x"}};
  auto r = check_plain_dry_run(DryRun{touched, {}}, names);
  CHECK(r.verdict == Verdict::fail);
  CHECK_THAT(r.evidence.at(2), Contains("hami.io/vgpu-devices-to-allocate"));
  auto guard = check_plain_dry_run(DryRun{std::nullopt, ApiError{403, "Invalid", kGuardMessage}}, names);
  CHECK(guard.verdict == Verdict::fail);
  CHECK_THAT(guard.cause, Contains("asksForGPU"));
}

TEST_CASE("scheduler-guard: policy bound with Deny", "[doctor][guard]") {
  Names names;
  auto policy = obj(R"({"kind":"ValidatingAdmissionPolicy","metadata":{"name":"gpuslice-scheduler-guard"}})");
  auto deny = obj(R"({"metadata":{"name":"b1"},"spec":{"policyName":"gpuslice-scheduler-guard",
    "validationActions":["Deny"]}})");
  auto audit = obj(R"({"metadata":{"name":"b2"},"spec":{"policyName":"gpuslice-scheduler-guard",
    "validationActions":["Audit"]}})");
  auto other = obj(R"({"metadata":{"name":"b3"},"spec":{"policyName":"other","validationActions":["Deny"]}})");
  CHECK(check_guard(policy, {audit, deny}, names).verdict == Verdict::pass);
  CHECK(check_guard(policy, {audit, other}, names).verdict == Verdict::fail);
  CHECK(check_guard(std::nullopt, {deny}, names).verdict == Verdict::fail);
}

TEST_CASE("scheduler-lease: held and fresh", "[doctor][lease]") {
  Names names;
  auto now = std::chrono::system_clock::time_point(std::chrono::seconds(kNow));
  gpuslice::kube::Lease l;
  l.spec = {"host_abc", 15, /*acquire*/ now - std::chrono::seconds(100), /*renew*/ now - std::chrono::seconds(3), 1};
  auto fresh = check_lease(l, names, now);
  CHECK(fresh.verdict == Verdict::pass);
  CHECK_THAT(fresh.evidence.at(0), Contains("holder host_abc"));

  auto stale = l;
  stale.spec.renew_time = now - std::chrono::seconds(60);
  auto r = check_lease(stale, names, now);
  CHECK(r.verdict == Verdict::fail);
  CHECK_THAT(r.cause, Contains("stopped renewing 60 s ago"));

  auto released = l;
  released.spec.holder_identity.clear();
  CHECK_THAT(check_lease(released, names, now).cause, Contains("released"));
  CHECK(check_lease(std::nullopt, names, now).verdict == Verdict::fail);
  names.lease_name.clear();
  CHECK(check_lease(std::nullopt, names, now).verdict == Verdict::skip);
}

TEST_CASE("gpu-inventory: registered nodes with allocatable GPUs", "[doctor][inventory]") {
  auto ok = gpu_node("a-worker-0", kA100, "10");
  auto plain = gpu_node("cpu-0", "", "");
  auto r = check_inventory({ok, plain});
  CHECK(r.verdict == Verdict::pass);
  CHECK_THAT(r.evidence.at(0), Contains("2 node(s); 1 with registered GPUs"));
  CHECK_THAT(r.evidence.at(1), Contains("a-worker-0: 1 card(s)"));
  CHECK_THAT(r.evidence.at(1), Contains("GPU-a-0 NVIDIA A100-SXM4-80GB 81920 MiB 100 cores x10"));

  CHECK(check_inventory({plain}).verdict == Verdict::fail);
  CHECK(check_inventory({}).verdict == Verdict::fail);
  auto zero = check_inventory({gpu_node("a-worker-0", kA100, "0")});
  CHECK(zero.verdict == Verdict::fail);
  CHECK_THAT(format_report("t", {zero}), Contains("allocatable nvidia.com/gpu is 0"));
  auto bad = check_inventory({ok, gpu_node("broken", R"([{"id":"x","devmem":"abc"}])", "1")});
  CHECK(bad.verdict == Verdict::fail);
  CHECK_THAT(format_report("t", {bad}), Contains("broken"));

  std::vector<json::object> many;
  for (int i = 0; i < 30; ++i) {
    auto n = gpu_node("n" + std::to_string(i), kA100, "10");
    many.push_back(n);
  }
  auto capped = check_inventory(many, 5);
  CHECK(capped.verdict == Verdict::pass);
  CHECK(capped.evidence.size() == 1 + 5 + 1);
  CHECK_THAT(capped.evidence.back(), Contains("25 more"));
}

TEST_CASE("report: text format, json format, exit code", "[doctor][report]") {
  std::vector<CheckResult> checks{
      {"webhook-config", Verdict::pass, {"MutatingWebhookConfiguration gpuslice"}, {}, {}, {}},
      {"gpu-pod-dry-run", Verdict::fail, {"denied"}, "the cause", "the fix"},
      {"scheduler-lease", Verdict::skip, {"skipped"}, {}, {}, {}},
  };
  auto text = format_report("https://127.0.0.1:16443 (context tenant-a)", checks);
  CHECK(text ==
        "gpuslice doctor: https://127.0.0.1:16443 (context tenant-a)\n"
        "PASS  webhook-config\n"
        "      MutatingWebhookConfiguration gpuslice\n"
        "FAIL  gpu-pod-dry-run\n"
        "      denied\n"
        "      cause: the cause\n"
        "      fix:   the fix\n"
        "SKIP  scheduler-lease\n"
        "      skipped\n"
        "doctor: 1 passed, 1 failed, 1 skipped\n");
  CHECK(exit_code(checks) == 1);
  checks.erase(checks.begin() + 1);
  CHECK(exit_code(checks) == 0);
  auto j = json::parse(format_report_json("s", checks)).as_object();
  CHECK(j.at("passed").as_int64() == 1);
  CHECK(j.at("skipped").as_int64() == 1);
  CHECK(j.at("checks").as_array().at(0).at("verdict").as_string() == "PASS");
}

TEST_CASE("cause ids are stable names for scripts", "[doctor][diagnose]") {
  Names names;
  auto id_of = [&](int code, std::string msg) {
    return diagnose_admission_error(ApiError{code, "InternalError", std::move(msg)}, names).id;
  };
  CHECK(id_of(500, "Post \"https://x.svc:9443/mutate\": No agent available") == "agent-not-connected");
  CHECK(id_of(500, "x509: certificate signed by unknown authority") == "ca-bundle-mismatch");
  CHECK(id_of(500, "x509: certificate is valid for localhost, not x.y.svc") == "san-mismatch");
  CHECK(id_of(403, kGuardMessage) == "webhook-not-reached");
  auto r = check_gpu_dry_run(DryRun{std::nullopt, ApiError{500, "InternalError", "No agent available"}}, names);
  CHECK(r.cause_id == "agent-not-connected");
  CHECK_THAT(format_report("t", {r}), Contains("[agent-not-connected]"));
  CHECK_THAT(format_report_json("t", {r}), Contains("\"cause_id\":\"agent-not-connected\""));
}

TEST_CASE("correlate: a guard refusal is blamed on the tunnel or on gpuslice", "[doctor][diagnose]") {
  Names names;
  auto guard = check_gpu_dry_run(DryRun{std::nullopt, ApiError{403, "Invalid", kGuardMessage}}, names);
  REQUIRE(guard.cause_id == "webhook-not-reached");

  SECTION("agent down") {
    std::vector<CheckResult> checks{
        check_tunnel("n", ApiError{500, "InternalError", "error trying to reach service: No agent available"}), guard};
    correlate(checks);
    CHECK(checks[1].cause_id == "agent-not-connected");
    CHECK_THAT(checks[1].cause, Contains("held back"));
  }
  SECTION("tunnel up, gpuslice down") {
    std::vector<CheckResult> checks{
        check_tunnel("n", ApiError{503, "ServiceUnavailable", "dial tcp 10.244.0.1:10250: connect: refused"}), guard};
    correlate(checks);
    CHECK(checks[1].cause_id == "webhook-down");
    CHECK_THAT(checks[1].cause, Contains("gpuslice is not running"));
  }
  SECTION("tunnel up, certificate refused: blamed on the certificate") {
    auto good = bundle_for("gpuslice-webhook");
    auto other = bundle_for("gpuslice-webhook");
    std::vector<CheckResult> checks{
        check_serving_cert(ref_with_ca(other.ca_cert_pem), good.cert_pem, "test", kNow),
        check_tunnel("n", ApiError{503, "ServiceUnavailable", "dial tcp 10.244.0.1:10250: connect: refused"}), guard};
    correlate(checks);
    CHECK(checks[2].cause_id == "ca-bundle-mismatch");
    CHECK_THAT(checks[2].cause, Contains("held back"));
  }
  SECTION("tunnel unknown: left as is") {
    std::vector<CheckResult> checks{check_tunnel("", std::nullopt), guard};
    correlate(checks);
    CHECK(checks[1].cause_id == "webhook-not-reached");
  }
}
