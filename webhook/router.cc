// Request -> response with no I/O (see router.h). Response texts are part of the contract the server tests and
// the e2e probes check; keep them stable.
#include "webhook/router.h"

#include "common/json_access.h"
#include "common/log.h"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/verb.hpp>

#include <exception>
#include <utility>

namespace gpuslice::webhook {
namespace {

namespace http = boost::beast::http;

Response text_response(const Request& req, http::status status, std::string body) {
  Response res{status, req.version()};
  res.set(http::field::content_type, "text/plain; charset=utf-8");
  res.keep_alive(req.keep_alive());
  res.body() = std::move(body);
  return res;
}

/// 405 with Allow; `use` names the method(s) the path takes.
Response method_not_allowed(const Request& req, std::string_view path, const char* allow, const char* use) {
  Response r = text_response(
      req, http::status::method_not_allowed,
      "405 method not allowed: " + std::string(req.method_string()) + " " + std::string(path) + " (use " + use + ")\n");
  r.set(http::field::allow, allow);
  return r;
}

Response not_found(const Request& req, std::string_view path, std::string_view why = {}) {
  return text_response(req, http::status::not_found,
                       "404 page not found: " + std::string(path) + std::string(why) + "\n");
}

Response review(const Routes& routes, const Request& req, std::string_view path) {
  if (req.method() != http::verb::post) {
    return method_not_allowed(req, path, "POST", "POST");
  }
  const std::string_view ct = req[http::field::content_type];
  const std::string_view media = trim(ct.substr(0, ct.find(';')));
  if (!boost::beast::iequals(media, "application/json")) {
    return text_response(
        req, http::status::unsupported_media_type,
        "415 unsupported media type: Content-Type \"" + std::string(ct) + "\" (want application/json)\n");
  }
  ReviewReply reply;
  try {
    reply = routes.review(req.body());
  } catch (const std::exception& e) {
    // review() is not supposed to throw; if it does, this request fails and the server carries on.
    log::error("review handler threw", {{"error", e.what()}});
    reply.http_status = 500;
    reply.content_type = "text/plain; charset=utf-8";
    reply.body = "500 internal server error: the review failed\n";
  }
  Response r{static_cast<http::status>(reply.http_status), req.version()};
  r.set(http::field::content_type, reply.content_type);
  r.keep_alive(req.keep_alive());
  r.body() = std::move(reply.body);
  return r;
}

/// `path` is `prefix` or `prefix/<check>`.
bool under(std::string_view path, std::string_view prefix) {
  return path.starts_with(prefix) &&
         (path.size() == prefix.size() || (path.size() > prefix.size() + 1 && path[prefix.size()] == '/'));
}

Routed dispatch(const Routes& routes, const Request& req) {
  const std::string_view target = req.target();
  const auto qpos = target.find('?');
  const std::string_view path = target.substr(0, qpos);
  const std::string_view query = qpos == std::string_view::npos ? std::string_view() : target.substr(qpos + 1);
  const bool get = req.method() == http::verb::get || req.method() == http::verb::head;

  if (path == "/mutate" || path == "/webhook") {
    if (!routes.review) {
      return {not_found(req, path, " is served on the TLS port only"), "other"};
    }
    return {review(routes, req, path), "review"};
  }
  for (auto [prefix, checks] : {std::pair<std::string_view, const HealthChecks*>{"/livez", routes.liveness},
                                std::pair<std::string_view, const HealthChecks*>{"/healthz", routes.liveness},
                                std::pair<std::string_view, const HealthChecks*>{"/readyz", routes.readiness}}) {
    if (checks != nullptr && under(path, prefix)) {
      if (!get) {
        return {method_not_allowed(req, path, "GET, HEAD", "GET"), "health"};
      }
      auto reply = checks->evaluate(path.substr(prefix.size()), query);
      return {text_response(req, static_cast<http::status>(reply.status), std::move(reply.body)), "health"};
    }
  }
  if (path == "/metrics" && routes.metrics) {
    if (!get) {
      return {method_not_allowed(req, path, "GET, HEAD", "GET"), "metrics"};
    }
    Response r = text_response(req, http::status::ok, routes.metrics());
    r.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
    return {std::move(r), "metrics"};
  }
  if (routes.pages != nullptr && routes.pages->has(path)) {
    if (!get) {
      return {method_not_allowed(req, path, "GET, HEAD", "GET"), "page"};
    }
    std::optional<Page> page = routes.pages->serve(path, query);
    if (!page) {  // removed since has()
      return {not_found(req, path), "other"};
    }
    Response r{static_cast<http::status>(page->status), req.version()};
    r.set(http::field::content_type, page->content_type);
    r.set(http::field::cache_control, "no-store");
    r.set("X-Content-Type-Options", "nosniff");
    r.keep_alive(req.keep_alive());
    r.body() = std::move(page->body);
    return {std::move(r), "page"};
  }
  return {not_found(req, path), "other"};
}

Response refusal(http::status status, std::string text) {
  Response res{status, 11};
  res.set(http::field::content_type, "text/plain; charset=utf-8");
  res.set(http::field::connection, "close");
  res.keep_alive(false);
  res.body() = std::move(text);
  res.prepare_payload();
  return res;
}

}  // namespace

Routed route(const Routes& routes, const Request& req) {
  Routed out;
  try {
    out = dispatch(routes, req);
  } catch (const std::exception& e) {
    log::error("request routing threw", {{"error", e.what()}});
    out = {text_response(req, http::status::internal_server_error, "500 internal server error\n"), "other"};
  } catch (...) {
    log::error("request routing threw", {{"error", "a non-standard exception"}});
    out = {text_response(req, http::status::internal_server_error, "500 internal server error\n"), "other"};
  }
  if (req.method() == http::verb::head) {
    out.response.content_length(out.response.body().size());
    out.response.body().clear();
  } else {
    out.response.prepare_payload();
  }
  return out;
}

Response body_too_large(uint64_t max_body_bytes) {
  return refusal(http::status::payload_too_large, "413 request entity too large: the body exceeds the limit of " +
                                                      std::to_string(max_body_bytes) + " bytes\n");
}

Response header_too_large(uint32_t max_header_bytes) {
  return refusal(http::status::request_header_fields_too_large,
                 "431 request header fields too large: the header exceeds the limit of " +
                     std::to_string(max_header_bytes) + " bytes\n");
}

Response malformed_request(std::string_view parser_error) {
  return refusal(http::status::bad_request, "400 bad request: malformed HTTP: " + std::string(parser_error) + "\n");
}

}  // namespace gpuslice::webhook
