// `gpuslice doctor`: checks a tenant's gpuslice end to end through its API server and prints each check as
// PASS/FAIL/SKIP with evidence, and on failure the likely cause and fix (doctor/diagnose.h has the
// format and the decisions). This file is only the I/O: it reads objects and runs the dry runs.
#include "cmd/command.h"
#include "common/json_access.h"
#include "common/log.h"
#include "doctor/diagnose.h"
#include "kube/client.h"
#include "kube/kubeconfig.h"
#include "kube/url.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {
namespace asio = boost::asio;
namespace json = boost::json;
using gpuslice::doctor::CheckResult;
using gpuslice::doctor::Names;
using gpuslice::kube::ApiError;
using gpuslice::kube::Client;

struct Options {
  std::string kubeconfig;
  std::string context;
  std::string serving_cert;
  std::string tls_secret = "gpuslice-webhook-tls";
  std::string output = "text";
  std::string config_file;
  int timeout_seconds = 15;
  Names names;
  bool namespace_explicit = false, lease_explicit = false, lease_namespace_explicit = false,
       scheduler_name_explicit = false;
};

// A GET whose 404 is an answer ("absent"), not a failure.
struct Lookup {
  std::optional<json::object> object;
  std::optional<ApiError> failure;  // set for errors other than 404
};

asio::awaitable<Lookup> lookup(Client& client, std::string path) {
  auto r = co_await client.get(std::move(path));
  if (r) {
    co_return Lookup{std::move(*r), std::nullopt};
  }
  if (r.error().is_not_found()) {
    co_return Lookup{};
  }
  co_return Lookup{std::nullopt, r.error()};
}

asio::awaitable<gpuslice::doctor::DryRun> dry_run(Client& client, const json::object& pod, const Options& opt) {
  gpuslice::kube::Request req;
  req.method = gpuslice::kube::HttpMethod::post;
  req.path =
      gpuslice::kube::collection_path(gpuslice::kube::resources::pods(), opt.names.probe_namespace) + "?dryRun=All";
  req.body = json::serialize(pod);
  req.timeout = std::chrono::seconds(opt.timeout_seconds);
  auto r = co_await client.send(std::move(req));
  gpuslice::doctor::DryRun out;
  if (!r) {
    out.failure = r.error();
    co_return out;
  }
  boost::system::error_code ec;
  json::value v = json::parse(r->body, ec);
  if (ec || !v.is_object()) {
    out.failure = ApiError{r->status, gpuslice::kube::kReasonDecode,
                           "dry-run answer is not a JSON object: " + r->body.substr(0, 200)};
    co_return out;
  }
  out.pod = std::move(v.get_object());
  co_return out;
}

std::optional<std::string> read_small_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return std::nullopt;
  }
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (s.size() > (1u << 20)) {
    return std::nullopt;
  }
  return s;
}

// A LIST whose 404 means "this API is not served" (an empty answer), not a failure.
struct Listing {
  std::vector<json::object> items;
  bool served = true;
  std::optional<ApiError> failure;
};

// `options` must be a named local of the caller (g++ 12 double-destroys temporaries in co_await arguments).
asio::awaitable<Listing> list_all(Client& client, std::string path, const gpuslice::kube::ListOptions& options) {
  auto r = co_await client.list(std::move(path), options);
  Listing out;
  if (r) {
    out.items = std::move(r->items);
  } else if (r.error().is_not_found()) {
    out.served = false;
  } else {
    out.failure = r.error();
  }
  co_return out;
}

gpuslice::doctor::Labels labels_of(const json::object& o) {
  gpuslice::doctor::Labels out;
  if (const auto* md = gpuslice::object_at(o, "metadata")) {
    if (const auto* l = gpuslice::object_at(*md, "labels")) {
      for (const auto& kv : *l) {
        if (kv.value().is_string()) {
          out.emplace(std::string(kv.key()), std::string(kv.value().get_string()));
        }
      }
    }
  }
  return out;
}

