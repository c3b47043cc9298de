#pragma once
// The webhook's server-side TLS context, built from PEM files: TLS 1.2 minimum, ECDHE with AES-GCM or
// CHACHA20-POLY1305 for TLS 1.2 (TLS 1.3 suites are all AEAD), server cipher preference, no
// compression/renegotiation/session tickets. The server loads one at start and a new one on each certificate
// rotation; open connections keep the context they were accepted with (hence shared_ptr).

#include "common/result.h"

#include <boost/asio/ssl/context.hpp>

#include <memory>
#include <string>

namespace gpuslice::webhook {

struct TlsContext {
  boost::asio::ssl::context ctx{boost::asio::ssl::context::tls_server};
};

/// Errors name the file (by its flag, tls-cert-file / tls-private-key-file) and OpenSSL's reason, or say
/// that the key does not match the certificate.
Result<std::shared_ptr<TlsContext>> make_tls_context(const std::string& cert_file, const std::string& key_file);

}  // namespace gpuslice::webhook
