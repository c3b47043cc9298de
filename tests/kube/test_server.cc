#include "tests/kube/test_server.h"

#include <fmt/format.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace gpuslice::kube::testing {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);

std::string http_response(int status, const std::string& body, bool keep_alive) {
  return fmt::format("HTTP/1.1 {} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{}\r\n{}", status,
                     body.size(), keep_alive ? "" : "Connection: close\r\n", body);
}

std::string chunked_head(int status) {
  return fmt::format("HTTP/1.1 {} X\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n", status);
}

std::string chunk(const std::string& data) {
  return fmt::format("{:x}\r\n{}\r\n", data.size(), data);
}
std::string last_chunk() {
  return "0\r\n\r\n";
}

std::string status_body(int code, const std::string& reason, const std::string& message) {
  return fmt::format(
      R"({{"kind":"Status","apiVersion":"v1","status":"Failure","code":{},"reason":"{}","message":"{}"}})", code,
      reason, message);
}

std::vector<std::string> split_at(const std::string& bytes, const std::vector<std::size_t>& offsets) {
  std::vector<std::string> out;
  std::size_t prev = 0;
  for (std::size_t o : offsets) {
    o = std::min(o, bytes.size());
    if (o > prev) {
      out.push_back(bytes.substr(prev, o - prev));
      prev = o;
    }
  }
  if (prev < bytes.size()) {
    out.push_back(bytes.substr(prev));
  }
  return out;
}

namespace {
asio::awaitable<void> serve(tcp::socket socket, ssl::context& ctx, std::shared_ptr<TestServer::Handler> handler,
                            std::shared_ptr<std::vector<Recorded>> requests, int index,
                            std::shared_ptr<int> handshake_failures) {
  beast::ssl_stream<beast::tcp_stream> stream(std::move(socket), ctx);
  beast::get_lowest_layer(stream).expires_after(std::chrono::seconds(30));
  auto [hec] = co_await stream.async_handshake(ssl::stream_base::server, kTuple);
  if (hec) {
    ++*handshake_failures;
    co_return;
  }
  beast::flat_buffer buffer;
  for (;;) {
    beast::get_lowest_layer(stream).expires_after(std::chrono::seconds(60));
    http::request<http::string_body> req;
    auto [rec, n] = co_await http::async_read(stream, buffer, req, kTuple);
    (void)n;
    if (rec) {
      co_return;
    }
    Recorded r;
    r.method = std::string(req.method_string());
    r.target = std::string(req.target());
    for (const auto& f : req) {
      std::string name(f.name_string());
      std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
      r.headers[name] = std::string(f.value());
    }
    r.body = req.body();
    r.connection = index;
    requests->push_back(r);
    Reply reply = (*handler)(r);
    bool first = true;
    for (const auto& w : reply.writes) {
      if (!first && reply.pause.count() > 0) {
        asio::steady_timer t(co_await asio::this_coro::executor);
        t.expires_after(reply.pause);
        co_await t.async_wait(kTuple);
      }
      first = false;
      auto [wec, wn] = co_await asio::async_write(stream, asio::buffer(w), kTuple);
      (void)wn;
      if (wec) {
        co_return;
      }
    }
    if (reply.hold) {
      // Wait for the client to go away (a read that ends in an error), with no deadline beyond 60 s.
      char b[256];
      for (;;) {
        beast::get_lowest_layer(stream).expires_after(std::chrono::seconds(60));
        auto [ec, got] = co_await stream.async_read_some(asio::buffer(b), kTuple);
        (void)got;
        if (ec) {
          co_return;
        }
      }
    }
    if (reply.close) {
      beast::get_lowest_layer(stream).close();
      co_return;
    }
  }
}

asio::awaitable<void> accept_loop(std::shared_ptr<tcp::acceptor> acceptor, ssl::context& ctx,
                                  std::shared_ptr<TestServer::Handler> handler,
                                  std::shared_ptr<std::vector<Recorded>> requests, std::shared_ptr<int> connections,
                                  std::shared_ptr<int> handshake_failures) {
  for (;;) {
    auto [ec, socket] = co_await acceptor->async_accept(kTuple);
    if (ec) {
      co_return;
    }
    const int index = (*connections)++;
    asio::co_spawn(acceptor->get_executor(),
                   serve(std::move(socket), ctx, handler, requests, index, handshake_failures), asio::detached);
  }
}
}  // namespace

TestServer::TestServer(asio::io_context& io, const std::string& cert_pem, const std::string& key_pem, Handler handler,
                       const std::string& client_ca_pem)
    : io_(io),
      ctx_(ssl::context::tls_server),
      acceptor_(std::make_shared<tcp::acceptor>(io)),
      handler_(std::make_shared<Handler>(std::move(handler))),
      requests_(std::make_shared<std::vector<Recorded>>()),
      connections_(std::make_shared<int>(0)),
      handshake_failures_(std::make_shared<int>(0)) {
  ctx_.use_certificate_chain(asio::buffer(cert_pem));
  ctx_.use_private_key(asio::buffer(key_pem), ssl::context::pem);
  if (!client_ca_pem.empty()) {
    ctx_.add_certificate_authority(asio::buffer(client_ca_pem));
    ctx_.set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
  }
  const tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), 0);
  acceptor_->open(ep.protocol());
  acceptor_->set_option(tcp::acceptor::reuse_address(true));
  acceptor_->bind(ep);
  acceptor_->listen();
  port_ = acceptor_->local_endpoint().port();
  asio::co_spawn(io_, accept_loop(acceptor_, ctx_, handler_, requests_, connections_, handshake_failures_),
                 asio::detached);
}

TestServer::~TestServer() {
  boost::system::error_code ec;
  acceptor_->close(ec);
}

void run_test(asio::io_context& io, std::function<asio::awaitable<void>()> test, std::chrono::seconds limit) {
  std::exception_ptr error;
  bool done = false;
  asio::co_spawn(io, test(), [&](std::exception_ptr e) {
    error = e;
    done = true;
    io.stop();
  });
  asio::steady_timer guard(io);
  guard.expires_after(limit);
  guard.async_wait([&](boost::system::error_code ec) {
    if (!ec) {
      io.stop();
    }
  });
  io.run();
  guard.cancel();
  if (error) {
    std::rethrow_exception(error);
  }
  if (!done) {
    throw std::runtime_error("test coroutine did not finish within the limit");
  }
}

}  // namespace gpuslice::kube::testing
