// The decisions of `gpuslice doctor`: observations in, PASS/FAIL/SKIP with evidence, cause and fix out.
#include "doctor/diagnose.h"

#include "certs/inspect.h"
#include "common/base64.h"
#include "common/gpu_request.h"
#include "common/json_access.h"
#include "common/quantity.h"
#include "scheduler/framework/pod_facts.h"
#include "scheduler/inventory.h"

#include <boost/json/array.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/string.hpp>
#include <boost/json/value.hpp>

#include <algorithm>
#include <cctype>

namespace gpuslice::doctor {
namespace json = boost::json;

namespace {

bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

bool icontains(std::string_view haystack, std::string_view needle) {
  auto it = std::search(haystack.begin(), haystack.end(), needle.begin(), needle.end(), [](char a, char b) {
    return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
  });
  return it != haystack.end();
}

std::optional<int64_t> int_at(const json::object& o, std::string_view key) {
  auto it = o.find(key);
  if (it == o.end()) {
    return std::nullopt;
  }
  if (it->value().is_int64()) {
    return it->value().get_int64();
  }
  if (it->value().is_uint64()) {
    return static_cast<int64_t>(it->value().get_uint64());
  }
  return std::nullopt;
}

CheckResult make_fail(std::string name, std::vector<std::string> evidence, Diagnosis d) {
  return CheckResult{std::move(name),    Verdict::fail,    std::move(evidence),
                     std::move(d.cause), std::move(d.fix), std::move(d.id)};
}

std::vector<std::string> annotation_keys_with_prefix(const json::object& obj, std::string_view prefix) {
  std::vector<std::string> out;
  if (const auto* ann = annotations_of(obj)) {
    for (const auto& kv : *ann) {
      if (kv.key().starts_with(prefix)) {
        out.emplace_back(kv.key());
      }
    }
  }
  return out;
}

std::string scheduler_name_of(const json::object& pod) {
  if (const auto* spec = object_at(pod, "spec")) {
    return string_at(*spec, "schedulerName");
  }
  return {};
}

std::string join(const std::vector<std::string>& v, std::string_view sep) {
  std::string out;
  for (const auto& s : v) {
    if (!out.empty()) {
      out += sep;
    }
    out += s;
  }
  return out;
}

}  // namespace

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::pass:
      return "PASS";
    case Verdict::fail:
      return "FAIL";
    case Verdict::skip:
      return "SKIP";
  }
  return "FAIL";
}

// ---- error mapping --------------------------------------------------------------------------------------------

Diagnosis diagnose_admission_error(const ApiError& f, const Names& names) {
  const std::string& m = f.message;
  if (f.code == 0) {
    // No answer from the API server at all: the message is about our own connection, not the webhook's.
    return diagnose_api_error(f, "the dry-run create");
  }
  // The guard's denial first: its message quotes the webhook's failure only indirectly.
  if (contains(m, names.guard_policy) || contains(m, "ValidatingAdmissionPolicy")) {
    return {
        "the webhook was not reached (Konnectivity tunnel, agent or gpuslice down; failurePolicy Ignore let "
        "the pod through unmutated) and the scheduler guard " +
            names.guard_policy + " refused it: GPU pods are being held back, non-GPU pods are unaffected",
        "see the tunnel check; on the worker check the konnectivity-agent and gpuslice (webhook) are running; "
        "GPU pods are admitted again as soon as the webhook answers, nothing needs restarting",
        "webhook-not-reached"};
  }
  if (contains(m, "No agent available")) {
    return {
        "Konnectivity agent not connected: the tenant's API server has no tunnel to the worker network, so it "
        "cannot dial the webhook Service",
        "start or restart konnectivity-agent on the worker (kube-system/konnectivity-agent), check its logs and "
        "the proxy-server's (\"Failed to get a backend\"); with several control-plane replicas run the agent with "
        "--sync-forever=true",
        "agent-not-connected"};
  }
  if (icontains(m, "x509") || icontains(m, "tls: ") || icontains(m, "certificate")) {
    if (icontains(m, "certificate is valid for") || icontains(m, "not valid for any names") ||
        icontains(m, "doesn't contain any IP SANs") || icontains(m, "cannot validate certificate for")) {
      return {"SAN mismatch: the webhook's serving certificate lacks the name the API server dials (<svc>.<ns>.svc)",
              "reissue the serving certificate with the SAN <svc>.<ns>.svc (gpuslice certs --service <svc> "
              "--namespace <ns>) and reload gpuslice (it watches its certificate files)",
              "san-mismatch"};
    }
    if (icontains(m, "expired") || icontains(m, "not yet valid")) {
      return {"the webhook's serving certificate has expired or is not yet valid",
              "rotate the serving certificate (gpuslice certs, or let cert-manager renew it) and check the clocks",
              "cert-expired"};
    }
    return {
        "caBundle mismatch: the webhook's serving certificate is not signed by the CA in the "
        "MutatingWebhookConfiguration's caBundle (x509: unknown authority)",
        "put the CA that signed the serving certificate into clientConfig.caBundle (kubectl apply -k the overlay "
        "with the certs-gpuslice component, or cert-manager's CA injection), or reissue the certificate",
        "ca-bundle-mismatch"};
  }
  if (icontains(m, "connection refused")) {
    return {
        "the webhook is not listening where the Service points (gpuslice not running on the worker, or the "
        "Service's port/targetPort is wrong)",
        "start gpuslice serve on the worker and check the Service and clientConfig.service.port match the "
        "webhook's listen port",
        "webhook-not-listening"};
  }
  if (icontains(m, "context deadline exceeded") || icontains(m, "Client.Timeout") || icontains(m, "i/o timeout") ||
      f.reason == kube::kReasonTimeout || f.code == 504) {  // metav1 StatusReasonTimeout has the same name
    return {
        "the webhook did not answer within timeoutSeconds: gpuslice hung or overloaded, the Service points to "
        "an address nothing answers on, or the tunnel dial is stuck (kubernetes#140512)",
        "check gpuslice's logs and /readyz on the worker, the Service, and the konnectivity-agent's logs",
        "webhook-timeout"};
  }
  if (icontains(m, "connection reset") || icontains(m, "broken pipe") || icontains(m, "EOF")) {
    return {"the tunnel dropped the connection to the webhook (agent restarted, or the webhook closed it)",
            "retry; if it persists check the konnectivity-agent and gpuslice logs and run >= 2 webhook replicas",
            "tunnel-reset"};
  }
  if (icontains(m, "no such host") || (contains(m, "service") && contains(m, "not found"))) {
    return {"the webhook's Service does not exist or does not resolve",
            "apply the manifests (Service gpuslice-webhook in gpuslice-system) and check clientConfig.service",
            "service-missing"};
  }
  if (icontains(m, "denied the request")) {
    return {"the webhook itself denied the probe pod (gpuslice's policy refused it)",
            "read the message; if the probe is wrong for this cluster, report it", "webhook-denied"};
  }
  if (f.code == 403) {
    return {"the doctor's credentials may not create pods in namespace " + names.probe_namespace +
                " (a dry run needs the same RBAC as a create)",
            "run gpuslice doctor with an admin kubeconfig, or grant create on pods in " + names.probe_namespace,
            "rbac"};
  }
  if (f.code == 404) {
    return {"namespace " + names.probe_namespace + " does not exist",
            "pass --probe-namespace with an existing namespace that the webhook does not ignore", "namespace-missing"};
  }
  return {"unrecognised admission failure (" + f.to_string() + ")",
          "read the message above and the API server's log for \"failed calling webhook\"", "unknown"};
}

Diagnosis diagnose_api_error(const ApiError& f, std::string_view what) {
  std::string w(what);
  if (f.code == 401) {
    return {"the API server rejected the credentials", "check the kubeconfig's user (expired token or certificate)",
            "unauthorized"};
  }
  if (f.code == 403) {
    return {"the doctor's credentials may not read " + w, "run gpuslice doctor with an admin kubeconfig", "rbac"};
  }
  if (f.code == 404) {
    return {w + " does not exist", "apply gpuslice's manifests (kubectl apply -k manifests/overlays/<tenant>)",
            "not-found"};
  }
  if (f.is_timeout()) {
    return {"the API server did not answer in time", "check the API server (its /readyz) and the network path to it",
            "api-timeout"};
  }
  if (f.code == 0) {
    return {"the API server is not reachable (" + f.reason + ")",
            "check --kubeconfig, the server address and that the API server is running", "api-unreachable"};
  }
  return {"the API server answered " + f.to_string(), "read the message and the API server's log", "api-error"};
}

CheckResult failed_read(std::string check, std::string_view what, const ApiError& failure) {
  return make_fail(std::move(check), {std::string(what) + ": " + failure.to_string()},
                   diagnose_api_error(failure, what));
}

