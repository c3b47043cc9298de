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
    "timeoutSeconds":5,"rules":[{"operations":["CREATE"],"apiGroups":[""],"apiVersions":["v1"],"resources":["pods"]}],
    "clientConfig":)") +
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

json::object cluster_ip_service(std::string ip, int port) {
  return obj(R"({"kind":"Service","metadata":{"name":"gpuslice-webhook","namespace":"gpuslice-system"},
    "spec":{"type":"ClusterIP","clusterIP":")" +
             ip + R"(","ports":[{"name":"webhook","port":)" + std::to_string(port) + "}]}}");
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
  SECTION("url on localhost: the sidecar topology, no tunnel") {
    auto r =
        check_webhook_config(webhook_config(R"({"url":"https://127.0.0.1:9443/mutate","caBundle":")" + ca_b64 + "\"}"),
                             std::nullopt, names, ref);
    CHECK(r.verdict == Verdict::pass);
    REQUIRE(ref.has_value());
    CHECK(ref->server_name() == "127.0.0.1");
    CHECK_THAT(format_report("t", {r}), Contains("registered by url on localhost (127.0.0.1:9443): the sidecar"));
  }
  SECTION("url that is not https") {
    auto r =
        check_webhook_config(webhook_config(R"({"url":"http://127.0.0.1:9443/mutate","caBundle":")" + ca_b64 + "\"}"),
                             std::nullopt, names, ref);
    CHECK(r.verdict == Verdict::fail);
    CHECK(r.cause_id == "url-invalid");
    CHECK_THAT(r.evidence.back(), Contains("\"http://127.0.0.1:9443/mutate\""));
  }
  SECTION("Service missing") {
    auto r = check_webhook_config(service_config(ca_b64), std::nullopt, names, ref);
    CHECK(r.verdict == Verdict::fail);
    CHECK_THAT(r.cause, Contains("Service does not exist"));
  }
  SECTION("ClusterIP Service without clientConfig.service.port") {
    auto r = check_webhook_config(service_config(ca_b64, 443), cluster_ip_service("10.96.0.20", 9443), names, ref);
    CHECK(r.verdict == Verdict::fail);
    CHECK(r.cause_id == "service-port-mismatch");
    CHECK_THAT(r.cause, Contains("no port 443"));
    CHECK_FALSE(ref.has_value());
  }
  SECTION("ClusterIP Service with the port") {
    auto r = check_webhook_config(service_config(ca_b64, 443), cluster_ip_service("10.96.0.20", 443), names, ref);
    CHECK(r.verdict == Verdict::pass);
    CHECK_THAT(r.evidence.at(1), Contains("ClusterIP 10.96.0.20, ports 443"));
  }
  SECTION("ExternalName: the Service's ports do not matter (the API server dials externalName:service.port)") {
    // The healthy path that used to fail with service-port-mismatch: ResolveCluster (apiserver util/proxy) dials
    // <externalName>:<clientConfig.service.port> whatever the Service lists.
    auto r = check_webhook_config(service_config(ca_b64, 443), external_name_service(9443), names, ref);
    CHECK(r.verdict == Verdict::pass);
    REQUIRE(ref.has_value());
    CHECK_THAT(r.evidence.at(1), Contains("ExternalName localhost: the API server dials localhost:443"));
    auto no_ports = external_name_service();
    no_ports["spec"].as_object().erase("ports");
    CHECK(check_webhook_config(service_config(ca_b64, 443), no_ports, names, ref).verdict == Verdict::pass);
  }
  SECTION("ExternalName without a host") {
    auto svc = external_name_service();
    svc["spec"].as_object()["externalName"] = "";
    auto r = check_webhook_config(service_config(ca_b64), svc, names, ref);
    CHECK(r.verdict == Verdict::fail);
    CHECK(r.cause_id == "service-invalid");
  }
  SECTION("headless Service cannot be routed") {
    auto r = check_webhook_config(service_config(ca_b64, 443), cluster_ip_service("None", 443), names, ref);
    CHECK(r.verdict == Verdict::fail);
    CHECK(r.cause_id == "service-headless");
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

// ---- topologies and discovery -----------------------------------------------------------------------------------

namespace {

const std::string kPodRules =
    R"("rules":[{"operations":["CREATE"],"apiGroups":[""],"apiVersions":["v1"],"resources":["pods"]}])";

// A MutatingWebhookConfiguration `name` with one entry `entry`, extra fields `extra` (selectors, labels...).
json::object mwc(std::string name, std::string entry, std::string client_config, std::string entry_extra = "",
                 std::string metadata_extra = "") {
  return obj(R"({"metadata":{"name":")" + name + "\"" + metadata_extra + R"(},"webhooks":[{"name":")" + entry +
             R"(",)" + kPodRules + R"(,"clientConfig":)" + client_config + entry_extra + "}]}");
}

