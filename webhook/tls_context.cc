// The webhook's server-side TLS context (see tls_context.h).
#include "webhook/tls_context.h"

#include "certs/certs.h"

#include <openssl/err.h>
#include <openssl/ssl.h>

namespace gpuslice::webhook {
namespace {

namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
using error_code = boost::system::error_code;

std::string openssl_reason(const error_code& ec) {
  std::string out = ec.message();
  unsigned long e = 0;
  while ((e = ERR_get_error()) != 0) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    out += "; ";
    out += buf;
  }
  return out;
}

}  // namespace

Result<std::shared_ptr<TlsContext>> make_tls_context(const std::string& cert_file, const std::string& key_file) {
  auto cert = certs::read_file(cert_file);
  if (!cert.ok()) {
    return make_error("tls-cert-file: " + cert.message());
  }
  auto key = certs::read_file(key_file);
  if (!key.ok()) {
    return make_error("tls-private-key-file: " + key.message());
  }
  auto t = std::make_shared<TlsContext>();
  auto& ctx = t->ctx;
  ERR_clear_error();
  error_code ec;
  ctx.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                      ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::no_compression |
                      ssl::context::single_dh_use,
                  ec);
  SSL_CTX* native = ctx.native_handle();
  SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION);
  SSL_CTX_set_options(native, SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_TICKET);
  // TLS 1.2: forward secrecy and AEAD only (the set Go's crypto/tls and kube-apiserver prefer).
  if (SSL_CTX_set_cipher_list(native,
                              "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
                              "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
                              "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305") != 1) {
    return make_error("tls cipher list: " + openssl_reason(ec));
  }
  ctx.use_certificate_chain(net::buffer(cert->data(), cert->size()), ec);
  if (ec) {
    return make_error("tls-cert-file: " + cert_file + ": " + openssl_reason(ec));
  }
  ctx.use_private_key(net::buffer(key->data(), key->size()), ssl::context::pem, ec);
  if (ec) {
    return make_error("tls-private-key-file: " + key_file + ": " + openssl_reason(ec));
  }
  if (SSL_CTX_check_private_key(native) != 1) {
    return make_error("tls-private-key-file: " + key_file + " does not match tls-cert-file " + cert_file);
  }
  return t;
}

}  // namespace gpuslice::webhook