// ---- webhook configuration ------------------------------------------------------------------------------------

std::string WebhookRef::server_name() const {
  if (!service_name.empty()) {
    return service_name + "." + service_namespace + ".svc";
  }
  // https://host[:port]/path -> host
  std::string_view u = url;
  if (auto p = u.find("://"); p != std::string_view::npos) {
    u.remove_prefix(p + 3);
  }
  u = u.substr(0, u.find('/'));
  if (!u.empty() && u.front() == '[') {
    return std::string(u.substr(1, u.find(']') - 1));
  }
  return std::string(u.substr(0, u.rfind(':')));
}

namespace {

Result<WebhookRef> parse_webhook_entry(const json::object& hook) {
  WebhookRef ref;
  ref.entry = string_at(hook, "name");
  ref.failure_policy = string_at(hook, "failurePolicy");
  if (ref.failure_policy.empty()) {
    ref.failure_policy = "Fail";
  }
  ref.timeout_seconds = static_cast<int>(int_at(hook, "timeoutSeconds").value_or(10));
  const auto* cc = object_at(hook, "clientConfig");
  if (cc == nullptr) {
    return make_error("webhooks[" + ref.entry + "].clientConfig: missing");
  }
  ref.url = string_at(*cc, "url");
  if (const auto* svc = object_at(*cc, "service")) {
    ref.service_namespace = string_at(*svc, "namespace");
    ref.service_name = string_at(*svc, "name");
    ref.path = string_at(*svc, "path");
    ref.port = static_cast<int>(int_at(*svc, "port").value_or(443));
  }
  if (ref.url.empty() && ref.service_name.empty()) {
    return make_error("webhooks[" + ref.entry + "].clientConfig: neither service nor url is set");
  }
  std::string b64 = string_at(*cc, "caBundle");
  if (!b64.empty()) {
    auto pem = base64_decode(b64);
    if (pem) {
      ref.ca_bundle_pem = std::move(*pem);
    } else {
      ref.ca_bundle_valid_base64 = false;
    }
  }
  return ref;
}

bool has_string(const json::array* a, std::initializer_list<std::string_view> wanted) {
  if (a == nullptr) {
    return false;
  }
  for (const auto& v : *a) {
    if (!v.is_string()) {
      continue;
    }
    for (auto w : wanted) {
      if (v.get_string() == w) {
        return true;
      }
    }
  }
  return false;
}

std::string name_of_object(const json::object& o) {
  const auto* md = object_at(o, "metadata");
  return md ? string_at(*md, "name") : std::string();
}

Labels labels_at(const json::object& o) {
  Labels out;
  if (const auto* md = object_at(o, "metadata")) {
    if (const auto* l = object_at(*md, "labels")) {
      for (const auto& kv : *l) {
        if (kv.value().is_string()) {
          out.emplace(std::string(kv.key()), std::string(kv.value().get_string()));
        }
      }
    }
  }
  return out;
}

bool labelled_gpuslice(const json::object& o) {
  auto l = labels_at(o);
  auto it = l.find("app.kubernetes.io/name");
  return it != l.end() && it->second == "gpuslice";
}

// A metav1.LabelSelector field of `o` (absent: everything) against `labels`; `why` gets the reason it does not.
bool selector_selects(const json::object& o, std::string_view field, const Labels& labels, std::string& why) {
  const auto* sel = object_at(o, field);
  if (sel == nullptr) {
    return true;
  }
  auto parsed = scheduler::parse_label_selector(*sel, std::string(field));
  if (!parsed) {
    why = parsed.message();
    return false;
  }
  scheduler::Labels set;  // the scheduler's label set (a sorted vector), which its selectors read
  set.reserve(labels.size());
  for (const auto& [k, v] : labels) {
    set.emplace(k, v);
  }
  if (parsed->matches(set)) {
    return true;
  }
  why = std::string(field) + " " + json::serialize(*sel) + " does not select it";
  return false;
}

// host and port of https://host[:port]/path (port 443 when absent); host without brackets.
std::pair<std::string, int> url_host_port(std::string_view u) {
  if (auto p = u.find("://"); p != std::string_view::npos) {
    u.remove_prefix(p + 3);
  }
  u = u.substr(0, u.find('/'));
  std::string host;
  std::string_view rest;
  if (!u.empty() && u.front() == '[') {
    auto close = u.find(']');
    host = std::string(u.substr(1, close == std::string_view::npos ? std::string_view::npos : close - 1));
    rest = close == std::string_view::npos ? std::string_view() : u.substr(close + 1);
  } else {
    auto colon = u.rfind(':');
    host = std::string(u.substr(0, colon));
    rest = colon == std::string_view::npos ? std::string_view() : u.substr(colon);
  }
  int port = 443;
  if (rest.size() > 1 && rest.front() == ':') {
    port = 0;
    for (char c : rest.substr(1)) {
      if (!std::isdigit(static_cast<unsigned char>(c)) || port > 65535) {
        return {host, -1};
      }
      port = port * 10 + (c - '0');
    }
  }
  return {host, port};
}

bool loopback_host(std::string_view h) {
  return h == "localhost" || h == "::1" || h.starts_with("127.");
}

std::string url_path(std::string_view u) {
  if (auto p = u.find("://"); p != std::string_view::npos) {
    u.remove_prefix(p + 3);
  }
  auto slash = u.find('/');
  return slash == std::string_view::npos ? std::string() : std::string(u.substr(slash));
}

// Whether a policy's mutations write `scheduler` into /spec/schedulerName (the CEL text names both).
bool policy_writes_scheduler(const json::object& spec, std::string_view scheduler) {
  const auto* muts = array_at(spec, "mutations");
  if (muts == nullptr) {
    return false;
  }
  for (const auto& m : *muts) {
    if (!m.is_object()) {
      continue;
    }
    std::string text = json::serialize(m);  // jsonPatch.expression or applyConfiguration.expression
    if (contains(text, "schedulerName") && contains(text, std::string(scheduler))) {
      return true;
    }
  }
  return false;
}

}  // namespace

const char* topology_name(Topology t) {
  switch (t) {
    case Topology::service_webhook:
      return "service webhook";
    case Topology::url_webhook:
      return "url webhook";
    case Topology::admission_policy:
      return "admission policy";
    case Topology::none:
      return "none";
  }
  return "none";
}

bool intercepts_pod_create(const json::array* rules) {
  if (rules == nullptr) {
    return false;
  }
  for (const auto& r : *rules) {
    if (!r.is_object()) {
      continue;
    }
    const auto& o = r.get_object();
    if (has_string(array_at(o, "operations"), {"CREATE", "*"}) && has_string(array_at(o, "apiGroups"), {"", "*"}) &&
        has_string(array_at(o, "resources"), {"pods", "*"})) {
      return true;
    }
  }
  return false;
}

Result<WebhookRef> parse_webhook_config(const json::object& mwc, const Names& names) {
  const auto* hooks = array_at(mwc, "webhooks");
  if (hooks == nullptr || hooks->empty()) {
    return make_error("MutatingWebhookConfiguration " + names.webhook_configuration + ": webhooks: empty");
  }
  const json::object* hook = nullptr;
  std::vector<std::string> seen;
  for (const auto& h : *hooks) {
    if (!h.is_object()) {
      continue;
    }
    std::string n = string_at(h.get_object(), "name");
    seen.push_back(n);
    if (names.webhook.empty() || n == names.webhook) {
      hook = &h.get_object();
      break;
    }
  }
  if (hook == nullptr) {
    return make_error("MutatingWebhookConfiguration " + names.webhook_configuration + ": no webhooks[] entry named \"" +
                      names.webhook + "\" (entries: " + join(seen, ", ") + ")");
  }
  return parse_webhook_entry(*hook);
}

