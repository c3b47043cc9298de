#pragma once
// Certificate generation for the webhook (a self-signed CA plus a serving certificate for a Kubernetes
// Service, OpenSSL's C API, ECDSA P-256) and the file watching that drives certificate rotation.
//
//   certs::ServingRequest req{.service = "gpuslice", .namespace_ = "kube-system"};
//   auto bundle = certs::generate(req, now_unix_seconds);
//   if (bundle.ok()) certs::write_bundle(*bundle, "/etc/gpuslice/pki");
//
// Time is a parameter; key material and serial numbers come from OpenSSL's CSPRNG (the only randomness,
// which is what a certificate needs).

#include "common/result.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace gpuslice::certs {

/// What the serving certificate is for.
struct ServingRequest {
  std::string service;                ///< Service name, e.g. "gpuslice"
  std::string namespace_;             ///< Service namespace, e.g. "kube-system"
  std::vector<std::string> ip_sans;   ///< extra IP SANs (IPv4 or IPv6 literals)
  std::vector<std::string> dns_sans;  ///< extra DNS SANs
  int days = 365;                     ///< validity of both certificates, from not_before
};

/// PEM texts of the CA and the serving pair.
struct Bundle {
  std::string ca_cert_pem;
  std::string ca_key_pem;
  std::string cert_pem;
  std::string key_pem;
};

/// The DNS SANs of the serving certificate: NAME.NS.svc, NAME.NS.svc.cluster.local, NAME, NAME.NS, then
/// the extras (duplicates removed, order kept). Pure.
std::vector<std::string> serving_dns_names(const ServingRequest& req);

/// Checks the request: service and namespace are DNS-1123 labels, IPs parse, days in 1..36500.
Status validate(const ServingRequest& req);

/// Generates a CA and a serving certificate signed by it, valid from `not_before_unix` (seconds since the
/// epoch; a minute of backdating absorbs clock skew) for `req.days` days.
Result<Bundle> generate(const ServingRequest& req, int64_t not_before_unix);

/// base64 (no newlines) of the CA certificate PEM: the webhook configuration's caBundle.
std::string ca_bundle_base64(const Bundle& bundle);

/// Writes ca.crt, ca.key, tls.crt, tls.key (keys mode 0600) and ca-bundle.b64 into `dir` (created if
/// absent). Each file is written to a temporary name then renamed, so a watcher never sees half a file.
Status write_bundle(const Bundle& bundle, const std::string& dir);

/// Checks that a PEM certificate chain and a PEM private key belong together (used before rotation).
Status check_key_pair(const std::string& cert_pem, const std::string& key_pem);

// ---- file watching for rotation ----

/// Identity of a file's current content as far as stat(2) tells: changes when cert-manager or the kubelet
/// rewrites it (new inode on rename/symlink swap, or new mtime/size in place).
struct FileStamp {
  bool exists = false;
  int64_t mtime_ns = 0;
  int64_t size = 0;
  uint64_t inode = 0;
  uint64_t device = 0;
  bool operator==(const FileStamp&) const = default;
};

/// stat(2) following symlinks; a missing file gives exists = false.
FileStamp stat_file(const std::string& path);

using StatFunction = std::function<FileStamp(const std::string&)>;

/// Polls a set of files and reports when any of them changed since the last accepted state. Not
/// thread-safe; the caller polls from one strand/timer.
class FileWatcher {
 public:
  /// Records the current stamps as the baseline. `stat` is injectable for tests.
  explicit FileWatcher(std::vector<std::string> paths, StatFunction stat = stat_file);
  /// True when any stamp differs from the baseline. Does not move the baseline.
  bool changed() const;
  /// Current stamps (in path order).
  std::vector<FileStamp> current() const;
  /// Moves the baseline to `stamps` (typically what current() returned before a successful reload).
  void accept(std::vector<FileStamp> stamps) { baseline_ = std::move(stamps); }
  const std::vector<std::string>& paths() const { return paths_; }

 private:
  std::vector<std::string> paths_;
  StatFunction stat_;
  std::vector<FileStamp> baseline_;
};

/// Reads a whole (small) file; errors name the path.
Result<std::string> read_file(const std::string& path, size_t max_bytes = 1 << 20);

}  // namespace gpuslice::certs