std::string svc_cc(std::string ns, std::string name, std::string path = "/mutate") {
  return R"({"service":{"namespace":")" + ns + R"(","name":")" + name + R"(","port":443,"path":")" + path +
         R"("},"caBundle":"Zm9v"})";
}

// charts/gpuslice's MutatingAdmissionPolicy (shape only) and a binding with a namespace selector.
json::object policy(std::string name, bool labelled = true, std::string scheduler = "gpuslice-scheduler") {
  return obj(R"({"apiVersion":"admissionregistration.k8s.io/v1","kind":"MutatingAdmissionPolicy",
    "metadata":{"name":")" +
             name + "\"" + (labelled ? R"(,"labels":{"app.kubernetes.io/name":"gpuslice"})" : "") + R"(},
    "spec":{"matchConstraints":{"resourceRules":[{"apiGroups":[""],"apiVersions":["v1"],"operations":["CREATE"],
      "resources":["pods"]}]},"mutations":[{"patchType":"JSONPatch","jsonPatch":{"expression":
      "[JSONPatch{op: \"add\", path: \"/spec/schedulerName\", value: \")" +
             scheduler + R"(\"}]"}}]}})");
}

json::object binding(std::string name, std::string policy_name, std::string selector_json = "") {
  return obj(R"({"metadata":{"name":")" + name + R"("},"spec":{"policyName":")" + policy_name + "\"" +
             (selector_json.empty() ? "" : R"(,"matchResources":{"namespaceSelector":)" + selector_json + "}") + "}}");
}

const Labels kDefaultNs{{"kubernetes.io/metadata.name", "default"}};
const Labels kProbePod{{"app.kubernetes.io/name", "gpuslice-doctor"}};

}  // namespace