AdmissionPath find_admission(const std::vector<json::object>& webhook_configurations,
                             const std::vector<json::object>& policies,
                             const std::vector<json::object>& policy_bindings, const Names& names,
                             const Labels& probe_namespace_labels, const Labels& probe_pod_labels,
                             const DiscoveryHints& hints) {
  AdmissionPath path;
  for (const auto& mwc : webhook_configurations) {
    const std::string config_name = name_of_object(mwc);
    if (names.webhook_configuration_explicit && config_name != names.webhook_configuration) {
      continue;
    }
    const auto* hooks = array_at(mwc, "webhooks");
    if (hooks == nullptr) {
      continue;
    }
    for (const auto& h : *hooks) {
      if (!h.is_object()) {
        continue;
      }
      const auto& hook = h.get_object();
      const std::string entry = string_at(hook, "name");
      if (!names.webhook.empty() && entry != names.webhook) {
        continue;
      }
      if (!intercepts_pod_create(array_at(hook, "rules"))) {
        continue;
      }
      auto ref = parse_webhook_entry(hook);
      std::string reason;
      if (config_name == names.webhook_configuration) {
        reason = "named " + config_name;
      } else if (entry.ends_with(".gpuslice.io")) {
        reason = "webhooks[].name " + entry;
      } else if (labelled_gpuslice(mwc)) {
        reason = "labelled app.kubernetes.io/name=gpuslice";
      } else if (ref && !ref->service_name.empty() && ref->service_namespace == names.namespace_ &&
                 ref->path == "/mutate") {
        reason = "points at Service " + ref->service_namespace + "/" + ref->service_name + " /mutate";
      } else if (ref && !ref->url.empty()) {
        auto [host, port] = url_host_port(ref->url);
        if (loopback_host(host) && url_path(ref->url) == "/mutate" &&
            std::find(hints.webhook_ports.begin(), hints.webhook_ports.end(), port) != hints.webhook_ports.end()) {
          reason = "points at gpuslice's configured webhook port " + std::to_string(port) + " on localhost";
        }
      }
      if (reason.empty()) {
        continue;  // another project's pod webhook
      }
      if (!ref) {
        path.notes.push_back("MutatingWebhookConfiguration " + config_name + " (" + reason + "): " + ref.message());
        continue;
      }
      FoundWebhook found{config_name, std::move(*ref), std::move(reason), true, {}};
      std::string why;
      if (!selector_selects(hook, "namespaceSelector", probe_namespace_labels, why) ||
          !selector_selects(hook, "objectSelector", probe_pod_labels, why)) {
        found.selects_probe = false;
        found.selector_note = std::move(why);
      }
      path.webhooks.push_back(std::move(found));
    }
  }
  // The preferred name first, then by configuration name (the API server's list order).
  std::stable_sort(path.webhooks.begin(), path.webhooks.end(), [&](const FoundWebhook& a, const FoundWebhook& b) {
    return (a.configuration == names.webhook_configuration) > (b.configuration == names.webhook_configuration);
  });
  for (const auto& w : path.webhooks) {
    if (w.selects_probe) {
      path.webhook = w;
      break;
    }
  }

  for (const auto& p : policies) {
    const auto* spec = object_at(p, "spec");
    if (spec == nullptr) {
      continue;
    }
    const auto* mc = object_at(*spec, "matchConstraints");
    if (mc == nullptr || !intercepts_pod_create(array_at(*mc, "resourceRules"))) {
      continue;
    }
    std::string reason;
    if (policy_writes_scheduler(*spec, names.scheduler_name)) {
      reason = "writes spec.schedulerName " + names.scheduler_name;
    } else if (labelled_gpuslice(p)) {
      reason = "labelled app.kubernetes.io/name=gpuslice";
    } else {
      continue;
    }
    FoundPolicy found{name_of_object(p), string_at(p, "apiVersion"), std::move(reason), {}, {}};
    std::string why;
    bool constraints_select = selector_selects(*mc, "namespaceSelector", probe_namespace_labels, why) &&
                              selector_selects(*mc, "objectSelector", probe_pod_labels, why);
    for (const auto& b : policy_bindings) {
      const auto* bspec = object_at(b, "spec");
      if (bspec == nullptr || string_at(*bspec, "policyName") != found.name) {
        continue;
      }
      const auto* mr = object_at(*bspec, "matchResources");
      std::string bwhy;
      bool selects = constraints_select &&
                     (mr == nullptr || (selector_selects(*mr, "namespaceSelector", probe_namespace_labels, bwhy) &&
                                        selector_selects(*mr, "objectSelector", probe_pod_labels, bwhy)));
      (selects ? found.bindings : found.other_bindings).push_back(name_of_object(b));
    }
    path.policies.push_back(std::move(found));
  }
  for (const auto& p : path.policies) {
    if (!p.bindings.empty()) {
      path.policy = p;
      break;
    }
  }
  path.topology = path.webhook
                      ? (path.webhook->ref.service_name.empty() ? Topology::url_webhook : Topology::service_webhook)
                  : path.policy ? Topology::admission_policy
                                : Topology::none;
  return path;
}

CheckResult check_webhook_config(const std::optional<json::object>& mwc, const std::optional<json::object>& service,
                                 const Names& names, std::optional<WebhookRef>& out) {
  std::vector<json::object> mwcs;
  if (mwc) {
    mwcs.push_back(*mwc);
    // One configuration given: it is the one, whatever its name.
  }
  Names n = names;
  n.webhook_configuration = mwc ? name_of_object(*mwc) : names.webhook_configuration;
  n.webhook_configuration_explicit = true;
  AdmissionPath path = find_admission(mwcs, {}, {}, n, {}, {});
  if (mwc && path.webhooks.empty() && path.notes.empty()) {
    // Not a pod webhook at all: report its first entry's parse result as before.
    auto ref = parse_webhook_config(*mwc, n);
    if (!ref) {
      path.notes.push_back(ref.message());
    }
  }
  return check_webhook_config(path, service, n, out);
}

