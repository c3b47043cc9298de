#pragma once
// Read-only pages a component serves on the plain-HTTP health port besides the probes and /metrics (the
// scheduler's /status page and /status.json), as plain data and functions: the webhook server serves them
// (webhook/router.h routes GET and HEAD of a registered path here) and any component adds its own without
// depending on the server.
//
//   Pages pages;
//   pages.add("/status.json", [&](std::string_view query) -> Page { return {200, "application/json", body}; });
//   std::optional<Page> p = pages.serve("/status.json", "limit=10");   // nullopt: not a registered path

#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpuslice {

/// One answer: status, Content-Type and body. The server adds Content-Length, nosniff and no-store.
struct Page {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

/// Called with the raw query string (after '?', not decoded). Must be thread-safe and bounded in time and size;
/// a handler that throws gives a 500.
using PageHandler = std::function<Page(std::string_view query)>;

/// Thread-safe: pages may be added and removed while serving; handlers run without the lock held.
class Pages {
 public:
  /// Adds or replaces the page at `path` (exact match, e.g. "/status").
  void add(std::string path, PageHandler handler);
  void remove(const std::string& path);
  bool has(std::string_view path) const;
  std::vector<std::string> paths() const;
  /// The page's answer, or nullopt when no page is registered at `path`.
  std::optional<Page> serve(std::string_view path, std::string_view query) const;

 private:
  mutable std::mutex mutex_;
  std::vector<std::pair<std::string, PageHandler>> pages_;
};

}  // namespace gpuslice
