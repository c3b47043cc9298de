// `gpuslice serve`: the webhook (TLS), probes and /metrics, plus the components registered in cmd/serve.h
// (the scheduler loop). Flags override the configuration file; start-up errors name the field and value.
#include "cmd/serve.h"

#include "cmd/command.h"
#include "common/config.h"
#include "common/log.h"
#include "webhook/admission.h"
#include "webhook/server.h"

#include <csignal>
#include <cstdio>
#include <memory>
#include <optional>

namespace gpuslice::cmd {
std::vector<ServeExtension>& serve_extensions() {
  static std::vector<ServeExtension> v;
  return v;
}
}  // namespace gpuslice::cmd

namespace {

using namespace gpuslice;

/// Flag values; applied over the loaded configuration only when given on the command line.
struct Flags {
  std::string config_file;
  std::string tls_cert_file, tls_private_key_file, bind_address, health_bind_address, scheduler_name;
  std::string logging_format;
  int verbosity = 0;
  bool enable_webhook = true, enable_scheduler = true;
  int threads = 0;
  uint64_t max_body_bytes = 0;
  uint32_t max_header_bytes = 0;
  std::string read_timeout, idle_timeout, handshake_timeout, write_timeout;
  std::string cert_poll_interval = "5s", shutdown_grace = "5s";
  size_t max_connections = 4096;
  std::vector<std::string> takeover, ignored_namespaces;
  std::string runtime_class_name, gpu_core_policy;
  std::map<std::string, CLI::Option*> opts;