CheckResult check_webhook_config(const AdmissionPath& path, const std::optional<json::object>& service,
                                 const Names& names, std::optional<WebhookRef>& out) {
  const std::string check = "webhook-config";
  out.reset();
  std::vector<std::string> ev;
  for (const auto& w : path.webhooks) {
    if (!w.selects_probe) {
      ev.push_back("MutatingWebhookConfiguration " + w.configuration + " (" + w.reason + "), webhook " + w.ref.entry +
                   ": not for namespace " + names.probe_namespace + ": " + w.selector_note);
    }
  }
  ev.insert(ev.end(), path.notes.begin(), path.notes.end());
  if (!path.webhook) {
    if (path.policy) {
      ev.push_back("no gpuslice webhook serves namespace " + names.probe_namespace +
                   ": GPU pods there are mutated inside the API server by MutatingAdmissionPolicy " +
                   path.policy->name + " (see admission-policy)");
      return CheckResult{check, Verdict::skip, std::move(ev), {}, {}, {}};
    }
    if (path.webhooks.empty() && path.notes.empty()) {
      ev.insert(
          ev.begin(),
          names.webhook_configuration_explicit
              ? "MutatingWebhookConfiguration " + names.webhook_configuration + ": not found, or it mutates no pods"
              : "no MutatingWebhookConfiguration mutating pods points at gpuslice (looked for the name " +
                    names.webhook_configuration +
                    ", an entry *.gpuslice.io, the label app.kubernetes.io/name=gpuslice, a Service in " +
                    names.namespace_ + ", a URL on localhost on gpuslice's webhook port)");
      return make_fail(check, std::move(ev),
                       {"gpuslice's webhook is not registered (and no gpuslice MutatingAdmissionPolicy is bound): no "
                        "pod is mutated and GPU pods are refused by the guard (or, without the guard, go to the "
                        "default scheduler)",
                        "apply the manifests (kubectl apply -k manifests/overlays/<tenant>, or helm install "
                        "charts/gpuslice); pass --webhook-name if yours is named otherwise",
                        "webhook-config-missing"});
    }
    if (!path.notes.empty() && path.webhooks.empty()) {
      return make_fail(
          check, std::move(ev),
          {"the MutatingWebhookConfiguration is incomplete or names another webhook",
           "re-apply manifests/base/webhook.yaml, or pass --webhook with the entry's name", "webhook-config-invalid"});
    }
    return make_fail(check, std::move(ev),
                     {"no gpuslice webhook (nor a bound gpuslice MutatingAdmissionPolicy) serves namespace " +
                          names.probe_namespace + ": its GPU pods are refused by the guard",
                      "pass --probe-namespace with a namespace gpuslice serves, or fix the webhook's "
                      "namespaceSelector/objectSelector (or the policy binding's)",
                      "namespace-not-served"});
  }
  const FoundWebhook& w = *path.webhook;
  const WebhookRef& r = w.ref;
  std::string target = r.service_name.empty() ? "url " + r.url
                                              : "service " + r.service_namespace + "/" + r.service_name + ":" +
                                                    std::to_string(r.port) + (r.path.empty() ? "" : r.path);
  ev.push_back("MutatingWebhookConfiguration " + w.configuration + " (" + w.reason + "), webhook " + r.entry + " -> " +
               target + " (failurePolicy " + r.failure_policy + ", timeoutSeconds " +
               std::to_string(r.timeout_seconds) + ")");
  if (path.webhooks.size() > 1) {
    std::vector<std::string> others;
    for (const auto& o : path.webhooks) {
      if (o.configuration != w.configuration || o.ref.entry != w.ref.entry) {
        others.push_back(o.configuration + "/" + o.ref.entry + (o.selects_probe ? " (also serves it)" : ""));
      }
    }
    ev.push_back("other gpuslice webhooks: " + join(others, ", "));
  }
  if (!r.ca_bundle_valid_base64) {
    return make_fail(check, ev,
                     {"clientConfig.caBundle is not valid base64",
                      "set caBundle to base64 -w0 of the CA certificate PEM (the certs-gpuslice component does it)",
                      "ca-bundle-invalid"});
  }
  if (r.ca_bundle_pem.empty()) {
    ev.push_back("clientConfig.caBundle: empty");
    return make_fail(
        check, ev,
        {"caBundle missing: the API server verifies the webhook against the system roots and fails with "
         "x509: certificate signed by unknown authority",
         "apply the overlay with the certs-gpuslice component (or cert-manager's CA injection)", "ca-bundle-missing"});
  }
  if (r.service_name.empty()) {
    auto [host, port] = url_host_port(r.url);
    if (!r.url.starts_with("https://") || port <= 0) {
      ev.push_back("clientConfig.url: \"" + r.url + "\" is not https://host[:port]/path");
      return make_fail(
          check, ev,
          {"the API server only calls webhooks over https", "set clientConfig.url to https://...", "url-invalid"});
    }
    if (loopback_host(host)) {
      ev.push_back("registered by url on localhost (" + host + ":" + std::to_string(port) +
                   "): the sidecar topology, the API server calls gpuslice beside it in its own network, no tunnel");
    } else {
      ev.push_back("registered by url " + host + ":" + std::to_string(port) +
                   ": the API server dials it directly (under Kamaji from the management cluster, not through the "
                   "tunnel), so it must be reachable there; the dry run below is the proof");
    }
    out = r;
    return CheckResult{check, Verdict::pass, std::move(ev), {}, {}, {}};
  }
  if (!service) {
    ev.push_back("Service " + r.service_namespace + "/" + r.service_name + ": not found");
    return make_fail(check, ev,
                     {"the webhook's Service does not exist, so the API server cannot resolve the webhook",
                      "apply the manifests (manifests/base/service.yaml)", "service-missing"});
  }
  const auto* spec = object_at(*service, "spec");
  std::string type = spec ? string_at(*spec, "type") : std::string();
  if (type.empty()) {
    type = "ClusterIP";
  }
  std::vector<std::string> ports;
  bool port_found = false;
  if (spec) {
    if (const auto* ps = array_at(*spec, "ports")) {
      for (const auto& p : *ps) {
        if (p.is_object()) {
          auto port = int_at(p.get_object(), "port");
          if (port) {
            ports.push_back(std::to_string(*port));
            port_found = port_found || *port == r.port;
          }
        }
      }
    }
  }
  const std::string svc_id = "Service " + r.service_namespace + "/" + r.service_name;
  // How kube-apiserver turns a service reference into an address (staging/src/k8s.io/apiserver/pkg/util/proxy/
  // proxy.go, ResolveCluster): ExternalName -> <externalName>:<clientConfig.service.port>, the Service's ports
  // unused; ClusterIP/NodePort/LoadBalancer -> <clusterIP>:<the Service port equal to clientConfig.service.port>;
  // headless (clusterIP None) and other types cannot be routed.
  if (type == "ExternalName") {
    std::string external = spec ? string_at(*spec, "externalName") : std::string();
    ev.push_back(svc_id + ": ExternalName " + (external.empty() ? std::string("(empty)") : external) +
                 ": the API server dials " + external + ":" + std::to_string(r.port) +
                 " (clientConfig.service.port; the Service's ports are not used" +
                 (ports.empty() ? std::string() : ", it lists " + join(ports, ",")) + ")");
    if (external.empty()) {
      return make_fail(check, ev,
                       {"the ExternalName Service names no host (spec.externalName is empty)",
                        "set spec.externalName to the host gpuslice's webhook answers on", "service-invalid"});
    }
    out = r;
    return CheckResult{check, Verdict::pass, std::move(ev), {}, {}, {}};
  }
  std::string ip = spec ? string_at(*spec, "clusterIP") : std::string();
  ev.push_back(svc_id + ": " + type + (ip.empty() ? std::string() : " " + ip) + ", ports " +
               (ports.empty() ? std::string("none") : join(ports, ",")));
  if (type != "ClusterIP" && type != "NodePort" && type != "LoadBalancer") {
    return make_fail(check, ev,
                     {"the API server cannot route a webhook to a Service of type " + type,
                      "use a ClusterIP (or ExternalName) Service", "service-type-unsupported"});
  }
  if (ip == "None") {
    return make_fail(check, ev,
                     {"the Service is headless (spec.clusterIP: None): the API server cannot route a webhook to it",
                      "use a Service with a cluster IP (manifests/base/service.yaml) or an ExternalName Service",
                      "service-headless"});
  }
  if (!port_found) {
    return make_fail(check, ev,
                     {"the Service has no port " + std::to_string(r.port) +
                          " (clientConfig.service.port): the API server cannot resolve the webhook",
                      "make clientConfig.service.port match a port of the Service", "service-port-mismatch"});
  }
  out = r;
  return CheckResult{check, Verdict::pass, std::move(ev), {}, {}, {}};
}

CheckResult check_admission_policy(const AdmissionPath& path, const Names& names) {
  const std::string check = "admission-policy";
  std::vector<std::string> ev;
  if (!path.policies_served && path.policies.empty()) {
    ev.push_back("the API server serves no MutatingAdmissionPolicy (admissionregistration.k8s.io v1 or v1beta1)");
    return CheckResult{check, Verdict::skip, std::move(ev), {}, {}, {}};
  }
  for (const auto& p : path.policies) {
    ev.push_back("MutatingAdmissionPolicy " + p.name + " (" + p.api_version + ", " + p.reason + "): bound for " +
                 names.probe_namespace + " by " + (p.bindings.empty() ? std::string("none") : join(p.bindings, ",")) +
                 (p.other_bindings.empty() ? std::string() : "; other bindings " + join(p.other_bindings, ",")));
  }
  if (path.policy) {
    ev.push_back(path.webhook ? "with the webhook: the API server applies the policy, then calls the webhook (whose "
                                "mutation is idempotent); the policy admits GPU pods while the webhook is unreachable"
                              : "GPU pods of " + names.probe_namespace +
                                    " are mutated inside the API server: no webhook call, no tunnel");
    return CheckResult{check, Verdict::pass, std::move(ev), {}, {}, {}};
  }
  if (path.policies.empty()) {
    ev.push_back("no gpuslice MutatingAdmissionPolicy (none writes spec.schedulerName " + names.scheduler_name +
                 " or is labelled app.kubernetes.io/name=gpuslice)");
    return CheckResult{check, Verdict::skip, std::move(ev), {}, {}, {}};
  }
  if (path.webhook) {
    ev.push_back("not bound for " + names.probe_namespace + ": the webhook serves it");
    return CheckResult{check, Verdict::skip, std::move(ev), {}, {}, {}};
  }
  return make_fail(
      check, std::move(ev),
      {"gpuslice's MutatingAdmissionPolicy exists but no MutatingAdmissionPolicyBinding selects namespace " +
           names.probe_namespace + ", and no webhook serves it: its GPU pods are refused by the guard",
       "apply the policy's binding (charts/gpuslice topology=policy renders it) or fix its "
       "matchResources.namespaceSelector",
       "policy-unbound"});
}

// ---- gpuslice's configuration and Lease -------------------------------------------------------------------------

std::optional<int> webhook_port_of(const Configuration& config) {
  if (!config.webhook.enabled) {
    return std::nullopt;
  }
  const std::string& a = config.webhook.bind_address;
  auto colon = a.rfind(':');
  if (colon == std::string::npos || colon + 1 >= a.size()) {
    return std::nullopt;
  }
  int port = 0;
  for (char c : std::string_view(a).substr(colon + 1)) {
    if (!std::isdigit(static_cast<unsigned char>(c)) || port > 65535) {
      return std::nullopt;
    }
    port = port * 10 + (c - '0');
  }
  return port;
}

namespace {
bool loopback_bind(const Configuration& c) {
  const std::string& a = c.webhook.bind_address;
  std::string host = a.substr(0, a.rfind(':'));
  if (!host.empty() && host.front() == '[') {
    host = host.substr(1, host.size() - 2);
  }
  return loopback_host(host);
}
}  // namespace

