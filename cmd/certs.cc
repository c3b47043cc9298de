// `gpuslice certs`: a CA and a serving certificate for a webhook Service, plus the caBundle.
#include "certs/certs.h"
#include "cmd/command.h"

#include <cstdio>
#include <ctime>
#include <memory>

namespace {

using namespace gpuslice;

std::function<int()> setup(CLI::App& app) {
  auto* sub = app.add_subcommand("certs", "Create a CA and a serving certificate for the webhook Service");
  auto req = std::make_shared<certs::ServingRequest>();
  auto out_dir = std::make_shared<std::string>();
  sub->add_option("--service", req->service, "Service name")->required();
  sub->add_option("--namespace", req->namespace_, "Service namespace")->required();
  sub->add_option("--ip-san", req->ip_sans, "Extra IP SAN (repeatable)");
  sub->add_option("--dns-san", req->dns_sans, "Extra DNS SAN (repeatable)");
  sub->add_option("--out-dir", *out_dir, "Directory for ca.crt, ca.key, tls.crt, tls.key, ca-bundle.b64")->required();
  sub->add_option("--days", req->days, "Validity in days (default 365)");
  return [req, out_dir]() -> int {
    auto bundle = certs::generate(*req, static_cast<int64_t>(std::time(nullptr)));
    if (!bundle.ok()) {
      std::fprintf(stderr, "gpuslice certs: %s\n", bundle.message().c_str());
      return 1;
    }
    if (auto st = certs::write_bundle(*bundle, *out_dir); !st.ok()) {
      std::fprintf(stderr, "gpuslice certs: %s\n", st.message().c_str());
      return 1;
    }
    std::string names;
    for (const auto& n : certs::serving_dns_names(*req)) {
      names += (names.empty() ? "" : ",") + n;
    }
    for (const auto& ip : req->ip_sans) {
      names += "," + ip;
    }
    std::fprintf(stderr, "gpuslice certs: wrote %s/{ca.crt,ca.key,tls.crt,tls.key,ca-bundle.b64} for %s (%d days)\n",
                 out_dir->c_str(), names.c_str(), req->days);
    return 0;
  };
}

GPUSLICE_COMMAND("certs", setup);

}  // namespace
