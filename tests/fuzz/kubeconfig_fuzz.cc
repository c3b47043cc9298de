// kubeconfig YAML -> KubeconfigFile -> RestConfig for every context. Oracle: nothing throws (YAML errors come
// back as Errors); every file path in the result is absolute (resolved against the base directory); selecting
// a context either fails with a message or yields a non-empty server; merging a file with itself changes
// nothing. Also feeds the same bytes to the ExecCredential and RFC 3339 parsers.
#include "common/rfc3339.h"
#include "kube/auth.h"
#include "kube/kubeconfig.h"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

namespace {
void check_path(const std::string& p) {
  if (!p.empty() && p.front() != '/') {
    std::abort();
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto cred = gpuslice::kube::parse_exec_credential(text, "client.authentication.k8s.io/v1");
  if (cred && cred->token.empty() && cred->client_certificate_pem.empty()) {
    std::abort();
  }
  (void)gpuslice::parse_rfc3339(text.substr(0, 64));

  auto f = gpuslice::kube::parse_kubeconfig(text, "/base");
  if (!f) {
    if (f.message().empty()) {
      std::abort();
    }
    return 0;
  }
  for (const auto& [name, c] : f->clusters) {
    check_path(c.ca_file);
  }
  for (const auto& [name, u] : f->users) {
    check_path(u.client_cert_file);
    check_path(u.client_key_file);
    check_path(u.token_file);
  }
  const auto merged = gpuslice::kube::merge_kubeconfigs({*f, *f});
  if (merged.clusters.size() != f->clusters.size() || merged.users.size() != f->users.size() ||
      merged.contexts.size() != f->contexts.size() || merged.current_context != f->current_context) {
    std::abort();
  }
  auto select = [&](std::string_view ctx) {
    auto rc = gpuslice::kube::select_context(*f, ctx);
    if (rc) {
      if (rc->server.empty()) {
        std::abort();
      }
      check_path(rc->ca_file);
      check_path(rc->token_file);
    } else if (rc.message().empty()) {
      std::abort();
    }
  };
  select({});
  for (const auto& [name, c] : f->contexts) {
    select(name);
  }
  return 0;
}
