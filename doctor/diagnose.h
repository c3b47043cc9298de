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
// Checks, in order: webhook-config, admission-policy, serving-cert, tunnel, gpu-pod-dry-run, plain-pod-dry-run,
// scheduler-guard, scheduler-lease, gpu-inventory. The exit status is 1 when any check FAILed.
//
// Topologies (docs/deploy-kamaji.md): gpuslice's objects are found by what they are and what they point at, not
// only by the manifests' names (find_admission, find_configuration, pick_serving_certificate):
//   - worker: a webhook by clientConfig.service, a Service of any type (ExternalName included), dialed through
//     the Konnectivity tunnel;
//   - sidecar: a webhook by clientConfig.url on localhost, beside the API server (no tunnel);
//   - policy: no webhook for the probe namespace, a bound MutatingAdmissionPolicy (v1, or v1beta1) that writes
//     gpuslice's schedulerName (no tunnel, no webhook call).

#include "common/config.h"
#include "common/result.h"
#include "kube/error.h"
#include "kube/objects.h"  // kube::Lease

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include <chrono>
#include <cstdint>
#include <map>
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
  /// MutatingWebhookConfiguration name: preferred when several point at gpuslice; with
  /// webhook_configuration_explicit (--webhook-name given) the only one considered.
  std::string webhook_configuration = "gpuslice";
  bool webhook_configuration_explicit = false;
  std::string webhook = "";                           ///< webhooks[].name; empty: the only / first entry
  std::string scheduler_name = "gpuslice-scheduler";  ///< what the webhook writes into spec.schedulerName
  std::string guard_policy = "gpuslice-scheduler-guard";
  /// The namespace gpuslice runs in (its Service, Secret, ConfigMap; its Lease unless the configuration names
  /// another): --namespace, else the found webhook Service's, else kDefaultNamespace.
  std::string namespace_ = std::string(kDefaultNamespace);
  std::string lease_namespace = std::string(kDefaultNamespace);  ///< resolved by resolve_lease()
  std::string lease_name = "gpuslice-scheduler";                 ///< empty: lease check skipped
  std::string probe_namespace = "default";                       ///< where the dry-run pods are "created"
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

/// The mark charts/gpuslice's MutatingAdmissionPolicy writes on every pod it mutates
/// (templates/admission-policy.yaml): gpuslice.io/admitted-by: admission-policy.
inline constexpr std::string_view kAdmittedByAnnotation = "gpuslice.io/admitted-by";
inline constexpr std::string_view kAdmittedByPolicy = "admission-policy";

/// Label maps (namespace labels, pod labels), as scheduler/framework/pod_facts.h.
using Labels = std::map<std::string, std::string, std::less<>>;

/// How GPU pods of the probe namespace reach gpuslice's mutation.
enum class Topology {
  service_webhook,   ///< clientConfig.service: the worker topology, through the Konnectivity tunnel under Kamaji
  url_webhook,       ///< clientConfig.url: on localhost the Kamaji sidecar topology
  admission_policy,  ///< no gpuslice webhook for the namespace; a bound MutatingAdmissionPolicy
  none,              ///< nothing of gpuslice's mutates pods there
};
/// "service webhook", "url webhook", "admission policy", "none".
const char* topology_name(Topology t);

/// One webhooks[] entry that mutates pods on CREATE and is taken for gpuslice's.
struct FoundWebhook {
  std::string configuration;  ///< the MutatingWebhookConfiguration's name
  WebhookRef ref;
  std::string reason;         ///< why it is gpuslice's ("named gpuslice", "points at Service ns/x", ...)
  bool selects_probe = true;  ///< its namespaceSelector and objectSelector select the probe pod
  std::string selector_note;  ///< when !selects_probe: which selector leaves the probe namespace out
};

/// One MutatingAdmissionPolicy that writes gpuslice's schedulerName into pods on CREATE.
struct FoundPolicy {
  std::string name, api_version;
  std::string reason;
  std::vector<std::string> bindings;        ///< bindings whose namespace selector selects the probe namespace
  std::vector<std::string> other_bindings;  ///< bindings of it that leave the probe namespace out
};

/// What discovery found for the probe namespace. `webhook` is the entry that serves it (first of those that
/// select the probe pod, the preferred configuration name first); `policy` the first bound policy selecting it.
struct AdmissionPath {
  Topology topology = Topology::none;
  std::optional<FoundWebhook> webhook;
  std::optional<FoundPolicy> policy;
  std::vector<FoundWebhook> webhooks;  ///< every gpuslice webhook found (including those not selecting the probe)
  std::vector<FoundPolicy> policies;   ///< every gpuslice policy found
  std::vector<std::string> notes;      ///< entries passed over and why (bad clientConfig, ...)
  bool policies_served = true;         ///< the API server serves MutatingAdmissionPolicy (v1 or v1beta1)
};

