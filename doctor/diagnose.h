#pragma once
// The decisions of `gpuslice doctor`, as pure functions over what the API server returned: each check turns
// observations (objects, API errors, the time) into a CheckResult with PASS/FAIL/SKIP, evidence lines, and on
// failure the likely cause and the fix. cmd/doctor.cc does the I/O and prints format_report().
//
// Output format (stable; tests/e2e parse it):
//
//   gpuslice doctor: <server> (<context>)
//   PASS  webhook-config
//         <evidence line>...
//   FAIL  gpu-pod-dry-run
//         <evidence line>...
//         cause: <likely cause> [<cause-id>]
//         fix:   <what to do>
//   SKIP  serving-cert
//         <why skipped>
//   doctor: 6 passed, 1 failed, 1 skipped
//
// Checks, in order: webhook-config, serving-cert, tunnel, gpu-pod-dry-run, plain-pod-dry-run, scheduler-guard,
// scheduler-lease, gpu-inventory. The exit status is 1 when any check FAILed.

#include "common/result.h"
#include "kube/error.h"
#include "kube/objects.h"  // kube::Lease

#include <boost/json/object.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuslice::doctor {

/// An API call's failure as the client saw it: HTTP status (0 when no response), the Status reason (or the
/// client's kReasonTimeout/kReasonTransport/...), message.
using kube::ApiError;

enum class Verdict { pass, fail, skip };
/// "PASS", "FAIL", "SKIP".
const char* verdict_name(Verdict v);

struct CheckResult {
  std::string name;  ///< kebab-case check id, e.g. "gpu-pod-dry-run"
  Verdict verdict = Verdict::pass;
  std::vector<std::string> evidence;  ///< what was observed, one fact per line
  std::string cause;                  ///< FAIL only: the likely cause
  std::string fix;                    ///< FAIL only: what to do about it
  std::string cause_id;               ///< FAIL only: stable kebab-case id of the cause (see Diagnosis::id)
};

struct Diagnosis {
  std::string cause;
  std::string fix;
  /// Stable id for scripts, e.g. agent-not-connected, san-mismatch, ca-bundle-mismatch, webhook-not-reached,
  /// webhook-not-listening, webhook-timeout, lease-stale, no-gpus (printed as "[id]" after the cause).
  std::string id;
};

/// Names of things the checks refer to (flags of `gpuslice doctor`).
struct Names {
  std::string webhook_configuration = "gpuslice";     ///< MutatingWebhookConfiguration name
  std::string webhook = "";                           ///< webhooks[].name; empty: the only / first entry
  std::string scheduler_name = "gpuslice-scheduler";  ///< what the webhook writes into spec.schedulerName
  std::string guard_policy = "gpuslice-scheduler-guard";
  std::string lease_namespace = "gpuslice-system";
  std::string lease_name = "gpuslice-scheduler";  ///< empty: lease check skipped
  std::string probe_namespace = "default";        ///< where the dry-run pods are "created"
};

// ---- error mapping --------------------------------------------------------------------------------------------

/// Maps the failure of a server-side dry-run create of a pod (the API server's admission chain) to a likely
/// cause and fix: "No agent available" (Konnectivity agent not connected), x509 errors (caBundle mismatch, SAN
/// mismatch, expired), "connection refused" (webhook not listening / Service wrong), "context deadline exceeded"
/// and other timeouts (webhook not answering in time), "connection reset" (tunnel dropped the connection), the
/// scheduler guard's denial (webhook not reached: GPU pods are held back), RBAC, missing namespace.
Diagnosis diagnose_admission_error(const ApiError& failure, const Names& names);

/// Maps a failed read of the API (GET/LIST) to cause and fix: 401 (credentials), 403 (RBAC, naming `what`),
/// 404, timeouts and transport errors (API server not reachable).
Diagnosis diagnose_api_error(const ApiError& failure, std::string_view what);

/// A FAIL result for a check that could not read what it needed: evidence "<what>: <code reason: message>".
CheckResult failed_read(std::string check, std::string_view what, const ApiError& failure);

// ---- webhook configuration ------------------------------------------------------------------------------------

/// The webhook entry gpuslice cares about, decoded from the MutatingWebhookConfiguration.
struct WebhookRef {
  std::string entry;  ///< webhooks[].name
  std::string service_namespace, service_name, path;
  int port = 443;
  std::string url;            ///< clientConfig.url (then there is no service)
  std::string ca_bundle_pem;  ///< base64-decoded caBundle ("" when absent)
  bool ca_bundle_valid_base64 = true;
  std::string failure_policy = "Fail";
  int timeout_seconds = 10;
  /// The DNS name the API server verifies: "<svc>.<ns>.svc" (service mode), else the URL's host.
  std::string server_name() const;
};

/// Picks webhooks[] entry `names.webhook` (or the first) and decodes its clientConfig. Errors name the field.
Result<WebhookRef> parse_webhook_config(const boost::json::object& mwc, const Names& names);

