#pragma once
// Test-only clients for the webhook server: a Beast TLS client (verifying the CA and host 127.0.0.1, with
// selectable TLS versions) and a raw TCP client, every operation under a deadline so a broken server fails
// the test instead of hanging it.

#include "tests/webhook/http_request.h"

#include <openssl/ssl.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <utility>

namespace gpuslice::testing {

namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;
using error_code = boost::system::error_code;
using Response = http::response<http::string_body>;
using Request = http::request<http::string_body>;

/// A keep-alive HTTPS/1.1 client over one connection.
class TlsClient {
 public:
  /// `min_version`/`max_version`: TLS1_VERSION .. TLS1_3_VERSION; 0 leaves OpenSSL's default.
  TlsClient(uint16_t port, const std::string& ca_pem, int min_version = 0, int max_version = 0)
      : port_(port), ctx_(ssl::context::tls_client) {
    ctx_.add_certificate_authority(net::buffer(ca_pem));
    ctx_.set_verify_mode(ssl::verify_peer);
    ctx_.set_verify_callback(ssl::host_name_verification("127.0.0.1"));
    if (min_version != 0 && min_version < TLS1_2_VERSION) {
      // OpenSSL 3's default security level forbids TLS < 1.2 in the client too; lower it to probe the server.
      SSL_CTX_set_security_level(ctx_.native_handle(), 0);
      SSL_CTX_set_cipher_list(ctx_.native_handle(), "DEFAULT:@SECLEVEL=0");
    }
    if (min_version != 0) {
      SSL_CTX_set_min_proto_version(ctx_.native_handle(), min_version);
    }
    if (max_version != 0) {
      SSL_CTX_set_max_proto_version(ctx_.native_handle(), max_version);
    }
    stream_.emplace(ioc_, ctx_);
  }

  error_code connect(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    auto& low = beast::get_lowest_layer(*stream_);
    low.expires_after(timeout);
    error_code result = net::error::would_block;
    low.async_connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port_), [&](error_code ec) {
      if (ec) {
        result = ec;
        return;
      }
      stream_->async_handshake(ssl::stream_base::client, [&](error_code e) { result = e; });
    });
    drive();
    return result;
  }

  /// Sends bytes over TLS without HTTP framing (slow clients, oversized headers).
  error_code write_raw(std::string_view bytes, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    beast::get_lowest_layer(*stream_).expires_after(timeout);
    error_code result = net::error::would_block;
    net::async_write(*stream_, net::buffer(bytes), [&](error_code ec, std::size_t) { result = ec; });
    drive();
    return result;
  }

  std::pair<error_code, Response> request(Request req, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    beast::get_lowest_layer(*stream_).expires_after(timeout);
    error_code result = net::error::would_block;
    http::async_write(*stream_, req, [&](error_code ec, std::size_t) { result = ec; });
    drive();
    if (result) {
      return {result, {}};
    }
    return read_response(timeout);
  }

  std::pair<error_code, Response> read_response(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    beast::get_lowest_layer(*stream_).expires_after(timeout);
    error_code result = net::error::would_block;
    Response res;
    http::async_read(*stream_, buffer_, res, [&](error_code ec, std::size_t) { result = ec; });
    drive();
    return {result, std::move(res)};
  }

  /// Reads until the server ends the connection; returns how it ended (eof, stream_truncated, reset) or
  /// beast::error::timeout if it did not within `timeout`.
  error_code wait_closed(std::chrono::milliseconds timeout) {
    beast::get_lowest_layer(*stream_).expires_after(timeout);
    error_code result = net::error::would_block;
    Response res;
    http::async_read(*stream_, buffer_, res, [&](error_code ec, std::size_t) { result = ec; });
    drive();
    return result;
  }

  bool is_open() { return beast::get_lowest_layer(*stream_).socket().is_open(); }

 private:
  void drive() {
    ioc_.restart();
    ioc_.run();
  }

  uint16_t port_;
  net::io_context ioc_;
  ssl::context ctx_;
  std::optional<beast::ssl_stream<beast::tcp_stream>> stream_;
  beast::flat_buffer buffer_;
};

/// Plain TCP: what a misconfigured client speaking HTTP to the TLS port sees.
class RawClient {
 public:
  explicit RawClient(uint16_t port) : port_(port), stream_(ioc_) {}

  error_code connect() {
    stream_.expires_after(std::chrono::seconds(10));
    error_code result = net::error::would_block;
    stream_.async_connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port_),
                          [&](error_code ec) { result = ec; });
    drive();
    return result;
  }

  /// Writes `bytes`, then reads everything until the peer closes (or `timeout`). Returns the bytes read
  /// and the error that ended the read (eof when the server closed).
  std::pair<error_code, std::string> exchange(std::string_view bytes, std::chrono::milliseconds timeout) {
    stream_.expires_after(timeout);
    error_code result = net::error::would_block;
    std::string got;
    net::async_write(stream_, net::buffer(bytes), [&](error_code ec, std::size_t) {
      if (ec) {
        result = ec;
        return;
      }
      read_all(got, result);
    });
    drive();
    return {result, got};
  }

 private:
  void read_all(std::string& got, error_code& result) {
    stream_.async_read_some(net::buffer(chunk_), [this, &got, &result](error_code ec, std::size_t n) {
      got.append(chunk_, n);
      if (ec) {
        result = ec;
        return;
      }
      read_all(got, result);
    });
  }
  void drive() {
    ioc_.restart();
    ioc_.run();
  }
  uint16_t port_;
  net::io_context ioc_;
  beast::tcp_stream stream_;
  char chunk_[4096];
};

}  // namespace gpuslice::testing