std::optional<FoundConfiguration> find_configuration(const std::vector<json::object>& config_maps, const Names& names,
                                                     const std::optional<WebhookRef>& webhook) {
  struct Candidate {
    FoundConfiguration found;
    int rank = 0;  // lower is better
  };
  std::vector<Candidate> candidates;
  std::vector<std::string> notes;
  for (const auto& cm : config_maps) {
    const auto* data = object_at(cm, "data");
    if (data == nullptr) {
      continue;
    }
    const auto* md = object_at(cm, "metadata");
    std::string ns = md ? string_at(*md, "namespace") : std::string();
    std::string id = "ConfigMap " + ns + "/" + name_of_object(cm);
    for (const auto& kv : *data) {
      if (!kv.value().is_string() || !contains(kv.value().get_string(), "GpusliceConfiguration")) {
        continue;
      }
      std::string source = id + " (" + std::string(kv.key()) + ")";
      auto parsed = parse_configuration(std::string_view(kv.value().get_string()));
      if (!parsed) {
        notes.push_back(source + ": " + parsed.message());
        continue;
      }
      int rank = parsed->scheduler_name == names.scheduler_name ? 0 : 4;
      if (webhook && !webhook->url.empty()) {
        auto [host, port] = url_host_port(webhook->url);
        rank += webhook_port_of(*parsed) == port ? 0 : 2;
      } else if (webhook) {
        rank += parsed->webhook.enabled && loopback_bind(*parsed) ? 2 : 0;
      }
      candidates.push_back({FoundConfiguration{std::move(*parsed), source, ns, {}}, rank});
    }
  }
  if (candidates.empty()) {
    if (notes.empty()) {
      return std::nullopt;
    }
    // Only broken ones: say so through the notes of an empty result.
    FoundConfiguration none;
    none.source = "";
    none.notes = std::move(notes);
    return none;
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.rank < b.rank; });
  FoundConfiguration out = std::move(candidates.front().found);
  out.notes = std::move(notes);
  for (std::size_t i = 1; i < candidates.size(); ++i) {
    out.notes.push_back("also found " + candidates[i].found.source + " (not the one serving this webhook)");
  }
  return out;
}

std::string resolve_lease(Names& names, const std::optional<FoundConfiguration>& config, bool lease_name_explicit,
                          bool lease_namespace_explicit) {
  const bool have = config && !config->source.empty();
  std::string evidence;
  if (have && !config->config.scheduler.leader_election.enabled && !lease_name_explicit) {
    names.lease_name.clear();
    return "leader election is off in " + config->source + " (scheduler.leaderElection.leaderElect: false)";
  }
  if (!lease_name_explicit) {
    names.lease_name = have ? config->config.scheduler.leader_election.lease_name : LeaderElectionConfig{}.lease_name;
  }
  if (!lease_namespace_explicit) {
    // The rule serve uses (scheduler/loop_service.cc): resourceNamespace, else where gpuslice runs.
    const LeaderElectionConfig le = have ? config->config.scheduler.leader_election : LeaderElectionConfig{};
    const std::string running = have && !config->namespace_.empty() ? config->namespace_ : names.namespace_;
    names.lease_namespace = effective_lease_namespace(le, running);
  }
  if (lease_name_explicit && lease_namespace_explicit) {
    return "Lease from --lease and --lease-namespace";
  }
  if (have) {
    const auto& le = config->config.scheduler.leader_election;
    return "Lease named by " + config->source + " (scheduler.leaderElection resourceName " + le.lease_name +
           ", resourceNamespace " +
           (le.lease_namespace.empty() ? std::string("(unset: where gpuslice runs)") : le.lease_namespace) + ")";
  }
  return "no gpuslice configuration found: the default Lease " + std::string(LeaderElectionConfig{}.lease_name) +
         " in gpuslice's namespace " + names.lease_namespace + " (the rule serve uses)";
}

Result<std::string> tls_crt_from_secret(const json::object& secret) {
  const auto* data = object_at(secret, "data");
  std::string b64 = data ? string_at(*data, "tls.crt") : std::string();
  if (b64.empty()) {
    return make_error("data[tls.crt]: missing");
  }
  auto pem = base64_decode(b64);
  if (!pem) {
    return make_error("data[tls.crt]: not valid base64");
  }
  return std::move(*pem);
}

namespace {
// The serving certificate `pem` chains to ref's caBundle at `now` and names the host the API server verifies.
bool serves_for(const std::string& pem, const WebhookRef& ref, int64_t now_unix, bool require_san) {
  if (!certs::verify_chain(ref.ca_bundle_pem, pem, now_unix)) {
    return false;
  }
  if (!require_san) {
    return true;
  }
  auto leaf = certs::parse_pem_certificates(pem);
  if (!leaf) {
    return false;
  }
  const std::string name = ref.server_name();
  const auto& l = leaf->front();
  return std::find(l.ip_sans.begin(), l.ip_sans.end(), name) != l.ip_sans.end() || certs::san_covers(l, name);
}
}  // namespace

std::optional<ServingCertificate> pick_serving_certificate(const std::vector<json::object>& secrets,
                                                           std::string_view preferred, const WebhookRef& ref,
                                                           int64_t now_unix) {
  std::optional<ServingCertificate> named;
  std::optional<ServingCertificate> by_chain;
  for (const auto& s : secrets) {
    auto crt = tls_crt_from_secret(s);
    if (!crt) {
      continue;
    }
    const auto* md = object_at(s, "metadata");
    std::string id = "Secret " + (md ? string_at(*md, "namespace") : std::string()) + "/" + name_of_object(s);
    if (name_of_object(s) == preferred) {
      if (serves_for(*crt, ref, now_unix, false)) {
        return ServingCertificate{std::move(*crt), id};
      }
      named = ServingCertificate{std::move(*crt), id};
    } else if (!by_chain && serves_for(*crt, ref, now_unix, true)) {
      by_chain = ServingCertificate{std::move(*crt), id + " (found by its chain to the caBundle)"};
    }
  }
  if (by_chain) {
    return by_chain;
  }
  return named;
}

std::optional<std::string> out_of_cluster_lease_namespace(const Names& names,
                                                          const std::optional<FoundConfiguration>& config,
                                                          bool lease_namespace_explicit) {
  if (lease_namespace_explicit || names.lease_name.empty()) {
    return std::nullopt;
  }
  const bool have = config && !config->source.empty();
  const LeaderElectionConfig le = have ? config->config.scheduler.leader_election : LeaderElectionConfig{};
  if (!le.lease_namespace.empty()) {
    return std::nullopt;  // the configuration names it: serve uses it in and out of cluster
  }
  std::string other = effective_lease_namespace(le, "");  // what serve uses when it knows no running namespace
  if (other == names.lease_namespace) {
    return std::nullopt;
  }
  return other;
}

std::string out_of_cluster_lease_note(std::string_view first_namespace, std::string_view other_namespace,
                                      std::string_view lease_name, bool found) {
  const std::string first = "Lease " + std::string(first_namespace) + "/" + std::string(lease_name) + ": not found";
  const std::string why = std::string(other_namespace) +
                          " is where serve run out of cluster (no in-cluster namespace) puts its Lease when "
                          "scheduler.leaderElection.resourceNamespace is unset";
  if (found) {
    return first + "; Lease " + std::string(other_namespace) + "/" + std::string(lease_name) +
           " found instead: " + why + " (set resourceNamespace to make the place explicit)";
  }
  return first + ", nor in " + std::string(other_namespace) + " (" + why + ")";
}

