#pragma once
// The webhook's HTTP routing as a pure function (Beast's handle_request seam in advanced_server_flex): a parsed
// request in, a complete response out, no sockets, no TLS, no clock. The server (webhook/server.h) owns the
// I/O, the limits and the deadlines, and calls route() once per request; tests call it directly.
//
// Routes:
//   POST /mutate, POST /webhook (HAMi's path)  -> Routes::review (application/json only, else 415)
//   GET  /livez[/<check>], /healthz[/<check>]  -> Routes::liveness   (?verbose, ?exclude=<check>)
//   GET  /readyz[/<check>]                     -> Routes::readiness
//   GET  /metrics                              -> Routes::metrics (Prometheus text)
//   GET  any path registered in Routes::pages   -> that page (common/pages.h; the scheduler's /status, /status.json)
// HEAD is GET without the body. Anything else: 404; a known path with the wrong method: 405 with Allow.
//
//   webhook::Routes routes{.review = handler, .liveness = &live, .readiness = &ready, .metrics = serialize};
//   auto [response, handler_label] = webhook::route(routes, request);

#include "common/health.h"
#include "common/pages.h"
#include "webhook/admission.h"

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace gpuslice::webhook {

using Request = boost::beast::http::request<boost::beast::http::string_body>;
using Response = boost::beast::http::response<boost::beast::http::string_body>;

/// Called for each POST /mutate or /webhook with the request body. Must be thread-safe and fast;
/// an exception becomes a 500 for that request.
using ReviewHandler = std::function<ReviewReply(std::string_view body)>;

/// What one listener serves. An empty or null member makes its paths answer 404.
struct Routes {
  ReviewHandler review;  ///< empty on the plain-HTTP probe listener: reviews are served on the TLS port only
  const HealthChecks* liveness = nullptr;   ///< /livez and /healthz
  const HealthChecks* readiness = nullptr;  ///< /readyz
  std::function<std::string()> metrics;     ///< the /metrics body (Prometheus text format 0.0.4)
  const Pages* pages = nullptr;             ///< read-only pages (plain listener only), "page" handler label
};

struct Routed {
  Response response;  ///< complete: Content-Length set, the body left out for HEAD
  /// The `handler` label of gpuslice_webhook_http_requests_total: "review", "health", "metrics", "page" or "other".
  std::string_view handler;
};

/// Answers one request. Never throws: a throwing review handler or metrics source gives a 500.
Routed route(const Routes& routes, const Request& request);

/// The answers to requests the HTTP parser refused, sent with Connection: close (the server then closes).
Response body_too_large(uint64_t max_body_bytes);           ///< 413
Response header_too_large(uint32_t max_header_bytes);       ///< 431
Response malformed_request(std::string_view parser_error);  ///< 400

}  // namespace gpuslice::webhook
