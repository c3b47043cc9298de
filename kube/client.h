#pragma once
// Kubernetes API client over Boost.Beast + Asio + OpenSSL (HTTP/1.1, TLS, keep-alive pool).
//
// Async model: C++20 coroutines. Every operation is a `boost::asio::awaitable<ApiResult<T>>` (or
// ApiStatus); internally every Asio call uses `as_tuple(use_awaitable)`, so errors come back as values and
// nothing is thrown (a std::bad_alloc aside). Run the coroutines with co_spawn on the client's executor:
//
//   auto client = kube::Client::create(io.get_executor(), config, {}).value();
//   co_spawn(io, [&]() -> awaitable<void> {
//     kube::ListOptions unbound;
//     unbound.field_selector = "spec.nodeName=";
//     auto pods = co_await client->list(collection_path(resources::pods()), unbound);
//     if (!pods) log::error("list", {{"error", pods.error().to_string()}});
//   }, detached);
//
// g++-12 pitfalls (verified with ASan on this toolchain): (1) a braced aggregate temporary inside a co_await
// expression is destroyed twice (`co_await c->list(p, ListOptions{...})`, `co_await c->watch(p, {}, h)`):
// build option structs as named locals first (defaults here use value-initialisation, which is safe);
// (2) never co_await inside Catch2's REQUIRE (it wraps the expression in __builtin_constant_p and g++
// evaluates the co_await twice).
//
// Threading: a Client and everything using it live on ONE executor: an io_context run by one thread, or a
// strand. Calls from other threads must be posted there.
//
// Every request: waits for a QPS/burst token (TokenBucket), has a deadline (ClientOptions::timeout or the
// per-call override) covering connect, TLS, write and read; reuses an idle keep-alive connection when one
// is pooled; caps the response body; decodes 4xx/5xx Status bodies into ApiError; on 401 with a refreshable
// credential (token file, exec plugin) refreshes it and retries once. The server certificate is verified
// against the CA and the host name or IP (or tls-server-name) unless insecure-skip-tls-verify.

#include "kube/auth.h"
#include "kube/backoff.h"
#include "kube/error.h"
#include "kube/kubeconfig.h"
#include "kube/objects.h"
#include "kube/rate_limiter.h"
#include "kube/url.h"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace gpuslice::kube {

/// TCP keepalive on every API-server connection, set right after connect, so a silently dead peer (a cut
/// network, a killed VM: nothing answers, nothing is refused) is found in about `user_timeout` instead of the
/// kernel's defaults (keepalive after 2 h; unacknowledged data retransmitted for about 15 min). client-go's dialer
/// sets SO_KEEPALIVE 30 s (k8s.io/client-go v0.36.3 transport/cache.go) and, over HTTP/2, pings a connection idle
/// for 30 s (apimachinery pkg/util/net/http.go, ReadIdleTimeout); this client speaks HTTP/1.1, so the kernel does it.
struct TcpKeepalive {
  bool enabled = true;
  std::chrono::seconds idle{15};                  ///< TCP_KEEPIDLE: idle time before the first probe
  std::chrono::seconds interval{5};               ///< TCP_KEEPINTVL: between probes
  int count = 3;                                  ///< TCP_KEEPCNT: unanswered probes before the connection is dropped
  std::chrono::milliseconds user_timeout{30000};  ///< TCP_USER_TIMEOUT (Linux): unacknowledged data, probes; 0: off
};

/// Applies `keepalive` to a connected TCP socket (its native handle). The first setsockopt that fails is returned
/// (the connection stays usable: callers log it, never fail the request for it).
boost::system::error_code set_tcp_keepalive(int native_socket, const TcpKeepalive& keepalive);

struct ClientOptions {
  double qps = 50;  ///< client-side rate limit (<= 0: unlimited); watches take a token per (re)connect
  int burst = 100;
  std::chrono::milliseconds timeout{10000};      ///< default deadline of each request
  std::size_t max_response_bytes = 64u << 20;    ///< response body cap (large list pages)
  std::size_t max_watch_line_bytes = 16u << 20;  ///< one watch event line cap
  std::size_t max_idle_connections = 4;          ///< keep-alive pool size (watches use their own connection)
  /// Slack added to a watch's timeoutSeconds for its deadline (the server closes first normally).
  std::chrono::milliseconds watch_deadline_slack{30000};
  /// A watch stream that delivers no byte (no event, no BOOKMARK) for this long is taken for dead and ends with
  /// WatchEnd::idle. kube-apiserver's watch cache sends a BOOKMARK about every minute to a watch that asked for
  /// them (k8s.io/apiserver v0.36.3 pkg/storage/cacher/cache_watcher.go nextBookmarkTime, cacher.go
  /// defaultBookmarkFrequency), so 90 s of silence is a dead connection, not a quiet cluster. 0: no idle deadline.
  std::chrono::milliseconds watch_read_idle_timeout{90000};
  TcpKeepalive keepalive;  ///< on every connection (requests and watches)
  std::string user_agent = "gpuslice";
  bool allow_http = false;  ///< accept http:// servers (tests only)
  AuthOptions auth;         ///< token file period, exec runner, injected clocks
  /// The clock for the rate limiter (injected for tests; real timers still sleep the returned delay).
  std::function<std::chrono::steady_clock::time_point()> steady_now = [] { return std::chrono::steady_clock::now(); };
};