CheckResult check_serving_cert(const WebhookRef& ref, const std::optional<std::string>& serving_cert_pem,
                               std::string_view source, int64_t now_unix) {
  const std::string check = "serving-cert";
  std::vector<std::string> ev;
  auto cas = certs::parse_pem_certificates(ref.ca_bundle_pem);
  if (!cas) {
    return make_fail(check, {"caBundle: " + cas.message()},
                     {"caBundle does not hold a PEM CA certificate, so the API server cannot verify the webhook",
                      "set caBundle to base64 -w0 of the CA certificate PEM", "ca-bundle-invalid"});
  }
  const auto& ca = cas->front();
  ev.push_back("caBundle: " + std::to_string(cas->size()) + " certificate(s), first " + ca.subject +
               (ca.is_ca ? " (CA)" : "") + ", valid until " + certs::format_unix_time(ca.not_after_unix));
  if (!ca.is_ca) {
    return make_fail(check, ev,
                     {"the caBundle's certificate is not a CA (basicConstraints CA:FALSE): it cannot sign the serving "
                      "certificate, so verification fails with x509: certificate signed by unknown authority",
                      "put the signing CA (ca.crt), not the serving certificate, into caBundle", "ca-bundle-not-ca"});
  }
  if (ca.not_after_unix < now_unix) {
    return make_fail(check, ev,
                     {"the caBundle's CA has expired", "rotate the CA and the serving certificate", "ca-expired"});
  }
  if (!serving_cert_pem) {
    ev.push_back("serving certificate: not readable (" + std::string(source) +
                 "): chain and SAN not verified; pass --serving-cert FILE to check them");
    return CheckResult{check, Verdict::pass, std::move(ev), {}, {}, {}};
  }
  auto leaf = certs::parse_pem_certificates(*serving_cert_pem);
  if (!leaf) {
    ev.push_back("serving certificate (" + std::string(source) + "): " + leaf.message());
    return make_fail(
        check, ev,
        {"the serving certificate does not parse", "reissue it (gpuslice certs) and reload gpuslice", "cert-invalid"});
  }
  const auto& l = leaf->front();
  std::vector<std::string> sans = l.dns_sans;
  for (const auto& ip : l.ip_sans) {
    sans.push_back("IP:" + ip);
  }
  ev.push_back("serving certificate (" + std::string(source) + "): " + l.subject + ", issuer " + l.issuer +
               ", valid until " + certs::format_unix_time(l.not_after_unix) + ", SANs " +
               (sans.empty() ? std::string("none") : join(sans, ",")));
  std::string server_name = ref.server_name();
  auto chain = certs::verify_chain(ref.ca_bundle_pem, *serving_cert_pem, now_unix);
  if (!chain) {
    ev.push_back("chain to caBundle: " + chain.message());
    if (contains(chain.message(), "expired") || contains(chain.message(), "not yet valid")) {
      return make_fail(check, ev,
                       {"the serving certificate has expired or is not yet valid",
                        "rotate it (gpuslice certs, or cert-manager) and reload gpuslice", "cert-expired"});
    }
    return make_fail(check, ev,
                     {"caBundle mismatch: the serving certificate was not signed by the CA in caBundle, so the API "
                      "server fails with x509: certificate signed by unknown authority",
                      "put the CA that signed the serving certificate into caBundle (re-apply the overlay with the "
                      "certs-gpuslice component, or fix cert-manager's CA injection), or reissue the certificate",
                      "ca-bundle-mismatch"});
  }
  ev.push_back("chain to caBundle: ok");
  bool ip_name = !server_name.empty() && (std::isdigit(static_cast<unsigned char>(server_name.front())) ||
                                          server_name.find(':') != std::string::npos);
  bool covered = ip_name ? std::find(l.ip_sans.begin(), l.ip_sans.end(), server_name) != l.ip_sans.end()
                         : certs::san_covers(l, server_name);
  if (!covered) {
    ev.push_back("SAN " + server_name + ": missing");
    return make_fail(check, ev,
                     {"SAN mismatch: the API server dials " + server_name +
                          " and the serving certificate does not name it (the Common Name is ignored), so it fails "
                          "with x509: certificate is valid for ..., not " +
                          server_name,
                      "reissue the certificate with the SAN " + server_name +
                          " (gpuslice certs --service <svc> --namespace <ns>) and reload gpuslice",
                      "san-mismatch"});
  }
  ev.push_back("SAN " + server_name + ": present");
  return CheckResult{check, Verdict::pass, std::move(ev), {}, {}, {}};
}

// ---- tunnel ---------------------------------------------------------------------------------------------------

CheckResult check_tunnel(std::string_view node, const std::optional<ApiError>& failure) {
  const std::string check = "tunnel";
  if (node.empty()) {
    return CheckResult{check, Verdict::skip, {"no node to probe: the tunnel is judged by the dry runs only"}, {}, {},
                       {}};
  }
  std::string probe = "GET /api/v1/nodes/" + std::string(node) +
                      "/proxy/healthz (dialed through the API server's "
                      "cluster egress, like a service-referenced webhook)";
  if (!failure) {
    return CheckResult{check, Verdict::pass, {probe + ": answered"}, {}, {}, {}};
  }
  const auto& f = *failure;
  std::vector<std::string> ev{probe + ": " + f.to_string()};
  if (contains(f.message, "No agent available")) {
    return make_fail(check, ev, diagnose_admission_error(f, Names{}));
  }
  if (f.code == 0 || f.code == 401 || f.code == 403) {
    // Our own request failed before reaching the egress: nothing learned about the tunnel.
    ev.push_back("the probe did not reach the API server's egress: tunnel state unknown");
    return CheckResult{check, Verdict::skip, std::move(ev), {}, {}, {}};
  }
  if (contains(f.message, "dial tcp") || contains(f.message, "connect:") ||
      contains(f.message, "error trying to reach")) {
    // The dial was attempted from the far side of the egress: an agent took it (the node's kubelet port itself is
    // not expected to answer on simulated nodes).
    ev.push_back("the dial was made from the worker side: an agent is connected");
    return CheckResult{check, Verdict::pass, std::move(ev), {}, {}, {}};
  }
  if (icontains(f.message, "timeout") || icontains(f.message, "deadline")) {
    return make_fail(check, ev,
                     {"the dial through the tunnel hung: agent overloaded or half-connected (kubernetes#140512)",
                      "check the konnectivity-agent and proxy-server logs; restart the agent", "tunnel-hung"});
  }
  ev.push_back("unrecognised answer: tunnel state unknown");
  return CheckResult{check, Verdict::skip, std::move(ev), {}, {}, {}};
}

CheckResult check_tunnel(std::string_view node, const std::optional<ApiError>& failure, Topology topology) {
  CheckResult r = check_tunnel(node, failure);
  if (topology == Topology::service_webhook || topology == Topology::none) {
    return r;
  }
  const std::string off =
      std::string("gpuslice's admission does not cross the tunnel here (") + topology_name(topology) + ")";
  if (r.verdict == Verdict::fail) {
    r.evidence.push_back(off + ": " + r.cause + " [" + r.cause_id +
                         "] breaks kubectl logs/exec and service webhooks, not gpuslice");
    r.verdict = Verdict::skip;
    r.cause.clear();
    r.fix.clear();
    r.cause_id.clear();
  } else {
    r.evidence.push_back(off);
  }
  return r;
}

// ---- dry runs -------------------------------------------------------------------------------------------------

json::object make_probe_pod(bool gpu, std::string_view ns) {
  json::object limits;
  json::object requests;
  if (gpu) {
    limits["nvidia.com/gpu"] = "1";
    limits["nvidia.com/gpumem"] = "1024";
    limits["nvidia.com/gpucores"] = "10";
  } else {
    requests["cpu"] = "10m";
    requests["memory"] = "16Mi";
  }
  json::object resources;
  if (!limits.empty()) {
    resources["limits"] = std::move(limits);
  }
  if (!requests.empty()) {
    resources["requests"] = std::move(requests);
  }
  json::object container{
      {"name", "probe"}, {"image", "registry.k8s.io/pause:3.10"}, {"resources", std::move(resources)}};
  json::object labels{{"app.kubernetes.io/name", "gpuslice-doctor"}};
  json::object metadata{{"name", gpu ? "gpuslice-doctor-gpu-probe" : "gpuslice-doctor-plain-probe"},
                        {"namespace", ns},
                        {"labels", std::move(labels)}};
  json::object spec{{"containers", json::array{std::move(container)}}};
  return json::object{
      {"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", std::move(metadata)}, {"spec", std::move(spec)}};
}

CheckResult check_gpu_dry_run(const DryRun& result, const Names& names) {
  return check_gpu_dry_run(result, names, Topology::service_webhook);
}

CheckResult check_gpu_dry_run(const DryRun& result, const Names& names, Topology topology) {
  const std::string check = "gpu-pod-dry-run";
  std::string what =
      "dry-run create of a GPU pod (nvidia.com/gpu 1, gpumem 1024, gpucores 10) in " + names.probe_namespace;
  if (!result.pod) {
    std::vector<std::string> ev{what + ": " + result.failure.to_string()};
    return make_fail(check, std::move(ev), diagnose_admission_error(result.failure, names));
  }
  std::string sched = scheduler_name_of(*result.pod);
  std::string req = annotation(*result.pod, kGpuRequestAnnotation).value_or("");
  std::string by = annotation(*result.pod, kAdmittedByAnnotation).value_or("");
  const bool by_policy = by == kAdmittedByPolicy;
  std::vector<std::string> ev{
      what + ": admitted", "spec.schedulerName: " + (sched.empty() ? std::string("(unset)") : sched),
      std::string(kGpuRequestAnnotation) + ": " + (req.empty() ? std::string("(absent)") : req)};
  if (!by.empty()) {
    ev.push_back(std::string(kAdmittedByAnnotation) + ": " + by);
  }
  if (sched == names.scheduler_name && !req.empty()) {
    ev.push_back(std::string("mutated by gpuslice's webhook: API server -> ") +
                 (topology == Topology::url_webhook ? "localhost" : "tunnel") + " -> webhook works" +
                 (by_policy ? " (and by the MutatingAdmissionPolicy before it)" : ""));
    return CheckResult{check, Verdict::pass, std::move(ev), {}, {}, {}};
  }
  if (sched == names.scheduler_name && by_policy) {
    if (topology == Topology::service_webhook || topology == Topology::url_webhook) {
      return make_fail(check, std::move(ev),
                       {"the GPU pod was admitted by the MutatingAdmissionPolicy's mutation alone: the webhook that "
                        "serves this namespace was not reached (failurePolicy Ignore), the policy is the fallback; "
                        "GPU pods are scheduled, without the webhook's checks and gpuslice.io/gpu-request",
                        "see the tunnel check and the API server log (\"failed calling webhook\"); the webhook "
                        "takes over again as soon as it answers",
                        "webhook-fallback"});
    }
    ev.push_back("mutated by the MutatingAdmissionPolicy inside the API server (no webhook call, no tunnel)");
    return CheckResult{check, Verdict::pass, std::move(ev), {}, {}, {}};
  }
  if (sched == names.scheduler_name || !req.empty()) {
    return make_fail(check, std::move(ev),
                     {"the pod was only partly mutated: another webhook or a different gpuslice version changed it",
                      "check the MutatingWebhookConfigurations on pods and the gpuslice version", "partly-mutated"});
  }
  return make_fail(check, std::move(ev),
                   {"the GPU pod was admitted unmutated: the webhook was not called (matchConditions/selectors) or "
                    "failed open (failurePolicy Ignore), and no scheduler guard refused it, so GPU pods go to the "
                    "default scheduler",
                    "see the tunnel check and the API server log (\"failed calling webhook\"); apply the guard "
                    "(manifests/base/guard.yaml) so such pods are refused instead",
                    "webhook-failed-open"});
}