TEST_CASE("find_admission: gpuslice's webhook by what it points at, not only by its name", "[doctor][discovery]") {
  Names names;
  const auto other_project = mwc("istio-sidecar-injector", "inject.istio.io", svc_cc("istio-system", "istiod"));
  const auto not_pods = obj(R"({"metadata":{"name":"gpuslice"},"webhooks":[{"name":"mutate.gpuslice.io",
    "rules":[{"operations":["CREATE"],"apiGroups":["apps"],"resources":["deployments"]}],
    "clientConfig":{"url":"https://127.0.0.1:1/mutate"}}]})");

  SECTION("deployed under other names: found by its entry name") {
    auto p = find_admission({other_project, mwc("acme-gpu-mutator", "mutate.gpuslice.io", svc_cc("acme", "gpu-hook"))},
                            {}, {}, names, kDefaultNs, kProbePod);
    REQUIRE(p.webhook.has_value());
    CHECK(p.topology == Topology::service_webhook);
    CHECK(p.webhook->configuration == "acme-gpu-mutator");
    CHECK(p.webhook->ref.service_name == "gpu-hook");
    CHECK_THAT(p.webhook->reason, Contains("mutate.gpuslice.io"));
    CHECK(p.webhooks.size() == 1);  // istio's pod webhook is not taken for ours
  }
  SECTION("found by its label") {
    auto p = find_admission(
        {mwc("acme", "gpu.acme.io", svc_cc("acme", "hook"), "", R"(,"labels":{"app.kubernetes.io/name":"gpuslice"})")},
        {}, {}, names, kDefaultNs, kProbePod);
    REQUIRE(p.webhook.has_value());
    CHECK_THAT(p.webhook->reason, Contains("labelled"));
  }
  SECTION("found by the Service in gpuslice's namespace it points at") {
    names.namespace_ = "acme-gpu";
    auto p =
        find_admission({mwc("acme", "gpu.acme.io", svc_cc("acme-gpu", "hook"))}, {}, {}, names, kDefaultNs, kProbePod);
    REQUIRE(p.webhook.has_value());
    CHECK_THAT(p.webhook->reason, Contains("points at Service acme-gpu/hook /mutate"));
    // The same webhook on another path, or for another namespace, is someone else's.
    CHECK(find_admission({mwc("acme", "gpu.acme.io", svc_cc("acme-gpu", "hook", "/inject"))}, {}, {}, names, kDefaultNs,
                         kProbePod)
              .webhooks.empty());
    CHECK(
        find_admission({mwc("acme", "gpu.acme.io", svc_cc("elsewhere", "hook"))}, {}, {}, names, kDefaultNs, kProbePod)
            .webhooks.empty());
  }
  SECTION("a URL on localhost on the configured webhook port: the sidecar") {
    auto side = mwc("tcp-sidecar", "gpu.acme.io", R"({"url":"https://127.0.0.1:6444/mutate","caBundle":"Zm9v"})");
    CHECK(find_admission({side}, {}, {}, names, kDefaultNs, kProbePod).webhooks.empty());
    auto p = find_admission({side}, {}, {}, names, kDefaultNs, kProbePod, DiscoveryHints{{6444}});
    REQUIRE(p.webhook.has_value());
    CHECK(p.topology == Topology::url_webhook);
    CHECK_THAT(p.webhook->reason, Contains("port 6444 on localhost"));
    CHECK(find_admission({side}, {}, {}, names, kDefaultNs, kProbePod, DiscoveryHints{{9443}}).webhooks.empty());
  }
  SECTION("a webhook that mutates no pods is not gpuslice's, whatever its name") {
    auto p = find_admission({not_pods}, {}, {}, names, kDefaultNs, kProbePod);
    CHECK(p.webhooks.empty());
    CHECK(p.topology == Topology::none);
  }
  SECTION("--webhook-name: only that configuration") {
    names.webhook_configuration = "acme-gpu-mutator";
    names.webhook_configuration_explicit = true;
    auto p = find_admission({mwc("gpuslice", "mutate.gpuslice.io", svc_cc("gpuslice-system", "gpuslice-webhook")),
                             mwc("acme-gpu-mutator", "x.acme.io", svc_cc("acme", "hook"))},
                            {}, {}, names, kDefaultNs, kProbePod);
    REQUIRE(p.webhooks.size() == 1);
    CHECK(p.webhook->configuration == "acme-gpu-mutator");
  }
  SECTION("two of ours: the one whose namespaceSelector selects the probe namespace serves it") {
    // The lab's sidecar test: the worker-side webhook skips namespaces labelled gpuslice.io/webhook=ignore, the
    // sidecar's serves only one labelled namespace.
    auto worker = mwc("gpuslice", "mutate.gpuslice.io", svc_cc("gpuslice-system", "gpuslice-webhook"),
                      R"(,"namespaceSelector":{"matchExpressions":[{"key":"gpuslice.io/webhook","operator":"NotIn",
                      "values":["ignore"]}]})");
    auto side =
        mwc("gpuslice-sidecar", "mutate.gpuslice.io", R"({"url":"https://127.0.0.1:6444/mutate","caBundle":"Zm9v"})",
            R"(,"namespaceSelector":{"matchLabels":{"gpuslice.io/e2e":"s1"}})");
    Labels s1{{"kubernetes.io/metadata.name", "s1"}, {"gpuslice.io/webhook", "ignore"}, {"gpuslice.io/e2e", "s1"}};
    auto p = find_admission({worker, side}, {}, {}, names, s1, kProbePod);
    REQUIRE(p.webhook.has_value());
    CHECK(p.webhook->configuration == "gpuslice-sidecar");
    CHECK(p.topology == Topology::url_webhook);
    REQUIRE(p.webhooks.size() == 2);
    std::optional<WebhookRef> ref;
    auto r = check_webhook_config(p, std::nullopt, names, ref);
    CHECK(r.verdict == Verdict::pass);
    CHECK_THAT(format_report("t", {r}), Contains("MutatingWebhookConfiguration gpuslice (named gpuslice), webhook "
                                                 "mutate.gpuslice.io: not for namespace default"));
    // In "default" the worker-side one serves (preferred by name).
    auto d = find_admission({side, worker}, {}, {}, names, kDefaultNs, kProbePod);
    REQUIRE(d.webhook.has_value());
    CHECK(d.webhook->configuration == "gpuslice");
  }
  SECTION("an objectSelector that leaves the probe pod out") {
    auto w = mwc("gpuslice", "mutate.gpuslice.io", svc_cc("gpuslice-system", "gpuslice-webhook"),
                 R"(,"objectSelector":{"matchLabels":{"gpu":"yes"}})");
    auto p = find_admission({w}, {}, {}, names, kDefaultNs, kProbePod);
    REQUIRE(p.webhooks.size() == 1);
    CHECK_FALSE(p.webhooks[0].selects_probe);
    CHECK_THAT(p.webhooks[0].selector_note, Contains("objectSelector"));
    std::optional<WebhookRef> ref;
    auto r = check_webhook_config(p, std::nullopt, names, ref);
    CHECK(r.verdict == Verdict::fail);
    CHECK(r.cause_id == "namespace-not-served");
  }
  SECTION("nothing at all") {
    std::optional<WebhookRef> ref;
    auto p = find_admission({other_project}, {}, {}, names, kDefaultNs, kProbePod);
    auto r = check_webhook_config(p, std::nullopt, names, ref);
    CHECK(r.verdict == Verdict::fail);
    CHECK(r.cause_id == "webhook-config-missing");
    CHECK_THAT(r.evidence.at(0), Contains("no MutatingWebhookConfiguration mutating pods points at gpuslice"));
    auto a = check_admission_policy(p, names);
    CHECK(a.verdict == Verdict::skip);
  }
}