/// webhook-config: the configuration exists (nullopt = 404), has the entry, a caBundle that base64-decodes, and
/// is registered by service (url mode bypasses the Konnectivity tunnel under Kamaji). `service` is the
/// referenced Service (nullopt = 404 or url mode). On PASS, `out` receives the decoded entry.
CheckResult check_webhook_config(const std::optional<boost::json::object>& mwc,
                                 const std::optional<boost::json::object>& service, const Names& names,
                                 std::optional<WebhookRef>& out);

/// serving-cert: the caBundle holds a CA; when the serving certificate is known (`serving_cert_pem` from
/// --serving-cert or the TLS Secret, `source` says which), it chains to the caBundle at `now_unix` and has the
/// SAN the API server dials. Without a readable certificate only the CA is checked (PASS with a note).
CheckResult check_serving_cert(const WebhookRef& ref, const std::optional<std::string>& serving_cert_pem,
                               std::string_view source, int64_t now_unix);

/// The data of a kubernetes.io/tls Secret: base64-decoded data["tls.crt"], or an error naming the field.
Result<std::string> tls_crt_from_secret(const boost::json::object& secret);

// ---- tunnel ---------------------------------------------------------------------------------------------------

/// tunnel: the result of GET /api/v1/nodes/<node>/proxy/healthz, which the API server dials through its
/// `cluster` egress (the Konnectivity tunnel, as service-referenced webhooks are). "No agent available" means
/// no agent is connected; a dial error from the worker's network ("connect: ...") means the agent answered.
/// `node` empty: no node to probe (SKIP). `failure` nullopt: the probe got a response (PASS).
CheckResult check_tunnel(std::string_view node, const std::optional<ApiError>& failure);

// ---- dry runs -------------------------------------------------------------------------------------------------

/// The probe pod sent with ?dryRun=All: "gpuslice-doctor-gpu-probe" asks for one nvidia.com/gpu with 1024 MiB
/// and 10 cores; "gpuslice-doctor-plain-probe" asks for cpu only. Neither names a scheduler.
boost::json::object make_probe_pod(bool gpu, std::string_view ns);

/// What a dry-run create returned: the object (ok) or the failure.
struct DryRun {
  std::optional<boost::json::object> pod;  ///< set when the API server accepted the dry run
  ApiError failure;                        ///< when pod is nullopt
};

/// gpu-pod-dry-run: the returned pod names `names.scheduler_name` and carries gpuslice.io/gpu-request (proof of
/// API server -> tunnel -> webhook). Unmutated but admitted: the webhook failed open and no guard stopped it.
CheckResult check_gpu_dry_run(const DryRun& result, const Names& names);

/// plain-pod-dry-run: the returned pod is untouched (default-scheduler, no gpuslice.io/ or hami.io/ annotation).
CheckResult check_plain_dry_run(const DryRun& result, const Names& names);

// ---- guard, lease, inventory ----------------------------------------------------------------------------------

/// scheduler-guard: the ValidatingAdmissionPolicy and a binding of it with the Deny action exist (nullopt = 404).
/// `bindings` are all ValidatingAdmissionPolicyBindings (those whose spec.policyName matches count).
CheckResult check_guard(const std::optional<boost::json::object>& policy,
                        const std::vector<boost::json::object>& bindings, const Names& names);

/// scheduler-lease: the scheduler's Lease (kube::Lease, as the client read it) is held (holderIdentity set) and fresh
/// (renewTime + leaseDurationSeconds >= now, 2 s of skew allowed). nullopt = 404. `names.lease_name` empty: SKIP.
CheckResult check_lease(const std::optional<kube::Lease>& lease, const Names& names,
                        std::chrono::system_clock::time_point now);

/// gpu-inventory: nodes carrying hami.io/node-nvidia-register that decode and whose allocatable nvidia.com/gpu
/// is above 0. Evidence: one line per node (cards: UUID, type, MiB, cores, slots), at most `max_listed` nodes
/// then a count. FAIL when no node is usable or any register annotation does not decode.
CheckResult check_inventory(const std::vector<boost::json::object>& nodes, std::size_t max_listed = 20);

/// Cross-checks results after all checks ran: a GPU dry run refused by the guard (webhook-not-reached) is
/// attributed, in this order, to the tunnel when the tunnel check failed with agent-not-connected, to the
/// certificate when serving-cert failed (ca-bundle-mismatch, san-mismatch, ...: the API server refused the webhook's
/// TLS), or to gpuslice itself (webhook-down: the tunnel works, nothing answered) when the tunnel check passed.
void correlate(std::vector<CheckResult>& checks);

// ---- report ---------------------------------------------------------------------------------------------------

/// The text report (format above); `header` is the first line's text after "gpuslice doctor: ".
std::string format_report(std::string_view header, const std::vector<CheckResult>& checks);
/// {"server":header,"checks":[{"name","verdict","evidence":[...],"cause","fix","cause_id"}],"passed":n,"failed":n,
/// "skipped":n}
std::string format_report_json(std::string_view header, const std::vector<CheckResult>& checks);
/// 1 when any check failed, else 0.
int exit_code(const std::vector<CheckResult>& checks);

}  // namespace gpuslice::doctor