asio::awaitable<void> run_checks(std::shared_ptr<Client> client, Options opt, std::vector<CheckResult>& results) {
  using namespace gpuslice::doctor;
  Names& names = opt.names;
  const std::string adm = "/apis/admissionregistration.k8s.io/";
  const gpuslice::kube::Resource configmaps{"", "v1", "configmaps"};
  const gpuslice::kube::Resource secrets{"", "v1", "secrets"};
  // GCC 12 mishandles non-trivial temporaries inside co_await expressions (double destruction): every
  // argument is a named local here.

  const gpuslice::kube::ListOptions all;
  // 0. What gpuslice's admission is, found by what the objects point at (doctor/diagnose.h: find_admission).
  std::string mwc_path = adm + "v1/mutatingwebhookconfigurations";
  auto mwcs = co_await list_all(*client, std::move(mwc_path), all);
  std::string map_path = adm + "v1/mutatingadmissionpolicies";
  auto maps = co_await list_all(*client, std::move(map_path), all);
  std::string mapb_path = adm + "v1/mutatingadmissionpolicybindings";
  if (!maps.served) {  // Kubernetes 1.34/1.35: beta behind the MutatingAdmissionPolicy gate
    std::string beta_path = adm + "v1beta1/mutatingadmissionpolicies";
    maps = co_await list_all(*client, std::move(beta_path), all);
    mapb_path = adm + "v1beta1/mutatingadmissionpolicybindings";
  }
  Listing map_bindings;
  if (maps.served && !maps.failure) {
    map_bindings = co_await list_all(*client, std::move(mapb_path), all);
  }
  const gpuslice::kube::Resource namespaces{"", "v1", "namespaces"};
  std::string ns_path = gpuslice::kube::object_path(namespaces, "", names.probe_namespace);
  auto probe_ns = co_await lookup(*client, std::move(ns_path));
  Labels ns_labels = probe_ns.object ? labels_of(*probe_ns.object) : Labels{};
  const json::object gpu_probe = make_probe_pod(true, names.probe_namespace);
  Labels pod_labels = labels_of(gpu_probe);

  // gpuslice's namespace: --namespace, else the namespace of the Service a gpuslice webhook points at.
  DiscoveryHints hints;
  AdmissionPath path = find_admission(mwcs.items, maps.items, map_bindings.items, names, ns_labels, pod_labels, hints);
  if (!opt.namespace_explicit && path.webhook && !path.webhook->ref.service_namespace.empty()) {
    names.namespace_ = path.webhook->ref.service_namespace;
  }
  // gpuslice's configuration: --config, else a ConfigMap of kind GpusliceConfiguration in its namespace.
  std::optional<FoundConfiguration> config;
  if (!opt.config_file.empty()) {
    auto c = gpuslice::load_configuration_file(opt.config_file);
    if (c) {
      config = FoundConfiguration{std::move(*c), "--config " + opt.config_file, "", {}};
    } else {
      config = FoundConfiguration{{}, "", "", {"--config " + opt.config_file + ": " + c.message()}};
    }
  } else {
    std::string cm_path = gpuslice::kube::collection_path(configmaps, names.namespace_);
    auto cms = co_await list_all(*client, std::move(cm_path), all);
    std::optional<WebhookRef> wref;
    if (path.webhook) {
      wref = path.webhook->ref;
    }
    config = find_configuration(cms.items, names, wref);
    if (cms.failure) {
      config = FoundConfiguration{{}, "", "", {"ConfigMaps in " + names.namespace_ + ": " + cms.failure->to_string()}};
    }
  }
  if (config && !config->source.empty()) {
    if (auto port = webhook_port_of(config->config)) {
      hints.webhook_ports.push_back(*port);
    }
    if (!opt.scheduler_name_explicit) {
      names.scheduler_name = config->config.scheduler_name;
    }
    // Again, now that the configured webhook port is known (a URL webhook named otherwise).
    path = find_admission(mwcs.items, maps.items, map_bindings.items, names, ns_labels, pod_labels, hints);
  }
  path.policies_served = maps.served;

  // 1. webhook-config (+ its Service), 2. admission-policy.
  std::optional<WebhookRef> ref;
  if (mwcs.failure) {
    results.push_back(failed_read("webhook-config", "MutatingWebhookConfigurations", *mwcs.failure));
  } else {
    std::optional<json::object> service;
    bool service_failed = false;
    if (path.webhook && !path.webhook->ref.service_name.empty()) {
      const gpuslice::kube::Resource services{"", "v1", "services"};
      std::string svc_path =
          gpuslice::kube::object_path(services, path.webhook->ref.service_namespace, path.webhook->ref.service_name);
      auto svc = co_await lookup(*client, std::move(svc_path));
      if (svc.failure) {
        results.push_back(failed_read(
            "webhook-config", "Service " + path.webhook->ref.service_namespace + "/" + path.webhook->ref.service_name,
            *svc.failure));
        service_failed = true;
      }
      service = std::move(svc.object);
    }
    if (!service_failed) {
      results.push_back(check_webhook_config(path, service, names, ref));
    }
  }
  if (maps.failure) {
    results.push_back(failed_read("admission-policy", "MutatingAdmissionPolicies", *maps.failure));
  } else if (map_bindings.failure) {
    results.push_back(failed_read("admission-policy", "MutatingAdmissionPolicyBindings", *map_bindings.failure));
  } else {
    results.push_back(check_admission_policy(path, names));
  }

  // 3. serving-cert.
  if (!ref) {
    results.push_back(CheckResult{"serving-cert",
                                  Verdict::skip,
                                  {path.topology == Topology::admission_policy
                                       ? "no webhook serves the probe namespace: no serving certificate is used"
                                       : "no usable webhook configuration"},
                                  {},
                                  {},
                                  {}});
  } else {
    std::optional<std::string> pem;
    std::string source;
    auto now = static_cast<int64_t>(std::chrono::system_clock::to_time_t(std::chrono::system_clock::now()));
    if (!opt.serving_cert.empty()) {
      pem = read_small_file(opt.serving_cert);
      source = "--serving-cert " + opt.serving_cert + (pem ? "" : ": cannot read");
    } else {
      // The Secret in the webhook Service's namespace (url webhooks: gpuslice's), named --tls-secret or found by
      // its chain to the caBundle (doctor/diagnose.h: pick_serving_certificate).
      std::string ns = ref->service_namespace.empty() ? names.namespace_ : ref->service_namespace;
      gpuslice::kube::ListOptions tls_only;
      tls_only.field_selector = "type=kubernetes.io/tls";
      std::string secrets_path = gpuslice::kube::collection_path(secrets, ns);
      auto listed = co_await list_all(*client, std::move(secrets_path), tls_only);
      if (listed.failure) {
        // No list right: the named Secret only.
        std::string secret_path = gpuslice::kube::object_path(secrets, ns, opt.tls_secret);
        auto secret = co_await lookup(*client, std::move(secret_path));
        if (secret.object) {
          listed.items.push_back(std::move(*secret.object));
        }
      }
      auto picked = pick_serving_certificate(listed.items, opt.tls_secret, *ref, now);
      if (picked) {
        pem = std::move(picked->pem);
        source = std::move(picked->source);
      } else {
        source = "Secret " + ns + "/" + opt.tls_secret + ": not found, nor another kubernetes.io/tls Secret in " + ns +
                 " chaining to the caBundle" + (listed.failure ? " (list: " + listed.failure->to_string() + ")" : "");
      }
    }
    results.push_back(check_serving_cert(*ref, pem, source, now));
  }

  // Nodes: for the tunnel probe and the inventory.
  const gpuslice::kube::Resource node_resource = gpuslice::kube::resources::nodes();
  std::string nodes_path = gpuslice::kube::collection_path(node_resource);
  gpuslice::kube::ListOptions list_options;
  auto nodes = co_await client->list(std::move(nodes_path), list_options);
  std::string probe_node;
  if (nodes) {
    // Prefer a GPU node (the worker the webhook runs beside), else any node.
    for (const auto& n : nodes->items) {
      if (probe_node.empty()) {
        probe_node = gpuslice::kube::name_of(n);
      }
      if (!gpuslice::string_at_pointer(n, "/metadata/annotations/hami.io~1node-nvidia-register").empty()) {
        probe_node = gpuslice::kube::name_of(n);
        break;
      }
    }
  }

  // 3. tunnel.
  {
    std::optional<ApiError> failure;
    if (!probe_node.empty()) {
      gpuslice::kube::Request req;
      req.path = "/api/v1/nodes/" + gpuslice::kube::path_escape(probe_node) + "/proxy/healthz";
      req.timeout = std::chrono::seconds(opt.timeout_seconds);
      auto r = co_await client->send(std::move(req));
      if (!r) {
        failure = r.error();
      }
    }
    results.push_back(check_tunnel(probe_node, failure, path.topology));
  }

  // 5, 6. dry runs.
  auto gpu_result = co_await dry_run(*client, gpu_probe, opt);
  results.push_back(check_gpu_dry_run(gpu_result, names, path.topology));
  const json::object plain_probe = make_probe_pod(false, names.probe_namespace);
  auto plain_result = co_await dry_run(*client, plain_probe, opt);
  results.push_back(check_plain_dry_run(plain_result, names));

  // 7. scheduler-guard.
  {
    std::string policy_path = adm + "v1/validatingadmissionpolicies/" + gpuslice::kube::path_escape(names.guard_policy);
    auto policy = co_await lookup(*client, std::move(policy_path));
    if (policy.failure) {
      results.push_back(
          failed_read("scheduler-guard", "ValidatingAdmissionPolicy " + names.guard_policy, *policy.failure));
    } else {
      std::string bindings_path = adm + "v1/validatingadmissionpolicybindings";
      auto bindings = co_await client->list(std::move(bindings_path), list_options);
      if (!bindings) {
        results.push_back(failed_read("scheduler-guard", "ValidatingAdmissionPolicyBindings", bindings.error()));
      } else {
        results.push_back(check_guard(policy.object, bindings->items, names));
      }
    }
  }

  // 8. scheduler-lease: the Lease the configuration names, by the rule serve uses.
  const std::string lease_source = resolve_lease(names, config, opt.lease_explicit, opt.lease_namespace_explicit);
  auto with_source = [&](CheckResult r) {
    r.evidence.insert(r.evidence.begin(), lease_source);
    if (config) {
      r.evidence.insert(r.evidence.end(), config->notes.begin(), config->notes.end());
    }
    return r;
  };
  if (names.lease_name.empty()) {
    results.push_back(with_source(check_lease(std::nullopt, names, std::chrono::system_clock::now())));
  } else {
    auto lease = co_await client->get_lease(names.lease_namespace, names.lease_name);
    // Not where the configuration's namespace says: serve run out of cluster may have put it in gpuslice-system
    // (doctor/diagnose.h: out_of_cluster_lease_namespace).
    std::string second_look;
    if (!lease && lease.error().is_not_found()) {
      if (auto other = out_of_cluster_lease_namespace(names, config, opt.lease_namespace_explicit)) {
        std::string other_ns = *other;
        std::string lease_name = names.lease_name;
        auto there = co_await client->get_lease(other_ns, lease_name);
        if (there || there.error().is_not_found()) {
          second_look =
              out_of_cluster_lease_note(names.lease_namespace, other_ns, lease_name, static_cast<bool>(there));
          if (there) {
            names.lease_namespace = other_ns;
            lease = std::move(there);
          }
        }
      }
    }
    auto with_look = [&](CheckResult r) {
      if (!second_look.empty()) {
        r.evidence.insert(r.evidence.begin(), second_look);
      }
      return with_source(std::move(r));
    };
    if (lease) {
      results.push_back(with_look(check_lease(*lease, names, std::chrono::system_clock::now())));
    } else if (lease.error().is_not_found()) {
      results.push_back(with_look(check_lease(std::nullopt, names, std::chrono::system_clock::now())));
    } else {
      results.push_back(
          failed_read("scheduler-lease", "Lease " + names.lease_namespace + "/" + names.lease_name, lease.error()));
    }
  }

  // 9. gpu-inventory.
  if (nodes) {
    results.push_back(check_inventory(nodes->items));
  } else {
    results.push_back(failed_read("gpu-inventory", "nodes", nodes.error()));
  }
  correlate(results, path);
  client->close_idle();
}

