// Kubernetes-style health checks (see health.h); the reply formats follow k8s.io/apiserver/pkg/server/healthz.
#include "common/health.h"

#include "common/log.h"

#include <algorithm>
#include <exception>

namespace gpuslice {
namespace {

/// Values of `key` in a query string (no percent-decoding needed for check names); `present` also when
/// the key has no value (`?verbose`).
std::vector<std::string_view> query_values(std::string_view query, std::string_view key, bool& present) {
  std::vector<std::string_view> out;
  present = false;
  while (!query.empty()) {
    auto amp = query.find('&');
    auto part = query.substr(0, amp);
    auto eq = part.find('=');
    auto k = part.substr(0, eq);
    if (k == key) {
      present = true;
      if (eq != std::string_view::npos) {
        out.push_back(part.substr(eq + 1));
      }
    }
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
  }
  return out;
}

}  // namespace

void HealthChecks::add(std::string name, HealthCheck check) {
  std::lock_guard lock(mutex_);
  for (auto& [n, c] : checks_) {
    if (n == name) {
      c = std::move(check);
      return;
    }
  }
  checks_.emplace_back(std::move(name), std::move(check));
}

void HealthChecks::remove(const std::string& name) {
  std::lock_guard lock(mutex_);
  std::erase_if(checks_, [&](const auto& p) { return p.first == name; });
}

std::vector<std::string> HealthChecks::names() const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> out;
  for (const auto& [n, c] : checks_) {
    out.push_back(n);
  }
  return out;
}

HealthChecks::Reply HealthChecks::evaluate(std::string_view sub_path, std::string_view query) const {
  std::vector<std::pair<std::string, HealthCheck>> checks;
  {
    std::lock_guard lock(mutex_);
    checks = checks_;  // run checks without the lock: they may be slow or add checks themselves
  }
  auto run = [&](const std::string& name, const HealthCheck& c) -> Status {
    Status st;
    try {
      st = c ? c() : Status::Ok();
    } catch (const std::exception& e) {
      st = make_error(std::string("check threw: ") + e.what());
    }
    if (!st.ok()) {
      log::info("health check failed", {{"endpoint", endpoint_}, {"check", name}, {"reason", st.message()}}, 2);
    }
    return st;
  };
  if (!sub_path.empty()) {
    auto name = sub_path.substr(1);
    for (const auto& [n, c] : checks) {
      if (n == name) {
        auto st = run(n, c);
        if (st.ok()) {
          return {200, "ok"};
        }
        return {500, "internal server error: " + n + " check failed\n"};
      }
    }
    return {404, "404 page not found: no check \"" + std::string(name) + "\" under /" + endpoint_ + "\n"};
  }
  bool verbose = false;
  query_values(query, "verbose", verbose);
  bool has_exclude = false;
  auto excluded = query_values(query, "exclude", has_exclude);
  std::string list;
  bool failed = false;
  for (const auto& [n, c] : checks) {
    if (std::find(excluded.begin(), excluded.end(), n) != excluded.end()) {
      list += "[+]" + n + " excluded: ok\n";
      continue;
    }
    if (run(n, c).ok()) {
      list += "[+]" + n + " ok\n";
    } else {
      failed = true;
      list += "[-]" + n + " failed: reason withheld\n";
    }
  }
  if (failed) {
    return {500, list + endpoint_ + " check failed\n"};
  }
  if (verbose) {
    return {200, list + endpoint_ + " check passed\n"};
  }
  return {200, "ok"};
}

}  // namespace gpuslice