/// True for the errors a pooled keep-alive connection shows when its peer went away while it sat idle (EOF,
/// ECONNRESET, ECONNABORTED, ENETRESET, EPIPE, a truncated TLS stream, and ETIMEDOUT: the kernel gave up on a
/// silent peer after TCP keepalive or TCP_USER_TIMEOUT): such a request is retried once on a fresh connection
/// when no response byte had arrived, and the other pooled connections, which went to the same peer, are dropped.
bool is_stale_connection_error(const boost::system::error_code& ec);

enum class HttpMethod { get, post, put, patch, del };
const char* method_name(HttpMethod m);

enum class PatchType { json, merge, strategic_merge, apply };
/// application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json,
/// application/apply-patch+yaml.
const char* patch_content_type(PatchType t);

struct Request {
  HttpMethod method = HttpMethod::get;
  std::string path;                                  ///< absolute API path with query, e.g. "/api/v1/pods?limit=500"
  std::string body;                                  ///< empty: no body
  std::string content_type;                          ///< default application/json when a body is present
  std::optional<std::chrono::milliseconds> timeout;  ///< overrides ClientOptions::timeout
};

struct Response {
  int status = 0;
  std::string content_type;
  std::string body;
};

/// Cooperative cancellation of a long operation (watch, Reflector::run). cancel() must be called on the
/// client's executor; it closes the operation's connection, which then ends with reason Cancelled.
class Cancellation {
 public:
  void cancel();
  bool cancelled() const { return cancelled_; }
  /// Used by the client: `hook` runs at cancel() (at once if already cancelled). Empty to clear.
  void set_hook(std::function<void()> hook);

 private:
  bool cancelled_ = false;
  std::function<void()> hook_;
};

/// How a watch ended without an error.
enum class WatchEnd {
  closed,     ///< the server ended the stream (timeoutSeconds elapsed): reconnect from last_resource_version
  idle,       ///< no byte for ClientOptions::watch_read_idle_timeout: a dead connection; reconnect from
              ///< last_resource_version (no relist)
  gone,       ///< 410 Gone, as the HTTP status or as an in-stream ERROR event: relist, then watch again
  stopped,    ///< the handler returned false
  cancelled,  ///< Cancellation::cancel()
};
const char* watch_end_name(WatchEnd e);

struct WatchResult {
  WatchEnd end = WatchEnd::closed;
  std::string last_resource_version;  ///< the RV of the last event seen (BOOKMARK included); "" if none
  std::size_t events = 0;             ///< events delivered (BOOKMARKs included)
};

/// Receives each decoded event (never ERROR: a 410 ERROR ends the watch with WatchEnd::gone and other ERROR
/// events end it with an ApiError). Return false to stop the watch.
using WatchHandler = std::function<bool(WatchEvent& event)>;

class Client : public std::enable_shared_from_this<Client> {
 public:
  using executor_type = boost::asio::any_io_executor;

  /// Validates the config (server URL, PEMs) and builds the TLS context. Errors name the bad field.
  static Result<std::shared_ptr<Client>> create(executor_type executor, RestConfig config, ClientOptions options = {},
                                                Environment env = Environment::system());
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  executor_type get_executor() const { return executor_; }
  const RestConfig& config() const { return config_; }
  const ClientOptions& options() const { return options_; }

  // ---- raw and generic ----------------------------------------------------------------------------------

  /// One request. 2xx -> Response; 4xx/5xx -> ApiError decoded from the Status body.
  boost::asio::awaitable<ApiResult<Response>> send(Request request);

