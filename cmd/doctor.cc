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
  int timeout_seconds = 15;
  Names names;
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

asio::awaitable<void> run_checks(std::shared_ptr<Client> client, const Options& opt,
                                 std::vector<CheckResult>& results) {
  using namespace gpuslice::doctor;
  const Names& names = opt.names;
  const std::string adm = "/apis/admissionregistration.k8s.io/v1/";

  // 1. webhook-config (+ its Service).
  std::optional<WebhookRef> ref;
  // GCC 12 mishandles non-trivial temporaries inside co_await expressions (double destruction): every
  // argument is a named local here.
  std::string mwc_path =
      adm + "mutatingwebhookconfigurations/" + gpuslice::kube::path_escape(names.webhook_configuration);
  auto mwc = co_await lookup(*client, std::move(mwc_path));
  if (mwc.failure) {
    results.push_back(
        failed_read("webhook-config", "MutatingWebhookConfiguration " + names.webhook_configuration, *mwc.failure));
  } else {
    std::optional<json::object> service;
    bool service_failed = false;
    if (mwc.object) {
      auto parsed = parse_webhook_config(*mwc.object, names);
      if (parsed && !parsed->service_name.empty()) {
        const gpuslice::kube::Resource services{"", "v1", "services"};
        std::string svc_path = gpuslice::kube::object_path(services, parsed->service_namespace, parsed->service_name);
        auto svc = co_await lookup(*client, std::move(svc_path));
        if (svc.failure) {
          results.push_back(failed_read(
              "webhook-config", "Service " + parsed->service_namespace + "/" + parsed->service_name, *svc.failure));
          service_failed = true;
        }
        service = std::move(svc.object);
      }
    }
    if (!service_failed) {
      results.push_back(check_webhook_config(mwc.object, service, names, ref));
    }
  }

  // 2. serving-cert.
  if (!ref) {
    results.push_back(CheckResult{"serving-cert", Verdict::skip, {"no usable webhook configuration"}, {}, {}, {}});
  } else {
    std::optional<std::string> pem;
    std::string source;
    if (!opt.serving_cert.empty()) {
      pem = read_small_file(opt.serving_cert);
      source = "--serving-cert " + opt.serving_cert + (pem ? "" : ": cannot read");
    } else {
      std::string ns = ref->service_namespace.empty() ? names.lease_namespace : ref->service_namespace;
      source = "Secret " + ns + "/" + opt.tls_secret;
      const gpuslice::kube::Resource secrets{"", "v1", "secrets"};
      std::string secret_path = gpuslice::kube::object_path(secrets, ns, opt.tls_secret);
      auto secret = co_await lookup(*client, std::move(secret_path));
      if (secret.object) {
        auto crt = tls_crt_from_secret(*secret.object);
        if (crt) {
          pem = std::move(*crt);
        } else {
          source += ": " + crt.message();
        }
      } else {
        source +=
            secret.failure ? ": " + std::to_string(secret.failure->code) + " " + secret.failure->reason : ": not found";
      }
    }
    auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    results.push_back(check_serving_cert(*ref, pem, source, static_cast<int64_t>(now)));
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
    results.push_back(check_tunnel(probe_node, failure));
  }

  // 4, 5. dry runs.
  const json::object gpu_probe = make_probe_pod(true, names.probe_namespace);
  auto gpu_result = co_await dry_run(*client, gpu_probe, opt);
  results.push_back(check_gpu_dry_run(gpu_result, names));
  const json::object plain_probe = make_probe_pod(false, names.probe_namespace);
  auto plain_result = co_await dry_run(*client, plain_probe, opt);
  results.push_back(check_plain_dry_run(plain_result, names));

  // 6. scheduler-guard.
  {
    std::string policy_path = adm + "validatingadmissionpolicies/" + gpuslice::kube::path_escape(names.guard_policy);
    auto policy = co_await lookup(*client, std::move(policy_path));
    if (policy.failure) {
      results.push_back(
          failed_read("scheduler-guard", "ValidatingAdmissionPolicy " + names.guard_policy, *policy.failure));
    } else {
      std::string bindings_path = adm + "validatingadmissionpolicybindings";
      auto bindings = co_await client->list(std::move(bindings_path), list_options);
      if (!bindings) {
        results.push_back(failed_read("scheduler-guard", "ValidatingAdmissionPolicyBindings", bindings.error()));
      } else {
        results.push_back(check_guard(policy.object, bindings->items, names));
      }
    }
  }

  // 7. scheduler-lease.
  if (names.lease_name.empty()) {
    results.push_back(check_lease(std::nullopt, names, std::chrono::system_clock::now()));
  } else {
    auto lease = co_await client->get_lease(names.lease_namespace, names.lease_name);
    if (lease) {
      results.push_back(check_lease(*lease, names, std::chrono::system_clock::now()));
    } else if (lease.error().is_not_found()) {
      results.push_back(check_lease(std::nullopt, names, std::chrono::system_clock::now()));
    } else {
      results.push_back(
          failed_read("scheduler-lease", "Lease " + names.lease_namespace + "/" + names.lease_name, lease.error()));
    }
  }

  // 8. gpu-inventory.
  if (nodes) {
    results.push_back(check_inventory(nodes->items));
  } else {
    results.push_back(failed_read("gpu-inventory", "nodes", nodes.error()));
  }
  correlate(results);
  client->close_idle();
}

std::function<int()> setup(CLI::App& app) {
  auto opt = std::make_shared<Options>();
  auto* sub = app.add_subcommand("doctor", "Check a tenant's gpuslice end to end (webhook, tunnel, scheduler, GPUs)");
  sub->add_option("--kubeconfig", opt->kubeconfig, "kubeconfig (default: $KUBECONFIG, in-cluster, ~/.kube/config)");
  sub->add_option("--context", opt->context, "kubeconfig context (default: current-context)");
  sub->add_option("--namespace", opt->names.lease_namespace, "gpuslice's namespace (its Lease)")
      ->default_val(opt->names.lease_namespace);
  sub->add_option("--webhook-name", opt->names.webhook_configuration, "MutatingWebhookConfiguration name")
      ->default_val(opt->names.webhook_configuration);
  sub->add_option("--webhook", opt->names.webhook, "webhooks[] entry name (default: the first)");
  sub->add_option("--lease", opt->names.lease_name, "scheduler Lease name (empty: skip the lease check)")
      ->default_val(opt->names.lease_name);
  sub->add_option("--scheduler-name", opt->names.scheduler_name, "schedulerName the webhook writes")
      ->default_val(opt->names.scheduler_name);
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
  return [opt]() -> int {
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
