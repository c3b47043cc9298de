#pragma once
// API paths and query strings (pure). Paths follow the Kubernetes REST layout:
//   core:   /api/v1[/namespaces/{ns}]/{plural}[/{name}[/{subresource}]]
//   groups: /apis/{group}/{version}[/namespaces/{ns}]/{plural}[/{name}[/{subresource}]]

#include "common/result.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpuslice::kube {

/// A resource type. `group` empty means the core group ("/api/v1").
struct Resource {
  std::string group;
  std::string version;
  std::string plural;
  bool namespaced = true;
};

namespace resources {
Resource pods();         ///< v1 pods
Resource nodes();        ///< v1 nodes (cluster-scoped)
Resource namespaces();   ///< v1 namespaces (cluster-scoped)
Resource config_maps();  ///< v1 configmaps
Resource events();       ///< events.k8s.io/v1 events
Resource leases();       ///< coordination.k8s.io/v1 leases
}  // namespace resources

/// "/api/v1/pods" (ns empty: all namespaces, or cluster-scoped) or "/api/v1/namespaces/{ns}/pods".
std::string collection_path(const Resource& r, std::string_view ns = {});
/// "/api/v1/namespaces/{ns}/pods/{name}" plus "/{subresource}" when given. Segments are percent-encoded.
std::string object_path(const Resource& r, std::string_view ns, std::string_view name,
                        std::string_view subresource = {});

/// Percent-encodes a query component (RFC 3986 unreserved characters pass through; space is %20).
std::string query_escape(std::string_view s);
/// Percent-encodes a path segment ('/' is encoded too).
std::string path_escape(std::string_view s);

using QueryParams = std::vector<std::pair<std::string, std::string>>;
/// "?k=v&k2=v2" with both sides escaped, in the given order; "" when empty.
std::string build_query(const QueryParams& params);

struct ListOptions {
  std::string label_selector;  ///< e.g. "app=x,tier!=db"
  std::string field_selector;  ///< e.g. "spec.nodeName=,spec.schedulerName=gpuslice-scheduler"
  int64_t limit = 500;         ///< page size; 0 = no pagination
  std::string continue_token;  ///< from the previous page's metadata.continue
  std::string resource_version;
  std::string resource_version_match;  ///< "", "NotOlderThan" or "Exact"
  int timeout_seconds = 0;             ///< 0: not sent
};

struct WatchOptions {
  std::string label_selector;
  std::string field_selector;
  std::string resource_version;  ///< resume point (opaque; never compared numerically)
  bool allow_bookmarks = true;   ///< allowWatchBookmarks=true
  int timeout_seconds = 300;     ///< server ends the watch after this; the client reconnects
};

/// Query parameters for a list request, only those set, in a fixed order.
QueryParams list_query(const ListOptions& o);
/// Query parameters for a watch request: watch=1, then the set options.
QueryParams watch_query(const WatchOptions& o);

enum class DeletePropagation { unset, orphan, background, foreground };
struct DeleteOptions {
  std::optional<int64_t> grace_period_seconds;
  DeletePropagation propagation = DeletePropagation::unset;
  std::string precondition_uid;               ///< preconditions.uid when non-empty
  std::string precondition_resource_version;  ///< preconditions.resourceVersion when non-empty
};
/// The DeleteOptions JSON body ("" when nothing is set).
std::string delete_options_body(const DeleteOptions& o);

/// A parsed `server:` URL. Only https is accepted for real clusters; http only for tests (`allow_http`).
struct ServerUrl {
  std::string scheme;     ///< "https" or "http"
  std::string host;       ///< without IPv6 brackets
  std::string port;       ///< defaults to 443 / 80
  std::string base_path;  ///< path prefix without a trailing '/', usually ""
  bool host_is_ip = false;
  /// "host:port" as sent in the Host header (IPv6 bracketed; the port omitted when default).
  std::string host_header() const;
};
/// Parses "https://10.0.0.1:6443", "https://[::1]:6443/prefix", "https://kubernetes.default.svc". Errors
/// name the URL and what is wrong.
Result<ServerUrl> parse_server_url(std::string_view url, bool allow_http = false);

}  // namespace gpuslice::kube
