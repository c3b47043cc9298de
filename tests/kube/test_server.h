#pragma once
// A scripted HTTPS server on 127.0.0.1 port 0 for client tests. Runs on the test's io_context; each
// request is answered by the handler with raw bytes (so tests control chunking and TCP write boundaries),
// written as separate writes.

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace gpuslice::kube::testing {

struct Recorded {
  std::string method;
  std::string target;
  std::map<std::string, std::string> headers;  ///< lower-case names
  std::string body;
  int connection = 0;  ///< index of the TCP connection it arrived on
};

struct Reply {
  std::vector<std::string> writes;     ///< raw bytes, each written separately
  std::chrono::milliseconds pause{0};  ///< between writes
  bool close = false;                  ///< close the connection after the writes
  bool hold = false;  ///< after the writes, keep the connection open without reading until the client closes
};

/// "HTTP/1.1 <status>" with Content-Length and a JSON content type.
std::string http_response(int status, const std::string& body, bool keep_alive = true);
/// A chunked response head (status 200 unless given).
std::string chunked_head(int status = 200);
/// One chunk frame for `data`.
std::string chunk(const std::string& data);
/// The terminating chunk.
std::string last_chunk();
/// A metav1.Status body.
std::string status_body(int code, const std::string& reason, const std::string& message);
/// Splits `bytes` at the given offsets into separate writes.
std::vector<std::string> split_at(const std::string& bytes, const std::vector<std::size_t>& offsets);

class TestServer {
 public:
  using Handler = std::function<Reply(const Recorded& request)>;

  /// `require_client_cert`: the handshake fails without a client certificate signed by `client_ca_pem`.
  TestServer(boost::asio::io_context& io, const std::string& cert_pem, const std::string& key_pem, Handler handler,
             const std::string& client_ca_pem = {});
  ~TestServer();

  uint16_t port() const { return port_; }
  std::string url() const { return "https://127.0.0.1:" + std::to_string(port_); }
  const std::vector<Recorded>& requests() const { return *requests_; }
  int connections() const { return *connections_; }
  int handshake_failures() const { return *handshake_failures_; }
  void set_handler(Handler h) { *handler_ = std::move(h); }

 private:
  boost::asio::io_context& io_;
  boost::asio::ssl::context ctx_;
  std::shared_ptr<boost::asio::ip::tcp::acceptor> acceptor_;
  std::shared_ptr<Handler> handler_;
  std::shared_ptr<std::vector<Recorded>> requests_;
  std::shared_ptr<int> connections_;
  std::shared_ptr<int> handshake_failures_;
  uint16_t port_ = 0;
};

/// Runs `test` as a coroutine on `io` until it finishes (the server loops are abandoned), rethrowing any
/// exception (failed REQUIREs) from it. `limit` bounds the whole test.
void run_test(boost::asio::io_context& io, std::function<boost::asio::awaitable<void>()> test,
              std::chrono::seconds limit = std::chrono::seconds(60));

}  // namespace gpuslice::kube::testing
