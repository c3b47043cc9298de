#pragma once
// Health checks with Kubernetes' /livez and /readyz semantics, as plain data and functions: the webhook
// server serves them (webhook/router.h routes GET /livez, /readyz, /healthz here) and any component adds its
// own (the scheduler's "leader" and "informer-sync") without depending on the server.
//
//   HealthChecks readiness("readyz");
//   readiness.add("leader", [&] { return elector.ready() ? Status::Ok() : make_error("not the leader"); });
//   auto reply = readiness.evaluate("", "verbose");   // {200, "[+]leader ok\nreadyz check passed\n"}

#include "common/result.h"

#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpuslice {

/// One health check: OK, or an Error whose message is logged (the HTTP answer withholds it, as
/// Kubernetes does, because probes are unauthenticated). A check that throws counts as failed.
using HealthCheck = std::function<Status()>;

/// A named, ordered set of checks served as /livez or /readyz with Kubernetes semantics:
///   GET /readyz            200 "ok" or 500 with the per-check list and "readyz check failed"
///   GET /readyz?verbose    200 "[+]ping ok\n...readyz check passed\n"
///   GET /readyz/<name>     200 "ok" / 500 for that check alone; 404 for an unknown name
///   ?exclude=<name>        skips a check (repeatable)
/// Thread-safe: checks may be added while serving; they run without the lock held.
class HealthChecks {
 public:
  explicit HealthChecks(std::string endpoint) : endpoint_(std::move(endpoint)) {}
  /// Adds or replaces the check `name` (e.g. "leader", "informer-sync").
  void add(std::string name, HealthCheck check);
  void remove(const std::string& name);
  std::vector<std::string> names() const;
  const std::string& endpoint() const { return endpoint_; }

  struct Reply {
    int status = 200;
    std::string body;
  };
  /// Evaluates for a request path below the endpoint ("" for all, "/name" for one) and its query string.
  Reply evaluate(std::string_view sub_path, std::string_view query) const;

 private:
  std::string endpoint_;
  mutable std::mutex mutex_;
  std::vector<std::pair<std::string, HealthCheck>> checks_;
};

}  // namespace gpuslice