TEST_CASE("the admission-policy topology: no webhook, a bound MutatingAdmissionPolicy", "[doctor][policy]") {
  Names names;
  const auto worker = mwc("gpuslice", "mutate.gpuslice.io", svc_cc("gpuslice-system", "gpuslice-webhook"),
                          R"(,"namespaceSelector":{"matchExpressions":[{"key":"gpuslice.io/webhook",
                          "operator":"NotIn","values":["ignore"]}]})");
  Labels p_ns{{"kubernetes.io/metadata.name", "p"}, {"gpuslice.io/webhook", "ignore"}, {"gpuslice.io/e2e", "p"}};
  const std::string sel_p = R"({"matchLabels":{"gpuslice.io/e2e":"p"}})";

  SECTION("policy only: webhook-config SKIP, admission-policy PASS, the policy's pod PASSes") {
    auto path = find_admission({}, {policy("gpuslice-gpu-pods")}, {binding("gpuslice-gpu-pods", "gpuslice-gpu-pods")},
                               names, kDefaultNs, kProbePod);
    CHECK(path.topology == Topology::admission_policy);
    std::optional<WebhookRef> ref;
    auto w = check_webhook_config(path, std::nullopt, names, ref);
    CHECK(w.verdict == Verdict::skip);
    CHECK_THAT(w.evidence.back(), Contains("MutatingAdmissionPolicy gpuslice-gpu-pods"));
    auto a = check_admission_policy(path, names);
    CHECK(a.verdict == Verdict::pass);
    CHECK_THAT(a.evidence.at(0), Contains("bound for default by gpuslice-gpu-pods"));

    auto pod = make_probe_pod(true, "default");
    pod["spec"].as_object()["schedulerName"] = "gpuslice-scheduler";
    pod["metadata"].as_object()["annotations"] = json::object{{"gpuslice.io/admitted-by", "admission-policy"}};
    auto g = check_gpu_dry_run(DryRun{pod, {}}, names, path.topology);
    CHECK(g.verdict == Verdict::pass);
    CHECK_THAT(g.evidence.back(), Contains("mutated by the MutatingAdmissionPolicy inside the API server"));
    // The same pod where a webhook serves the namespace: the policy was only the fallback.
    auto f = check_gpu_dry_run(DryRun{pod, {}}, names, Topology::service_webhook);
    CHECK(f.verdict == Verdict::fail);
    CHECK(f.cause_id == "webhook-fallback");
    // An unmarked pod naming our scheduler is still "partly mutated".
    pod["metadata"].as_object().erase("annotations");
    CHECK(check_gpu_dry_run(DryRun{pod, {}}, names, path.topology).cause_id == "partly-mutated");
  }
  SECTION("webhook for other namespaces, the policy bound for this one (the lab's admission-policy test)") {
    auto path =
        find_admission({worker}, {policy("gpuslice-e2e-gpu-pods")},
                       {binding("gpuslice-e2e-gpu-pods", "gpuslice-e2e-gpu-pods", sel_p)}, names, p_ns, kProbePod);
    CHECK(path.topology == Topology::admission_policy);
    REQUIRE(path.policy.has_value());
    // ... and in "default" the webhook serves, the policy is not bound there.
    auto d = find_admission({worker}, {policy("gpuslice-e2e-gpu-pods")},
                            {binding("gpuslice-e2e-gpu-pods", "gpuslice-e2e-gpu-pods", sel_p)}, names, kDefaultNs,
                            kProbePod);
    CHECK(d.topology == Topology::service_webhook);
    CHECK_FALSE(d.policy.has_value());
    CHECK(check_admission_policy(d, names).verdict == Verdict::skip);
  }
  SECTION("found by what it writes, not by its label") {
    auto path = find_admission({}, {policy("acme-defaults", false)}, {binding("b", "acme-defaults")}, names, kDefaultNs,
                               kProbePod);
    REQUIRE(path.policy.has_value());
    CHECK_THAT(path.policy->reason, Contains("writes spec.schedulerName gpuslice-scheduler"));
    // A policy writing another scheduler and unlabelled is not ours.
    CHECK(find_admission({}, {policy("other", false, "volcano")}, {binding("b", "other")}, names, kDefaultNs, kProbePod)
              .policies.empty());
  }
  SECTION("our policy with no binding for the namespace and no webhook: FAIL policy-unbound") {
    auto path = find_admission({worker}, {policy("gpuslice-gpu-pods")},
                               {binding("gpuslice-gpu-pods", "gpuslice-gpu-pods", R"({"matchLabels":{"x":"y"}})")},
                               names, p_ns, kProbePod);
    CHECK(path.topology == Topology::none);
    auto a = check_admission_policy(path, names);
    CHECK(a.verdict == Verdict::fail);
    CHECK(a.cause_id == "policy-unbound");
    CHECK_THAT(a.evidence.at(0), Contains("bound for default by none; other bindings gpuslice-gpu-pods"));
    std::optional<WebhookRef> ref;
    CHECK(check_webhook_config(path, std::nullopt, names, ref).cause_id == "namespace-not-served");
  }
  SECTION("an API server that serves no MutatingAdmissionPolicy") {
    auto path = find_admission({worker}, {}, {}, names, kDefaultNs, kProbePod);
    path.policies_served = false;
    auto a = check_admission_policy(path, names);
    CHECK(a.verdict == Verdict::skip);
    CHECK_THAT(a.evidence.at(0), Contains("serves no MutatingAdmissionPolicy"));
  }
}

