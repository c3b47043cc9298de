#pragma once
// Certificate inspection (used by `gpuslice doctor`): does the webhook configuration's caBundle hold a CA, does the
// serving certificate chain to it, and does it carry the SAN the API server dials (`<svc>.<ns>.svc`).
// Deterministic: the verification time is a parameter (no clock inside). OpenSSL's C API, no I/O.

#include "common/result.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gpuslice::certs {

/// What `gpuslice doctor` prints about one certificate.
struct CertInfo {
  std::string subject;  ///< one-line RFC 2253 form, e.g. "CN=gpuslice-webhook-ca"
  std::string issuer;
  std::vector<std::string> dns_sans;
  std::vector<std::string> ip_sans;  ///< textual form ("127.0.0.1", "::1")
  int64_t not_before_unix = 0;
  int64_t not_after_unix = 0;
  bool is_ca = false;  ///< basicConstraints CA:TRUE
};

/// Parses every certificate of a PEM bundle, in order. Errors: no certificate in the text, or a PEM block that
/// does not parse (the error says which block, counting from 0).
Result<std::vector<CertInfo>> parse_pem_certificates(std::string_view pem);

/// Verifies that the first certificate of `leaf_pem` (plus any further certificates of `leaf_pem` as untrusted
/// intermediates) chains to a certificate of `ca_pem`, as the API server would, at `at_unix` (seconds). Purpose
/// is not checked (the API server does not either beyond TLS server use). The error carries OpenSSL's reason,
/// e.g. "unable to get local issuer certificate" (the caBundle did not sign it) or "certificate has expired".
Status verify_chain(std::string_view ca_pem, std::string_view leaf_pem, int64_t at_unix);

/// True when `name` (a DNS name) is covered by one of the certificate's DNS SANs, with the single-label
/// left-most wildcard of RFC 6125 ("*.ns.svc" covers "svc.ns.svc"). The Common Name is ignored, as Go ignores it.
bool san_covers(const CertInfo& cert, std::string_view name);

/// "2026-11-30T08:00:00Z" for a unix time (UTC), for evidence lines.
std::string format_unix_time(int64_t unix_seconds);

}  // namespace gpuslice::certs