/// Hints from gpuslice's configuration (find_configuration): the webhook's listen port, to recognise a URL
/// webhook pointing at it.
struct DiscoveryHints {
  std::vector<int> webhook_ports;
};

/// True when `rules` (webhooks[].rules, or a policy's matchConstraints.resourceRules) intercept CREATE of core/v1
/// pods (operations CREATE or *, apiGroups "" or *, resources pods or *).
bool intercepts_pod_create(const boost::json::array* rules);

/// Finds gpuslice's admission for a pod in the probe namespace (labels `probe_namespace_labels`, pod labels
/// `probe_pod_labels`) among every MutatingWebhookConfiguration, MutatingAdmissionPolicy and binding the API
/// server returned. A webhook entry is gpuslice's when it intercepts pod CREATE and: its configuration has
/// names.webhook_configuration, or the entry is *.gpuslice.io, or the configuration is labelled
/// app.kubernetes.io/name=gpuslice, or it points at a Service in names.namespace_ on path /mutate, or at a URL
/// on localhost on a configured webhook port. A policy is gpuslice's when it intercepts pod CREATE and is
/// labelled so or its mutations write names.scheduler_name into /spec/schedulerName.
AdmissionPath find_admission(const std::vector<boost::json::object>& webhook_configurations,
                             const std::vector<boost::json::object>& policies,
                             const std::vector<boost::json::object>& policy_bindings, const Names& names,
                             const Labels& probe_namespace_labels, const Labels& probe_pod_labels,
                             const DiscoveryHints& hints = {});

/// webhook-config: how the probe namespace's GPU pods are admitted. For a webhook: the entry, a caBundle that
/// base64-decodes, and its target: a Service (`service`, nullopt = 404) of type ClusterIP/NodePort/LoadBalancer
/// with the port clientConfig.service.port, or ExternalName (the API server dials <externalName>:<that port>;
/// the Service's ports are not used: kubernetes staging/src/k8s.io/apiserver/pkg/util/proxy/proxy.go
/// ResolveCluster), never headless; or a URL (on localhost: the sidecar topology). SKIP when only an admission
/// policy serves the namespace; FAIL when nothing does. On PASS, `out` receives the decoded entry.
CheckResult check_webhook_config(const AdmissionPath& path, const std::optional<boost::json::object>& service,
                                 const Names& names, std::optional<WebhookRef>& out);

/// The same for one configuration (nullopt = 404): find_admission over it alone, any namespace.
CheckResult check_webhook_config(const std::optional<boost::json::object>& mwc,
                                 const std::optional<boost::json::object>& service, const Names& names,
                                 std::optional<WebhookRef>& out);

/// admission-policy: a gpuslice MutatingAdmissionPolicy bound for the probe namespace (PASS); one found but not
/// bound for it while no webhook serves the namespace (FAIL); none, or not served, beside a webhook (SKIP).
CheckResult check_admission_policy(const AdmissionPath& path, const Names& names);

// ---- gpuslice's configuration and Lease -------------------------------------------------------------------------

/// gpuslice's configuration as doctor found it.
struct FoundConfiguration {
  Configuration config;
  std::string source;              ///< "ConfigMap ns/name (config.yaml)" or "--config FILE"
  std::string namespace_;          ///< the ConfigMap's namespace ("" for a file): the namespace gpuslice runs in
  std::vector<std::string> notes;  ///< other candidates and why they were passed over
};

/// Picks gpuslice's configuration among ConfigMaps (a data value with kind GpusliceConfiguration that parses):
/// those with names.scheduler_name first; for a URL webhook the one whose webhook listens on the URL's port, for
/// a Service webhook one that does not listen on loopback only; then by name. nullopt when none parses.
std::optional<FoundConfiguration> find_configuration(const std::vector<boost::json::object>& config_maps,
                                                     const Names& names, const std::optional<WebhookRef>& webhook);

/// The webhook listen port of a configuration (webhook.bindAddress "host:port"), when enabled.
std::optional<int> webhook_port_of(const Configuration& config);

/// The Lease doctor reads: --lease/--lease-namespace when given (`*_explicit`), else the configuration's
/// leaderElection by common/config.h's effective_lease_namespace (the rule `serve` uses), the running namespace
/// being the ConfigMap's, else names.namespace_. Writes names.lease_name/lease_namespace; returns the evidence
/// line ("Lease named by ..."). leaderElect false in the configuration: lease_name becomes empty (SKIP).
std::string resolve_lease(Names& names, const std::optional<FoundConfiguration>& config, bool lease_name_explicit,
                          bool lease_namespace_explicit);

