#pragma once
// A test HTTP/1.1 request for the webhook (Beast's message type only, no I/O): used as is by the router tests
// and sent over TLS by tls_client.h.

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include <string>
#include <utility>

namespace gpuslice::testing {

/// `verb target` with Host 127.0.0.1, keep-alive, `body` and (when non-empty) `content_type`.
inline boost::beast::http::request<boost::beast::http::string_body> make_request(
    boost::beast::http::verb verb, std::string target, std::string body = {},
    std::string content_type = "application/json") {
  namespace http = boost::beast::http;
  http::request<http::string_body> req{verb, target, 11};
  req.set(http::field::host, "127.0.0.1");
  if (!content_type.empty()) {
    req.set(http::field::content_type, content_type);
  }
  req.keep_alive(true);
  req.body() = std::move(body);
  req.prepare_payload();
  return req;
}

}  // namespace gpuslice::testing