  bool given(const std::string& name) const {
    auto it = opts.find(name);
    return it != opts.end() && it->second->count() > 0;
  }
};

Status apply_duration(const Flags& f, const std::string& flag, const std::string& text,
                      std::chrono::milliseconds& out) {
  if (!f.given(flag)) {
    return Status::Ok();
  }
  auto d = parse_duration(text);
  if (!d.ok()) {
    return make_error(flag + ": \"" + text + "\": " + d.message());
  }
  out = *d;
  return Status::Ok();
}

/// For the keys whose default follows another (webhook.handshakeTimeout and writeTimeout follow readTimeout).
Status apply_duration(const Flags& f, const std::string& flag, const std::string& text,
                      std::optional<std::chrono::milliseconds>& out) {
  return f.given(flag) ? apply_duration(f, flag, text, out.emplace()) : Status::Ok();
}

Status apply_flags(const Flags& f, Configuration& c) {
  auto& w = c.webhook;
  if (f.given("--tls-cert-file")) w.tls_cert_file = f.tls_cert_file;
  if (f.given("--tls-private-key-file")) w.tls_private_key_file = f.tls_private_key_file;
  if (f.given("--webhook-bind-address")) w.bind_address = f.bind_address;
  if (f.given("--health-bind-address")) c.server.health_bind_address = f.health_bind_address;
  if (f.given("--scheduler-name")) c.scheduler_name = f.scheduler_name;
  if (f.given("--logging-format")) c.logging_format = f.logging_format;
  if (f.given("-v")) c.verbosity = f.verbosity;
  if (f.given("--enable-webhook")) w.enabled = f.enable_webhook;
  if (f.given("--enable-scheduler")) c.scheduler.enabled = f.enable_scheduler;
  if (f.given("--webhook-threads")) w.threads = f.threads;
  if (f.given("--webhook-max-body-bytes")) w.max_body_bytes = f.max_body_bytes;
  if (f.given("--webhook-max-header-bytes")) w.max_header_bytes = f.max_header_bytes;
  if (f.given("--webhook-max-connections")) w.max_connections = static_cast<uint32_t>(f.max_connections);
  if (f.given("--takeover-scheduler-names")) w.takeover_scheduler_names = f.takeover;
  if (f.given("--ignored-namespaces")) w.ignored_namespaces = f.ignored_namespaces;
  if (f.given("--runtime-class-name")) w.runtime_class_name = f.runtime_class_name;
  if (f.given("--gpu-core-policy")) w.gpu_core_policy = f.gpu_core_policy;
  if (auto st = apply_duration(f, "--webhook-read-timeout", f.read_timeout, w.read_timeout); !st.ok()) return st;
  if (auto st = apply_duration(f, "--webhook-idle-timeout", f.idle_timeout, w.idle_timeout); !st.ok()) return st;
  if (auto st = apply_duration(f, "--webhook-handshake-timeout", f.handshake_timeout, w.handshake_timeout); !st.ok())
    return st;
  if (auto st = apply_duration(f, "--webhook-write-timeout", f.write_timeout, w.write_timeout); !st.ok()) return st;
  return validate_configuration(c);
}

std::function<int()> setup(CLI::App& app) {
  auto* sub = app.add_subcommand("serve", "Run the admission webhook (TLS) and the registered components");
  auto f = std::make_shared<Flags>();
  auto& o = f->opts;
  o["--config"] = sub->add_option("--config", f->config_file,
                                  "Configuration file (apiVersion gpuslice.io/v1alpha1, kind GpusliceConfiguration)");
  o["--tls-cert-file"] = sub->add_option("--tls-cert-file", f->tls_cert_file, "Serving certificate (PEM chain)");
  o["--tls-private-key-file"] = sub->add_option("--tls-private-key-file", f->tls_private_key_file, "Serving key (PEM)");
  o["--webhook-bind-address"] =
      sub->add_option("--webhook-bind-address", f->bind_address, "HOST:PORT of the TLS webhook (default 0.0.0.0:9443)");
  o["--health-bind-address"] =
      sub->add_option("--health-bind-address", f->health_bind_address,
                      "HOST:PORT of the plain-HTTP probes and /metrics (default 0.0.0.0:8080; empty disables)");
  o["--scheduler-name"] = sub->add_option("--scheduler-name", f->scheduler_name,
                                          "schedulerName set on GPU pods (default gpuslice-scheduler)");
  o["--logging-format"] =
      sub->add_option("--logging-format", f->logging_format, "text or json")->check(CLI::IsMember({"text", "json"}));
  o["-v"] = sub->add_option("-v,--v", f->verbosity, "Log verbosity (0-10)")->check(CLI::Range(0, 10));
  o["--enable-webhook"] =
      sub->add_option("--enable-webhook", f->enable_webhook, "Serve the admission webhook (default true)");
  o["--enable-scheduler"] =
      sub->add_option("--enable-scheduler", f->enable_scheduler, "Run the scheduler loop when built in (default true)");
  o["--webhook-threads"] =
      sub->add_option("--webhook-threads", f->threads, "Server threads")->check(CLI::Range(1, 256));
  o["--webhook-max-body-bytes"] =
      sub->add_option("--webhook-max-body-bytes", f->max_body_bytes, "Request body limit (413 above)")
          ->check(CLI::Range(uint64_t{1024}, uint64_t{64} << 20));
  o["--webhook-max-header-bytes"] =
      sub->add_option("--webhook-max-header-bytes", f->max_header_bytes, "Request header limit (431 above)")
          ->check(CLI::Range(1024u, 1u << 20));
  o["--webhook-read-timeout"] =
      sub->add_option("--webhook-read-timeout", f->read_timeout, "Deadline for a whole request (e.g. 10s)");
  o["--webhook-idle-timeout"] =
      sub->add_option("--webhook-idle-timeout", f->idle_timeout, "Keep-alive idle deadline (e.g. 90s)");
  o["--webhook-handshake-timeout"] = sub->add_option("--webhook-handshake-timeout", f->handshake_timeout,
                                                     "Deadline for the TLS handshake (default: the read timeout)");
  o["--webhook-write-timeout"] = sub->add_option("--webhook-write-timeout", f->write_timeout,
                                                 "Deadline for writing one response (default: the read timeout)");
  o["--webhook-max-connections"] =
      sub->add_option("--webhook-max-connections", f->max_connections,
                      "Connection cap per listener (webhook.maxConnections, default 4096)");
  o["--cert-poll-interval"] = sub->add_option("--cert-poll-interval", f->cert_poll_interval,
                                              "How often the cert/key files are checked for rotation (0 disables)");
  o["--shutdown-grace"] = sub->add_option("--shutdown-grace", f->shutdown_grace,
                                          "On SIGTERM, how long in-flight requests may finish (default 5s)");
  o["--takeover-scheduler-names"] = sub->add_option("--takeover-scheduler-names", f->takeover,
                                                    "schedulerNames taken over (default default-scheduler)")
                                        ->delimiter(',');
  o["--ignored-namespaces"] =
      sub->add_option("--ignored-namespaces", f->ignored_namespaces, "Namespaces the webhook skips")->delimiter(',');
  o["--runtime-class-name"] =
      sub->add_option("--runtime-class-name", f->runtime_class_name, "runtimeClassName set on GPU pods");
  o["--gpu-core-policy"] = sub->add_option("--gpu-core-policy", f->gpu_core_policy, "default, force or disable")
                               ->check(CLI::IsMember({"default", "force", "disable"}));

  auto extensions = std::make_shared<std::vector<std::pair<cmd::ServeExtension*, cmd::ApplyFlags>>>();
  for (auto& ext : cmd::serve_extensions()) {
    extensions->emplace_back(&ext, ext.add_flags ? ext.add_flags(*sub) : cmd::ApplyFlags{});
  }

  return [f, extensions]() -> int {
    Configuration config;
    if (!f->config_file.empty()) {
      auto loaded = load_configuration_file(f->config_file);
      if (!loaded.ok()) {
        std::fprintf(stderr, "gpuslice serve: %s\n", loaded.message().c_str());
        return 1;
      }
      config = std::move(*loaded);
    }
    if (auto st = apply_flags(*f, config); !st.ok()) {
      std::fprintf(stderr, "gpuslice serve: %s\n", st.message().c_str());
      return 1;
    }
    for (auto& [ext, apply] : *extensions) {
      if (apply) {
        if (auto st = apply(config); !st.ok()) {
          std::fprintf(stderr, "gpuslice serve: %s\n", st.message().c_str());
          return 1;
        }
      }
    }
    log::Format format = log::Format::text;
    log::parse_format(config.logging_format, format);
    log::configure(format, config.verbosity);

    std::chrono::milliseconds poll{5000}, grace{5000};
    if (auto st = apply_duration(*f, "--cert-poll-interval", f->cert_poll_interval, poll); !st.ok()) {
      std::fprintf(stderr, "gpuslice serve: %s\n", st.message().c_str());
      return 1;
    }
    if (auto st = apply_duration(*f, "--shutdown-grace", f->shutdown_grace, grace); !st.ok()) {
      std::fprintf(stderr, "gpuslice serve: %s\n", st.message().c_str());
      return 1;
    }

    // Block the stop signals before any thread starts, so every thread inherits the mask and the main
    // thread alone receives them in sigwait.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

    auto shared_config = std::make_shared<const Configuration>(config);
    std::unique_ptr<webhook::Server> server;
    webhook::ServerOptions options = webhook::ServerOptions::from(config);
    options.cert_poll_interval = poll;
    options.shutdown_grace = grace;
    options.version = GPUSLICE_VERSION;
    if (!config.webhook.enabled) {
      options.bind_address.clear();
    }
    if (!options.bind_address.empty() || !options.health_bind_address.empty()) {
      server = std::make_unique<webhook::Server>(
          options, [shared_config](std::string_view body) { return webhook::review(body, *shared_config); });
      if (auto st = server->start(); !st.ok()) {
        std::fprintf(stderr, "gpuslice serve: %s\n", st.message().c_str());
        return 1;
      }
    }

    cmd::Runtime runtime{shared_config.get(), server ? &server->liveness() : nullptr,
                         server ? &server->readiness() : nullptr, server ? &server->pages() : nullptr};
    std::vector<std::unique_ptr<cmd::Component>> running;
    auto stop_all = [&] {
      for (auto it = running.rbegin(); it != running.rend(); ++it) {
        log::info("stopping component", {{"component", (*it)->name()}});
        (*it)->stop();
      }
      running.clear();
      if (server) {
        server->stop();
      }
    };
    bool scheduler_built_in = false;
    for (auto& [ext, apply] : *extensions) {
      scheduler_built_in = scheduler_built_in || ext->name == "scheduler";
      auto component = ext->make ? ext->make(*shared_config) : nullptr;
      if (!component) {
        log::info("component disabled", {{"component", ext->name}});
        continue;
      }
      if (auto st = component->start(runtime); !st.ok()) {
        std::fprintf(stderr, "gpuslice serve: %s: %s\n", ext->name.c_str(), st.message().c_str());
        stop_all();
        return 1;
      }
      log::info("component started", {{"component", component->name()}});
      running.push_back(std::move(component));
    }
    if (config.scheduler.enabled && !scheduler_built_in) {
      log::info("scheduler requested but not built into this binary; serving the webhook only");
    }
    if (!server && running.empty()) {
      std::fprintf(stderr, "gpuslice serve: nothing to run (webhook disabled, no probe address, no component)\n");
      return 1;
    }

    int sig = 0;
    sigwait(&stop_signals, &sig);
    log::info("shutting down", {{"signal", sig == SIGTERM ? "SIGTERM" : "SIGINT"}});
    stop_all();
    return 0;
  };
}

GPUSLICE_COMMAND("serve", setup);

}  // namespace