std::function<int()> setup(CLI::App& app) {
  auto opt = std::make_shared<Options>();
  auto* sub = app.add_subcommand("doctor", "Check a tenant's gpuslice end to end (webhook, tunnel, scheduler, GPUs)");
  sub->add_option("--kubeconfig", opt->kubeconfig, "kubeconfig (default: $KUBECONFIG, in-cluster, ~/.kube/config)");
  sub->add_option("--context", opt->context, "kubeconfig context (default: current-context)");
  auto* ns_flag = sub->add_option("--namespace", opt->names.namespace_,
                                  "gpuslice's namespace: its ConfigMap, Secret and (unless the configuration names "
                                  "another) its Lease (default: the webhook Service's, else gpuslice-system)");
  auto* config_flag = sub->add_option("--config", opt->config_file,
                                      "gpuslice's configuration file (default: the GpusliceConfiguration ConfigMap in "
                                      "gpuslice's namespace), for its Lease and webhook port");
  auto* webhook_name_flag = sub->add_option("--webhook-name", opt->names.webhook_configuration,
                                            "MutatingWebhookConfiguration name (default: any that points at gpuslice, "
                                            "\"gpuslice\" preferred)");
  sub->add_option("--webhook", opt->names.webhook, "webhooks[] entry name (default: the first)");
  auto* lease_flag =
      sub->add_option("--lease", opt->names.lease_name,
                      "scheduler Lease name (default: the configuration's; empty: skip the lease check)");
  auto* lease_ns_flag = sub->add_option("--lease-namespace", opt->names.lease_namespace,
                                        "the Lease's namespace (default: the configuration's resourceNamespace, else "
                                        "gpuslice's namespace: the rule serve uses)");
  auto* sched_flag = sub->add_option("--scheduler-name", opt->names.scheduler_name,
                                     "schedulerName the webhook writes (default: the configuration's)");
  sub->add_option("--guard-policy", opt->names.guard_policy, "ValidatingAdmissionPolicy of the scheduler guard")
      ->default_val(opt->names.guard_policy);
  sub->add_option("--probe-namespace", opt->names.probe_namespace,
                  "namespace of the dry-run probe pods (must not be ignored by the webhook)")
      ->default_val(opt->names.probe_namespace);
  sub->add_option("--serving-cert", opt->serving_cert,
                  "the webhook's serving certificate PEM (default: tls.crt of the TLS Secret)");
  sub->add_option("--tls-secret", opt->tls_secret, "the webhook's TLS Secret, in the Service's namespace")
      ->default_val(opt->tls_secret);
  sub->add_option("--output", opt->output, "text or json")
      ->default_val(opt->output)
      ->check(CLI::IsMember({"text", "json"}));
  sub->add_option("--request-timeout", opt->timeout_seconds, "seconds per API request")
      ->default_val(opt->timeout_seconds)
      ->check(CLI::Range(1, 120));
  (void)config_flag;
  return [opt, ns_flag, webhook_name_flag, lease_flag, lease_ns_flag, sched_flag]() -> int {
    opt->namespace_explicit = ns_flag->count() > 0;
    opt->names.webhook_configuration_explicit = webhook_name_flag->count() > 0;
    opt->lease_explicit = lease_flag->count() > 0;
    opt->lease_namespace_explicit = lease_ns_flag->count() > 0;
    opt->scheduler_name_explicit = sched_flag->count() > 0;
    gpuslice::log::configure(gpuslice::log::Format::text, 0, stderr);
    auto env = gpuslice::kube::Environment::system();
    auto cfg = opt->context.empty() ? gpuslice::kube::load_default_config(opt->kubeconfig, env)
                                    : gpuslice::kube::load_kubeconfig(opt->kubeconfig, opt->context, env);
    if (!cfg) {
      std::fprintf(stderr, "gpuslice doctor: %s\n", cfg.message().c_str());
      return 2;
    }
    asio::io_context io;
    gpuslice::kube::ClientOptions copts;
    copts.timeout = std::chrono::seconds(opt->timeout_seconds);
    copts.user_agent = "gpuslice-doctor";
    auto client = Client::create(io.get_executor(), *cfg, copts);
    if (!client) {
      std::fprintf(stderr, "gpuslice doctor: %s\n", client.message().c_str());
      return 2;
    }
    std::vector<CheckResult> results;
    bool crashed = false;
    asio::co_spawn(io, run_checks(*client, *opt, results), [&](std::exception_ptr e) {
      // Only std::bad_alloc and the like can get here: the client returns errors as values.
      crashed = e != nullptr;
    });
    io.run();
    std::string header = cfg->server + (cfg->context.empty() ? std::string(" (") + cfg->source + ")"
                                                             : " (context " + cfg->context + ")");
    std::string report = opt->output == "json" ? gpuslice::doctor::format_report_json(header, results)
                                               : gpuslice::doctor::format_report(header, results);
    std::fputs(report.c_str(), stdout);
    if (crashed) {
      std::fprintf(stderr, "gpuslice doctor: the checks stopped early on an internal error\n");
      return 2;
    }
    return gpuslice::doctor::exit_code(results);
  };
}
GPUSLICE_COMMAND("doctor", setup);

}  // namespace