  /// GET path -> the object.
  boost::asio::awaitable<ApiResult<boost::json::object>> get(std::string path);
  /// POST collection path -> the created object (409 AlreadyExists surfaces as ApiError::is_already_exists()).
  boost::asio::awaitable<ApiResult<boost::json::object>> create(std::string collection_path,
                                                                const boost::json::value& object);
  /// PUT object path -> the stored object. With metadata.resourceVersion set, a concurrent change -> 409.
  boost::asio::awaitable<ApiResult<boost::json::object>> replace(std::string path, const boost::json::value& object);
  /// PATCH path (append "/status" etc. for subresources). `patch` is the JSON (or YAML for apply) text.
  /// `field_manager` is sent as ?fieldManager= when non-empty (required for apply). A merge or strategic
  /// patch carrying metadata.resourceVersion is an optimistic-concurrency precondition: a concurrent change
  /// answers 409 (is_conflict()).
  boost::asio::awaitable<ApiResult<boost::json::object>> patch(std::string path, PatchType type, std::string patch,
                                                               std::string field_manager = {});
  /// DELETE path with optional DeleteOptions. 404 is an error (is_not_found()); callers may ignore it.
  boost::asio::awaitable<ApiStatus> remove(std::string path, DeleteOptions options = DeleteOptions());

  // ---- list and watch -----------------------------------------------------------------------------------

  /// One page (limit/continue as given in options).
  boost::asio::awaitable<ApiResult<ListPage>> list_page(std::string collection_path, ListOptions options);
  /// All pages following metadata.continue; items concatenated, resource_version of the first page (the
  /// list's consistent snapshot). A 410 on a continue token (expired snapshot) restarts from the first page
  /// once, then is returned as an error.
  boost::asio::awaitable<ApiResult<ListPage>> list(std::string collection_path, ListOptions options = ListOptions());
  /// The same pages, handed to `on_page` one at a time as they arrive, so a large list never exists whole in
  /// memory (40,000 decoded pods are a few hundred MB). `first` is true for the first page of a pass: a 410 on a
  /// continue token restarts from the first page once, and the handler must then forget the pages it had (as
  /// for a fresh list). `page.continue_token.empty()` marks the last page. The handler may move the items out.
  /// Returns the list's resourceVersion (the first page's: the consistent snapshot every page belongs to).
  using ListPageHandler = std::function<void(ListPage& page, bool first)>;
  boost::asio::awaitable<ApiResult<std::string>> list_pages(std::string collection_path, ListOptions options,
                                                            ListPageHandler on_page);

  /// Watches until the server closes, 410, the handler stops, cancellation, no byte for
  /// watch_read_idle_timeout (WatchEnd::idle), or an error (transport, timeout, 4xx/5xx other than 410, an
  /// over-long line, a non-410 ERROR event). Deadline: timeout_seconds + watch_deadline_slack. The stream is
  /// framed on '\n' across chunk boundaries.
  boost::asio::awaitable<ApiResult<WatchResult>> watch(std::string collection_path, WatchOptions options,
                                                       WatchHandler handler,
                                                       std::shared_ptr<Cancellation> cancellation = nullptr);

  // ---- typed helpers for the scheduling loop ------------------------------------------------------------

  /// POST /api/v1/namespaces/{ns}/pods/{pod}/binding (201) carrying `metadata` onto the pod in the same write.
  /// 409 = already bound or the UID precondition failed (is_conflict()).
  boost::asio::awaitable<ApiStatus> bind_pod(std::string ns, std::string pod, std::string node,
                                             std::string pod_uid = {}, BindingMetadata metadata = {});
  /// Strategic-merge PATCH of pods/{pod}/status with one condition (merged by type).
  boost::asio::awaitable<ApiResult<boost::json::object>> patch_pod_condition(std::string ns, std::string pod,
                                                                             PodCondition condition);
  /// POST /apis/events.k8s.io/v1/namespaces/{ns}/events. Best effort: callers should not block on it.
  boost::asio::awaitable<ApiResult<boost::json::object>> create_event(EventRecord event);
  /// GET the Lease (404 -> is_not_found()).
  boost::asio::awaitable<ApiResult<Lease>> get_lease(std::string ns, std::string name);
  /// POST a new Lease (someone else created it first -> is_already_exists()).
  boost::asio::awaitable<ApiResult<Lease>> create_lease(Lease lease);
  /// PUT the Lease with lease.resource_version as the precondition (changed meanwhile -> is_conflict()).
  boost::asio::awaitable<ApiResult<Lease>> update_lease(Lease lease);

  // ---- state --------------------------------------------------------------------------------------------

  /// Closes pooled idle connections (e.g. before shutdown). In-flight requests are unaffected.
  void close_idle();
  std::size_t idle_connections() const;
  /// Connections opened so far (tests check keep-alive reuse with it).
  std::size_t connections_opened() const;

  struct Impl;

 private:
  Client(executor_type executor, RestConfig config, ClientOptions options, Environment env);

  executor_type executor_;
  RestConfig config_;
  ClientOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpuslice::kube
