#pragma once
// Throwaway PKI for client tests (OpenSSL C API, EC P-256 keys so generation is fast): a CA, server and
// client certificates with chosen SANs. Test support only.

#include <string>
#include <vector>

namespace gpuslice::kube::testing {

struct KeyPair {
  std::string cert_pem;
  std::string key_pem;
};

struct TestPki {
  KeyPair ca;
  KeyPair server;  ///< SANs as given to make_pki
  KeyPair client;  ///< CN=test-client, O=system:masters, clientAuth
};

/// `server_sans` entries like "IP:127.0.0.1" or "DNS:localhost".
TestPki make_pki(const std::vector<std::string>& server_sans = {"IP:127.0.0.1", "DNS:localhost"});

}  // namespace gpuslice::kube::testing