TEST_CASE("tunnel and correlate know the topology", "[doctor][tunnel]") {
  Names names;
  const ApiError no_agent{500, "InternalError", "error trying to reach service: No agent available"};
  CHECK(check_tunnel("n", no_agent, Topology::service_webhook).verdict == Verdict::fail);
  for (auto t : {Topology::url_webhook, Topology::admission_policy}) {
    auto r = check_tunnel("n", no_agent, t);
    CHECK(r.verdict == Verdict::skip);
    CHECK_THAT(r.evidence.back(), Contains("does not cross the tunnel"));
    CHECK_THAT(r.evidence.back(), Contains("agent-not-connected"));
  }
  CHECK(check_tunnel("n", std::nullopt, Topology::url_webhook).verdict == Verdict::pass);

  auto guard = check_gpu_dry_run(DryRun{std::nullopt, ApiError{403, "Invalid", kGuardMessage}}, names);
  SECTION("url webhook down") {
    auto path = find_admission(
        {mwc("gpuslice-sidecar", "mutate.gpuslice.io", R"({"url":"https://127.0.0.1:6444/mutate","caBundle":"Zm9v"})")},
        {}, {}, names, kDefaultNs, kProbePod);
    std::vector<CheckResult> checks{check_tunnel("n", no_agent, path.topology), guard};
    correlate(checks, path);
    CHECK(checks[1].cause_id == "webhook-down");
    CHECK_THAT(checks[1].cause, Contains("https://127.0.0.1:6444/mutate"));
  }
  SECTION("nothing serves the namespace") {
    AdmissionPath path;
    std::vector<CheckResult> checks{guard};
    correlate(checks, path);
    CHECK(checks[0].cause_id == "no-admission");
  }
  SECTION("the policy did not apply") {
    auto path = find_admission({}, {policy("p")}, {binding("b", "p")}, names, kDefaultNs, kProbePod);
    std::vector<CheckResult> checks{guard};
    correlate(checks, path);
    CHECK(checks[0].cause_id == "policy-not-applied");
  }
}

namespace {
json::object config_map(std::string ns, std::string name, std::string config_yaml) {
  json::object cm = obj(R"({"kind":"ConfigMap","metadata":{},"data":{}})");
  cm["metadata"].as_object()["name"] = name;
  cm["metadata"].as_object()["namespace"] = ns;
  cm["data"].as_object()["config.yaml"] = config_yaml;
  return cm;
}
const std::string kConfigHead = "apiVersion: gpuslice.io/v1alpha1\nkind: GpusliceConfiguration\n";
}  // namespace

TEST_CASE("the Lease named by gpuslice's configuration, by serve's rule", "[doctor][lease]") {
  Names names;
  SECTION("a ConfigMap without resourceNamespace: the Lease is in the ConfigMap's namespace (in-cluster rule)") {
    auto found =
        find_configuration({config_map("acme-gpu", "acme-config",
                                       kConfigHead + "scheduler:\n  leaderElection:\n    resourceName: acme\n")},
                           names, std::nullopt);
    REQUIRE(found.has_value());
    CHECK(found->source == "ConfigMap acme-gpu/acme-config (config.yaml)");
    auto ev = resolve_lease(names, found, false, false);
    CHECK(names.lease_name == "acme");
    CHECK(names.lease_namespace == "acme-gpu");
    CHECK_THAT(ev, Contains("Lease named by ConfigMap acme-gpu/acme-config"));
  }
  SECTION("resourceNamespace wins; explicit flags win over it") {
    auto found =
        find_configuration({config_map("gpuslice-system", "c",
                                       kConfigHead + "scheduler:\n  leaderElection:\n    resourceNamespace: leases\n")},
                           names, std::nullopt);
    resolve_lease(names, found, false, false);
    CHECK(names.lease_namespace == "leases");
    CHECK(names.lease_name == "gpuslice-scheduler");
    Names flags;
    flags.lease_name = "mine";
    flags.lease_namespace = "there";
    resolve_lease(flags, found, true, true);
    CHECK(flags.lease_name == "mine");
    CHECK(flags.lease_namespace == "there");
  }
  SECTION("no configuration: serve's default, gpuslice-system (serve out of cluster writes there too)") {
    auto ev = resolve_lease(names, std::nullopt, false, false);
    CHECK(names.lease_namespace == "gpuslice-system");
    CHECK(names.lease_name == "gpuslice-scheduler");
    CHECK_THAT(ev, Contains("the rule serve uses"));
  }
  SECTION("a file given with --config: the running namespace is gpuslice's (--namespace)") {
    names.namespace_ = "tenant-x";
    FoundConfiguration file{gpuslice::Configuration{}, "--config /etc/gpuslice/config.yaml", "", {}};
    resolve_lease(names, file, false, false);
    CHECK(names.lease_namespace == "tenant-x");
  }
  SECTION("no resourceNamespace, the ConfigMap outside gpuslice-system: serve out of cluster's gpuslice-system next") {
    auto found = find_configuration({config_map("acme-gpu", "acme-config", kConfigHead)}, names, std::nullopt);
    resolve_lease(names, found, false, false);
    CHECK(names.lease_namespace == "acme-gpu");
    CHECK(out_of_cluster_lease_namespace(names, found, false) == std::optional<std::string>("gpuslice-system"));
    CHECK(out_of_cluster_lease_namespace(names, found, true) == std::nullopt);  // --lease-namespace given
    auto yes = out_of_cluster_lease_note("acme-gpu", "gpuslice-system", "gpuslice-scheduler", true);
    CHECK_THAT(yes, Contains("Lease acme-gpu/gpuslice-scheduler: not found; Lease gpuslice-system/gpuslice-scheduler "
                             "found instead"));
    CHECK_THAT(yes, Contains("resourceNamespace is unset"));
    CHECK_THAT(out_of_cluster_lease_note("acme-gpu", "gpuslice-system", "l", false),
               Contains("Lease acme-gpu/l: not found, nor in gpuslice-system"));
  }
  SECTION("no second place: resourceNamespace set, the same namespace, leader election off") {
    auto named = find_configuration(
        {config_map("acme-gpu", "c", kConfigHead + "scheduler:\n  leaderElection:\n    resourceNamespace: acme-gpu\n")},
        names, std::nullopt);
    resolve_lease(names, named, false, false);
    CHECK(out_of_cluster_lease_namespace(names, named, false) == std::nullopt);
    Names here;
    auto same = find_configuration({config_map("gpuslice-system", "c", kConfigHead)}, here, std::nullopt);
    resolve_lease(here, same, false, false);
    CHECK(here.lease_namespace == "gpuslice-system");
    CHECK(out_of_cluster_lease_namespace(here, same, false) == std::nullopt);
    Names off;
    auto no_le = find_configuration(
        {config_map("acme-gpu", "c", kConfigHead + "scheduler:\n  leaderElection:\n    leaderElect: false\n")}, off,
        std::nullopt);
    resolve_lease(off, no_le, false, false);
    CHECK(out_of_cluster_lease_namespace(off, no_le, false) == std::nullopt);
  }
  SECTION("leader election off: the lease check is skipped, saying why") {
    auto found = find_configuration(
        {config_map("gpuslice-system", "c", kConfigHead + "scheduler:\n  leaderElection:\n    leaderElect: false\n")},
        names, std::nullopt);
    auto ev = resolve_lease(names, found, false, false);
    CHECK(names.lease_name.empty());
    CHECK_THAT(ev, Contains("leaderElect: false"));
  }
  SECTION("the worker's and the sidecar's ConfigMaps: the one listening where the webhook points") {
    auto worker =
        config_map("gpuslice-system", "gpuslice-config", kConfigHead + "webhook:\n  bindAddress: 0.0.0.0:9443\n");
    auto side = config_map("gpuslice-system", "gpuslice-sidecar-config",
                           kConfigHead + "webhook:\n  bindAddress: 127.0.0.1:6444\n");
    WebhookRef url;
    url.url = "https://127.0.0.1:6444/mutate";
    auto f = find_configuration({worker, side}, names, url);
    REQUIRE(f.has_value());
    CHECK(f->source == "ConfigMap gpuslice-system/gpuslice-sidecar-config (config.yaml)");
    CHECK(webhook_port_of(f->config) == 6444);
    REQUIRE(f->notes.size() == 1);
    CHECK_THAT(f->notes[0], Contains("gpuslice-config"));
    WebhookRef svc;
    svc.service_name = "gpuslice-webhook";
    svc.service_namespace = "gpuslice-system";
    CHECK(find_configuration({side, worker}, names, svc)->source ==
          "ConfigMap gpuslice-system/gpuslice-config (config.yaml)");
  }
  SECTION("a broken configuration is reported, others ignored") {
    auto bad = config_map("gpuslice-system", "bad", kConfigHead + "scheduler:\n  nodeLockTimeout: 5x\n");
    auto other = config_map("gpuslice-system", "unrelated", "hello: world\n");
    auto f = find_configuration({bad, other}, names, std::nullopt);
    REQUIRE(f.has_value());
    CHECK(f->source.empty());
    REQUIRE(f->notes.size() == 1);
    CHECK_THAT(f->notes[0], Contains("nodeLockTimeout"));
    CHECK_FALSE(find_configuration({other}, names, std::nullopt).has_value());
  }
}

TEST_CASE("serving certificate found by its chain to the caBundle", "[doctor][tls]") {
  auto ours = bundle_for("gpuslice-webhook");
  auto theirs = bundle_for("gpuslice-webhook");  // another CA
  auto secret = [](std::string name, const std::string& crt) {
    json::object s = obj(R"({"kind":"Secret","type":"kubernetes.io/tls","metadata":{"namespace":"gpuslice-system"},
      "data":{}})");
    s["metadata"].as_object()["name"] = name;
    s["data"].as_object()["tls.crt"] = gpuslice::base64_encode(crt);
    return s;
  };
  WebhookRef ref = ref_with_ca(ours.ca_cert_pem);
  SECTION("the named Secret chains: it is used") {
    auto p = pick_serving_certificate({secret("x", theirs.cert_pem), secret("gpuslice-webhook-tls", ours.cert_pem)},
                                      "gpuslice-webhook-tls", ref, kNow);
    REQUIRE(p.has_value());
    CHECK(p->source == "Secret gpuslice-system/gpuslice-webhook-tls");
  }
  SECTION("named otherwise (the sidecar's Secret beside the worker's): found by its chain") {
    auto p = pick_serving_certificate(
        {secret("gpuslice-webhook-tls", theirs.cert_pem), secret("gpuslice-sidecar-webhook-tls", ours.cert_pem)},
        "gpuslice-webhook-tls", ref, kNow);
    REQUIRE(p.has_value());
    CHECK(p->source == "Secret gpuslice-system/gpuslice-sidecar-webhook-tls (found by its chain to the caBundle)");
    CHECK(check_serving_cert(ref, p->pem, p->source, kNow).verdict == Verdict::pass);
  }
  SECTION("only the named one, from another CA: kept, so serving-cert reports the mismatch") {
    auto p =
        pick_serving_certificate({secret("gpuslice-webhook-tls", theirs.cert_pem)}, "gpuslice-webhook-tls", ref, kNow);
    REQUIRE(p.has_value());
    CHECK(check_serving_cert(ref, p->pem, p->source, kNow).cause_id == "ca-bundle-mismatch");
  }
  SECTION("none") {
    CHECK_FALSE(pick_serving_certificate({secret("x", theirs.cert_pem)}, "gpuslice-webhook-tls", ref, kNow));
  }
}