/// The other place `serve` may have put the Lease. resolve_lease takes the ConfigMap's namespace for where gpuslice
/// runs (in cluster: its pod's namespace); run out of cluster (a Kamaji sidecar, a process with a kubeconfig)
/// serve knows no namespace and, with scheduler.leaderElection.resourceNamespace unset, uses gpuslice-system
/// (scheduler/loop_service.cc: effective_lease_namespace(leaderElection, "")). The namespace to read when the
/// Lease is not in names.lease_namespace; nullopt when there is no other (resourceNamespace set, --lease-namespace
/// given, leader election off, or the same namespace).
std::optional<std::string> out_of_cluster_lease_namespace(const Names& names,
                                                          const std::optional<FoundConfiguration>& config,
                                                          bool lease_namespace_explicit);
/// The evidence line for that second look: the Lease was not in `first_namespace`, and was (`found`) or was not
/// in `other_namespace`, where serve run out of cluster puts it; says how to make it explicit.
std::string out_of_cluster_lease_note(std::string_view first_namespace, std::string_view other_namespace,
                                      std::string_view lease_name, bool found);

/// serving-cert: the caBundle holds a CA; when the serving certificate is known (`serving_cert_pem` from
/// --serving-cert or the TLS Secret, `source` says which), it chains to the caBundle at `now_unix` and has the
/// SAN the API server dials. Without a readable certificate only the CA is checked (PASS with a note).
CheckResult check_serving_cert(const WebhookRef& ref, const std::optional<std::string>& serving_cert_pem,
                               std::string_view source, int64_t now_unix);

/// The data of a kubernetes.io/tls Secret: base64-decoded data["tls.crt"], or an error naming the field.
Result<std::string> tls_crt_from_secret(const boost::json::object& secret);

/// The webhook's serving certificate among kubernetes.io/tls Secrets: the one named `preferred` when it chains
/// to the caBundle, else one that chains to it and names the host the API server verifies, else the one named
/// `preferred` (to report its mismatch). nullopt: none (serving-cert then checks the CA only).
struct ServingCertificate {
  std::string pem;
  std::string source;  ///< "Secret ns/name" (+ " (found by its chain to the caBundle)")
};
std::optional<ServingCertificate> pick_serving_certificate(const std::vector<boost::json::object>& secrets,
                                                           std::string_view preferred, const WebhookRef& ref,
                                                           int64_t now_unix);

// ---- tunnel ---------------------------------------------------------------------------------------------------

/// tunnel: the result of GET /api/v1/nodes/<node>/proxy/healthz, which the API server dials through its
/// `cluster` egress (the Konnectivity tunnel, as service-referenced webhooks are). "No agent available" means
/// no agent is connected; a dial error from the worker's network ("connect: ...") means the agent answered.
/// `node` empty: no node to probe (SKIP). `failure` nullopt: the probe got a response (PASS).
CheckResult check_tunnel(std::string_view node, const std::optional<ApiError>& failure);
/// The same, knowing the topology: when gpuslice's admission does not cross the tunnel (url webhook, admission
/// policy), a broken tunnel is reported as SKIP ("not on gpuslice's path"), not FAIL.
CheckResult check_tunnel(std::string_view node, const std::optional<ApiError>& failure, Topology topology);

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
/// API server -> tunnel -> webhook), or, in the policy topology, gpuslice.io/admitted-by: admission-policy (the
/// MutatingAdmissionPolicy's mark). With a webhook serving the namespace, a pod mutated by the policy alone
/// FAILs (webhook-fallback: admitted by the fallback, the webhook not reached). Unmutated but admitted: the
/// webhook failed open and no guard stopped it.
CheckResult check_gpu_dry_run(const DryRun& result, const Names& names, Topology topology);
/// The same for the service-webhook topology.
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
/// The same, knowing the topology: for a url webhook the refusal is blamed on the certificate or on the
/// webhook at the URL (webhook-down); with nothing serving the namespace, on that (no-admission); in the policy
/// topology, on the policy not applying (policy-not-applied).
void correlate(std::vector<CheckResult>& checks, const AdmissionPath& path);

// ---- report ---------------------------------------------------------------------------------------------------

/// The text report (format above); `header` is the first line's text after "gpuslice doctor: ".
std::string format_report(std::string_view header, const std::vector<CheckResult>& checks);
/// {"server":header,"checks":[{"name","verdict","evidence":[...],"cause","fix","cause_id"}],"passed":n,"failed":n,
/// "skipped":n}
std::string format_report_json(std::string_view header, const std::vector<CheckResult>& checks);
/// 1 when any check failed, else 0.
int exit_code(const std::vector<CheckResult>& checks);

}  // namespace gpuslice::doctor