CheckResult check_plain_dry_run(const DryRun& result, const Names& names) {
  const std::string check = "plain-pod-dry-run";
  std::string what = "dry-run create of a plain pod (cpu only) in " + names.probe_namespace;
  if (!result.pod) {
    std::vector<std::string> ev{what + ": " + result.failure.to_string()};
    Diagnosis d = diagnose_admission_error(result.failure, names);
    if (contains(result.failure.message, names.guard_policy)) {
      d = {"the scheduler guard refused a pod that asks for no GPU: the guard's asksForGPU expression is wrong",
           "re-apply manifests/base/guard.yaml", "guard-wrong"};
    } else {
      d.cause = "a non-GPU pod was refused: " + d.cause +
                " (non-GPU pods should never be sent to the webhook: check "
                "its matchConditions)";
    }
    return make_fail(check, std::move(ev), std::move(d));
  }
  std::string sched = scheduler_name_of(*result.pod);
  auto ours = annotation_keys_with_prefix(*result.pod, "gpuslice.io/");
  auto hami = annotation_keys_with_prefix(*result.pod, "hami.io/");
  ours.insert(ours.end(), hami.begin(), hami.end());
  std::vector<std::string> ev{
      what + ": admitted", "spec.schedulerName: " + (sched.empty() ? std::string("(unset)") : sched),
      "gpuslice.io/ and hami.io/ annotations: " + (ours.empty() ? std::string("none") : join(ours, ","))};
  if (sched == names.scheduler_name || !ours.empty()) {
    return make_fail(check, std::move(ev),
                     {"the webhook mutated a pod that asks for no GPU (matchConditions missing or a policy bug)",
                      "re-apply manifests/base/webhook.yaml (matchConditions asks-for-gpu) and report the pod",
                      "plain-pod-mutated"});
  }
  ev.push_back("untouched");
  return CheckResult{check, Verdict::pass, std::move(ev), {}, {}, {}};
}

// ---- guard, lease, inventory ----------------------------------------------------------------------------------

CheckResult check_guard(const std::optional<json::object>& policy, const std::vector<json::object>& bindings,
                        const Names& names) {
  const std::string check = "scheduler-guard";
  if (!policy) {
    return make_fail(check, {"ValidatingAdmissionPolicy " + names.guard_policy + ": not found"},
                     {"without the guard, a GPU pod the webhook did not see (tunnel down, failurePolicy Ignore) "
                      "goes to the default scheduler and is placed without slicing",
                      "apply manifests/base/guard.yaml", "guard-missing"});
  }
  std::vector<std::string> ev{"ValidatingAdmissionPolicy " + names.guard_policy + ": present"};
  std::vector<std::string> deny_bindings;
  for (const auto& b : bindings) {
    const auto* spec = object_at(b, "spec");
    if (spec == nullptr || string_at(*spec, "policyName") != names.guard_policy) {
      continue;
    }
    bool deny = false;
    if (const auto* actions = array_at(*spec, "validationActions")) {
      for (const auto& a : *actions) {
        deny = deny || (a.is_string() && a.get_string() == "Deny");
      }
    }
    if (deny) {
      const auto* md = object_at(b, "metadata");
      deny_bindings.push_back(md ? string_at(*md, "name") : std::string("?"));
    }
  }
  if (deny_bindings.empty()) {
    ev.push_back("ValidatingAdmissionPolicyBinding with validationActions [Deny] for it: none");
    return make_fail(check, std::move(ev),
                     {"the guard policy is not bound with the Deny action, so it refuses nothing",
                      "apply manifests/base/guard.yaml (its ValidatingAdmissionPolicyBinding)", "guard-unbound"});
  }
  ev.push_back("bound with Deny by: " + join(deny_bindings, ","));
  return CheckResult{check, Verdict::pass, std::move(ev), {}, {}, {}};
}

CheckResult check_lease(const std::optional<kube::Lease>& lease, const Names& names,
                        std::chrono::system_clock::time_point now) {
  const std::string check = "scheduler-lease";
  std::string id = "Lease " + names.lease_namespace + "/" + names.lease_name;
  if (names.lease_name.empty()) {
    return CheckResult{check, Verdict::skip, {"--lease is empty: leader election not checked"}, {}, {}, {}};
  }
  if (!lease) {
    return make_fail(check, {id + ": not found"},
                     {"no gpuslice scheduler has ever taken the lease: gpuslice serve (scheduler enabled) is not "
                      "running, cannot reach the API server, or uses another lease name/namespace",
                      "start gpuslice serve; check its logs; pass --lease/--namespace if the configuration's "
                      "scheduler.leaderElection names another Lease (or --lease= when leader election is off)",
                      "lease-missing"});
  }
  const kube::LeaseSpec& l = lease->spec;
  std::vector<std::string> ev;
  std::string renew = l.renew_time ? certs::format_unix_time(std::chrono::system_clock::to_time_t(*l.renew_time))
                                   : std::string("(none)");
  ev.push_back(id + ": holder " + (l.holder_identity.empty() ? std::string("(none)") : l.holder_identity) +
               ", renewTime " + renew + ", leaseDurationSeconds " + std::to_string(l.lease_duration_seconds) +
               ", transitions " + std::to_string(l.lease_transitions));
  if (l.holder_identity.empty()) {
    return make_fail(check, std::move(ev),
                     {"the lease was released and nobody holds it: no gpuslice scheduler replica is running (a "
                      "replica that stops gives the lease up)",
                      "start gpuslice serve (scheduler enabled); pods with schedulerName gpuslice-scheduler stay "
                      "Pending meanwhile",
                      "lease-released"});
  }
  if (!l.renew_time) {
    return make_fail(check, std::move(ev),
                     {"the lease has no renewTime: it was written by something other than a leader elector",
                      "delete the Lease; gpuslice recreates it", "lease-invalid"});
  }
  auto age = std::chrono::duration_cast<std::chrono::seconds>(now - *l.renew_time);
  ev.push_back("renewed " + std::to_string(age.count()) + " s ago");
  // 2 s of slack for the clock skew between this machine and the leader's.
  if (age > std::chrono::seconds(l.lease_duration_seconds) + std::chrono::seconds(2)) {
    return make_fail(check, std::move(ev),
                     {"the holder " + l.holder_identity + " stopped renewing " + std::to_string(age.count()) +
                          " s ago (lease duration " + std::to_string(l.lease_duration_seconds) +
                          " s): the leader crashed, hangs or lost the API server, and no other replica took over",
                      "check gpuslice's logs on the holder; start a replica (another takes over after the lease "
                      "duration)",
                      "lease-stale"});
  }
  ev.push_back("held and fresh");
  return CheckResult{check, Verdict::pass, std::move(ev), {}, {}, {}};
}

CheckResult check_inventory(const std::vector<json::object>& nodes, std::size_t max_listed) {
  const std::string check = "gpu-inventory";
  std::vector<std::string> listed;
  std::vector<std::string> bad;
  std::vector<std::string> zero_alloc;
  std::size_t usable = 0;
  int64_t cards = 0;
  for (const auto& node : nodes) {
    const auto* md = object_at(node, "metadata");
    std::string name = md ? string_at(*md, "name") : std::string();
    std::string reg = annotation(node, scheduler::kNodeRegisterAnnotation).value_or("");
    if (reg.empty()) {
      continue;
    }
    auto devices = scheduler::decode_node_devices(name, reg);
    if (!devices) {
      bad.push_back(devices.message());
      continue;
    }
    std::string alloc_text;
    if (const auto* st = object_at(node, "status")) {
      if (const auto* alloc = object_at(*st, "allocatable")) {
        alloc_text = string_at(*alloc, "nvidia.com/gpu");
      }
    }
    int64_t alloc = 0;
    if (!alloc_text.empty()) {
      auto q = parse_quantity_milli(alloc_text);
      alloc = q ? *q / 1000 : 0;
    }
    if (alloc <= 0) {
      zero_alloc.push_back(name);
      continue;
    }
    ++usable;
    cards += static_cast<int64_t>(devices->size());
    if (listed.size() < max_listed) {
      std::string line =
          name + ": " + std::to_string(devices->size()) + " card(s), allocatable nvidia.com/gpu " + alloc_text + ":";
      for (const auto& d : *devices) {
        line += " [" + d.id + " " + d.type + " " + std::to_string(d.devmem) + " MiB " + std::to_string(d.devcore) +
                " cores x" + std::to_string(d.count) + (d.health ? "" : " UNHEALTHY") + "]";
      }
      listed.push_back(std::move(line));
    }
  }
  std::vector<std::string> ev{std::to_string(nodes.size()) + " node(s); " + std::to_string(usable) +
                              " with registered GPUs and allocatable nvidia.com/gpu > 0; " + std::to_string(cards) +
                              " card(s)"};
  ev.insert(ev.end(), listed.begin(), listed.end());
  if (usable > listed.size()) {
    ev.push_back("... and " + std::to_string(usable - listed.size()) + " more node(s)");
  }
  if (!zero_alloc.empty()) {
    ev.push_back("registered but allocatable nvidia.com/gpu is 0 or absent (ignored by the scheduler): " +
                 join(std::vector<std::string>(zero_alloc.begin(),
                                               zero_alloc.begin() + static_cast<std::ptrdiff_t>(
                                                                        std::min<std::size_t>(zero_alloc.size(), 10))),
                      ",") +
                 (zero_alloc.size() > 10 ? ",..." : ""));
  }
  for (const auto& b : bad) {
    ev.push_back(b);
  }
  if (!bad.empty()) {
    return make_fail(check, std::move(ev),
                     {"a node's hami.io/node-nvidia-register annotation does not decode: the scheduler ignores it",
                      "fix the device plugin (or the node manifest) writing the annotation (hami-protocol.md §3)",
                      "register-invalid"});
  }
  if (usable == 0) {
    return make_fail(check, std::move(ev),
                     {"no GPU is visible to the scheduler: no node carries hami.io/node-nvidia-register with "
                      "allocatable nvidia.com/gpu > 0 (device plugin not running, or nodes of another tenant)",
                      "run the device plugin (or the lab's simulated nodes) on the tenant's GPU workers", "no-gpus"});
  }
  return CheckResult{check, Verdict::pass, std::move(ev), {}, {}, {}};
}

void correlate(std::vector<CheckResult>& checks) {
  auto find = [&](std::string_view name) -> CheckResult* {
    for (auto& c : checks) {
      if (c.name == name) {
        return &c;
      }
    }
    return nullptr;
  };
  CheckResult* gpu = find("gpu-pod-dry-run");
  CheckResult* tunnel = find("tunnel");
  if (gpu == nullptr || tunnel == nullptr || gpu->verdict != Verdict::fail || gpu->cause_id != "webhook-not-reached") {
    return;
  }
  const std::string held =
      "; the scheduler guard refused the unmutated GPU pod, so GPU pods are being held back "
      "(non-GPU pods are unaffected)";
  if (tunnel->verdict == Verdict::fail && tunnel->cause_id == "agent-not-connected") {
    gpu->cause =
        "Konnectivity agent not connected (see the tunnel check): the API server cannot reach the webhook" + held;
    gpu->fix = tunnel->fix + "; GPU pods are admitted again once the agent reconnects, nothing else needs restarting";
    gpu->cause_id = "agent-not-connected";
  } else if (CheckResult* cert = find("serving-cert"); cert != nullptr && cert->verdict == Verdict::fail) {
    // The API server reached the webhook but refused its certificate (the call failed open).
    gpu->cause = cert->cause + held;
    gpu->fix = cert->fix;
    gpu->cause_id = cert->cause_id;
  } else if (tunnel->verdict == Verdict::pass) {
    gpu->cause =
        "the tunnel works (an agent is connected) but the webhook did not answer through it: gpuslice is not "
        "running or not listening on the worker, or the Service points elsewhere" +
        held;
    gpu->fix =
        "start gpuslice serve on the worker (check its logs and /readyz); check the Service and "
        "clientConfig.service.port match its --webhook listen port";
    gpu->cause_id = "webhook-down";
  }
}

void correlate(std::vector<CheckResult>& checks, const AdmissionPath& path) {
  if (path.topology == Topology::service_webhook) {
    correlate(checks);
    return;
  }
  CheckResult* gpu = nullptr;
  CheckResult* cert = nullptr;
  for (auto& c : checks) {
    gpu = c.name == "gpu-pod-dry-run" ? &c : gpu;
    cert = c.name == "serving-cert" ? &c : cert;
  }
  if (gpu == nullptr || gpu->verdict != Verdict::fail || gpu->cause_id != "webhook-not-reached") {
    return;
  }
  const std::string held =
      "; the scheduler guard refused the unmutated GPU pod, so GPU pods are being held back (non-GPU pods are "
      "unaffected)";
  if (path.topology == Topology::url_webhook) {
    if (cert != nullptr && cert->verdict == Verdict::fail) {
      gpu->cause = cert->cause + held;
      gpu->fix = cert->fix;
      gpu->cause_id = cert->cause_id;
      return;
    }
    gpu->cause = "the API server did not get an answer from the webhook at " + path.webhook->ref.url +
                 " (no tunnel on this path): gpuslice is not running or not listening there" + held;
    gpu->fix =
        "start gpuslice beside the API server (the TenantControlPlane's additional container) and check its logs "
        "and /readyz; its webhook.bindAddress must match the URL's port";
    gpu->cause_id = "webhook-down";
  } else if (path.topology == Topology::none) {
    gpu->cause = "nothing of gpuslice's mutates pods in this namespace (see webhook-config)" + held;
    gpu->fix = "see webhook-config and admission-policy";
    gpu->cause_id = "no-admission";
  } else {
    gpu->cause = "the MutatingAdmissionPolicy " + path.policy->name +
                 " did not mutate the pod (its matchConditions left it out, or its binding does not apply)" + held;
    gpu->fix = "kubectl get mutatingadmissionpolicy " + path.policy->name +
               " -o yaml: check matchConditions and the binding's matchResources";
    gpu->cause_id = "policy-not-applied";
  }
}

// ---- report ---------------------------------------------------------------------------------------------------

std::string format_report(std::string_view header, const std::vector<CheckResult>& checks) {
  std::string out = "gpuslice doctor: " + std::string(header) + "\n";
  int passed = 0, failed = 0, skipped = 0;
  for (const auto& c : checks) {
    out += std::string(verdict_name(c.verdict)) + "  " + c.name + "\n";
    for (const auto& e : c.evidence) {
      out += "      " + e + "\n";
    }
    if (c.verdict == Verdict::fail) {
      out += "      cause: " + c.cause + (c.cause_id.empty() ? "" : " [" + c.cause_id + "]") + "\n";
      out += "      fix:   " + c.fix + "\n";
    }
    (c.verdict == Verdict::pass ? passed : c.verdict == Verdict::fail ? failed : skipped)++;
  }
  out += "doctor: " + std::to_string(passed) + " passed, " + std::to_string(failed) + " failed, " +
         std::to_string(skipped) + " skipped\n";
  return out;
}

std::string format_report_json(std::string_view header, const std::vector<CheckResult>& checks) {
  json::array arr;
  int passed = 0, failed = 0, skipped = 0;
  for (const auto& c : checks) {
    json::array ev;
    for (const auto& e : c.evidence) {
      ev.emplace_back(json::string(e));
    }
    json::object o{{"name", c.name}, {"verdict", verdict_name(c.verdict)}, {"evidence", std::move(ev)}};
    if (c.verdict == Verdict::fail) {
      o["cause"] = c.cause;
      o["fix"] = c.fix;
      o["cause_id"] = c.cause_id;
    }
    arr.emplace_back(std::move(o));
    (c.verdict == Verdict::pass ? passed : c.verdict == Verdict::fail ? failed : skipped)++;
  }
  json::object root{
      {"server", header}, {"checks", std::move(arr)}, {"passed", passed}, {"failed", failed}, {"skipped", skipped}};
  return json::serialize(root) + "\n";
}

int exit_code(const std::vector<CheckResult>& checks) {
  return std::any_of(checks.begin(), checks.end(), [](const CheckResult& c) { return c.verdict == Verdict::fail; }) ? 1
                                                                                                                    : 0;
}

}  // namespace gpuslice::doctor
