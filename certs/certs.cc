// CA + serving certificate generation with OpenSSL 3's C API, and stat(2)-based file watching.
#include "certs/certs.h"

#include "common/base64.h"

#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

namespace gpuslice::certs {
namespace {

template <auto Fn>
struct Deleter {
  template <class T>
  void operator()(T* p) const {
    Fn(p);
  }
};
using PKeyPtr = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY_free>>;
using X509Ptr = std::unique_ptr<X509, Deleter<X509_free>>;
using BioPtr = std::unique_ptr<BIO, Deleter<BIO_free_all>>;
using ExtPtr = std::unique_ptr<X509_EXTENSION, Deleter<X509_EXTENSION_free>>;
using BnPtr = std::unique_ptr<BIGNUM, Deleter<BN_free>>;

/// The OpenSSL error queue as text (drains it), so messages say what OpenSSL disliked.
std::string openssl_errors() {
  std::string out;
  unsigned long e = 0;
  while ((e = ERR_get_error()) != 0) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) {
      out += "; ";
    }
    out += buf;
  }
  return out.empty() ? "unknown OpenSSL error" : out;
}

Error ossl_error(const std::string& what) {
  return make_error(what + ": " + openssl_errors());
}

bool is_dns_label(const std::string& s) {
  if (s.empty() || s.size() > 63) {
    return false;
  }
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) {
      return false;
    }
  }
  return s.front() != '-' && s.back() != '-';
}

bool is_ip(const std::string& s) {
  unsigned char buf[16];
  return inet_pton(AF_INET, s.c_str(), buf) == 1 || inet_pton(AF_INET6, s.c_str(), buf) == 1;
}

std::string pem_of_cert(X509* x) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), x) != 1) {
    return {};
  }
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

std::string pem_of_key(EVP_PKEY* k) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_PrivateKey(bio.get(), k, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return {};
  }
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

Result<PKeyPtr> new_p256_key() {
  PKeyPtr key(EVP_EC_gen("P-256"));
  if (!key) {
    return ossl_error("generating an ECDSA P-256 key");
  }
  return key;
}

Status add_ext(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  ExtPtr ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str()));
  if (!ext) {
    return ossl_error(std::string("extension ") + OBJ_nid2sn(nid) + " = \"" + value + "\"");
  }
  if (X509_add_ext(cert, ext.get(), -1) != 1) {
    return ossl_error(std::string("adding extension ") + OBJ_nid2sn(nid));
  }
  return Status::Ok();
}

/// A certificate with a random 159-bit serial, validity window and subject CN; issuer set by the caller.
Result<X509Ptr> new_cert(const std::string& cn, int64_t not_before_unix, int days, EVP_PKEY* key) {
  X509Ptr x(X509_new());
  if (!x || X509_set_version(x.get(), 2) != 1) {
    return ossl_error("creating a certificate");
  }
  BnPtr bn(BN_new());
  if (!bn || BN_rand(bn.get(), 159, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1 ||
      BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(x.get())) == nullptr) {
    return ossl_error("choosing a serial number");
  }
  // Backdate a minute: API servers with a slightly slow clock would otherwise reject a fresh certificate.
  const time_t nb = static_cast<time_t>(not_before_unix - 60);
  const time_t na = static_cast<time_t>(not_before_unix + int64_t{days} * 86400);
  if (ASN1_TIME_set(X509_getm_notBefore(x.get()), nb) == nullptr ||
      ASN1_TIME_set(X509_getm_notAfter(x.get()), na) == nullptr) {
    return ossl_error("setting the validity window");
  }
  X509_NAME* name = X509_get_subject_name(x.get());
  if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1,
                                 0) != 1) {
    return ossl_error("subject CN \"" + cn + "\"");
  }
  if (X509_set_pubkey(x.get(), key) != 1) {
    return ossl_error("setting the public key");
  }
  return x;
}

}  // namespace

std::vector<std::string> serving_dns_names(const ServingRequest& req) {
  std::vector<std::string> out;
  auto add = [&](const std::string& n) {
    if (!n.empty() && std::find(out.begin(), out.end(), n) == out.end()) {
      out.push_back(n);
    }
  };
  add(req.service + "." + req.namespace_ + ".svc");
  add(req.service + "." + req.namespace_ + ".svc.cluster.local");
  add(req.service);
  add(req.service + "." + req.namespace_);
  for (const auto& d : req.dns_sans) {
    add(d);
  }
  return out;
}

Status validate(const ServingRequest& req) {
  if (!is_dns_label(req.service)) {
    return make_error("service: \"" + req.service + "\" is not a DNS-1123 label");
  }
  if (!is_dns_label(req.namespace_)) {
    return make_error("namespace: \"" + req.namespace_ + "\" is not a DNS-1123 label");
  }
  for (const auto& ip : req.ip_sans) {
    if (!is_ip(ip)) {
      return make_error("ip-san: \"" + ip + "\" is not an IPv4 or IPv6 address");
    }
  }
  for (const auto& d : req.dns_sans) {
    // SAN syntax is lenient (wildcards are legal); reject only what would break the extension string.
    if (d.empty() || d.size() > 253 || d.find_first_of(", \t\r\n:") != std::string::npos) {
      return make_error("dns-san: \"" + d + "\" is not a DNS name");
    }
  }
  if (req.days < 1 || req.days > 36500) {
    return make_error("days: \"" + std::to_string(req.days) + "\" is not in 1..36500");
  }
  return Status::Ok();
}

Result<Bundle> generate(const ServingRequest& req, int64_t not_before_unix) {
  if (auto st = validate(req); !st.ok()) {
    return st.error();
  }
  ERR_clear_error();
  auto ca_key = new_p256_key();
  if (!ca_key.ok()) {
    return ca_key.error();
  }
  auto ca = new_cert("gpuslice-ca@" + std::to_string(not_before_unix), not_before_unix, req.days, ca_key->get());
  if (!ca.ok()) {
    return ca.error();
  }
  X509* cap = ca->get();
  if (X509_set_issuer_name(cap, X509_get_subject_name(cap)) != 1) {
    return ossl_error("CA issuer");
  }
  for (auto [nid, val] : {std::pair{NID_basic_constraints, "critical,CA:TRUE"},
                          std::pair{NID_key_usage, "critical,keyCertSign,cRLSign,digitalSignature"},
                          std::pair{NID_subject_key_identifier, "hash"}}) {
    if (auto st = add_ext(cap, cap, nid, val); !st.ok()) {
      return st.error();
    }
  }
  if (X509_sign(cap, ca_key->get(), EVP_sha256()) <= 0) {
    return ossl_error("signing the CA certificate");
  }

  auto key = new_p256_key();
  if (!key.ok()) {
    return key.error();
  }
  const auto dns = serving_dns_names(req);
  auto leaf = new_cert(dns.front(), not_before_unix, req.days, key->get());
  if (!leaf.ok()) {
    return leaf.error();
  }
  X509* lp = leaf->get();
  if (X509_set_issuer_name(lp, X509_get_subject_name(cap)) != 1) {
    return ossl_error("serving certificate issuer");
  }
  std::string san;
  for (const auto& d : dns) {
    san += (san.empty() ? "DNS:" : ",DNS:") + d;
  }
  for (const auto& ip : req.ip_sans) {
    san += ",IP:" + ip;
  }
  for (auto [nid, val] :
       {std::pair{NID_basic_constraints, std::string("critical,CA:FALSE")},
        std::pair{NID_key_usage, std::string("critical,digitalSignature,keyEncipherment")},
        std::pair{NID_ext_key_usage, std::string("serverAuth")},
        std::pair{NID_subject_key_identifier, std::string("hash")},
        std::pair{NID_authority_key_identifier, std::string("keyid:always")}, std::pair{NID_subject_alt_name, san}}) {
    if (auto st = add_ext(lp, cap, nid, val); !st.ok()) {
      return st.error();
    }
  }
  if (X509_sign(lp, ca_key->get(), EVP_sha256()) <= 0) {
    return ossl_error("signing the serving certificate");
  }
  Bundle b;
  b.ca_cert_pem = pem_of_cert(cap);
  b.ca_key_pem = pem_of_key(ca_key->get());
  b.cert_pem = pem_of_cert(lp);
  b.key_pem = pem_of_key(key->get());
  if (b.ca_cert_pem.empty() || b.ca_key_pem.empty() || b.cert_pem.empty() || b.key_pem.empty()) {
    return ossl_error("writing PEM");
  }
  return b;
}

std::string ca_bundle_base64(const Bundle& bundle) {
  return base64_encode(bundle.ca_cert_pem);
}

namespace {
Status write_atomically(const std::filesystem::path& path, const std::string& data, mode_t mode) {
  const std::string tmp = path.string() + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) {
    return make_error(tmp + ": " + std::strerror(errno));
  }
  // open() honours the umask for new files only; fchmod makes the mode exact for keys either way.
  ::fchmod(fd, mode);
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      int e = errno;
      ::close(fd);
      return make_error(tmp + ": " + std::strerror(e));
    }
    off += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    return make_error(tmp + ": " + std::strerror(errno));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return make_error(path.string() + ": " + std::strerror(errno));
  }
  return Status::Ok();
}
}  // namespace

Status write_bundle(const Bundle& bundle, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return make_error("out-dir: \"" + dir + "\": " + ec.message());
  }
  const std::filesystem::path d(dir);
  const std::pair<const char*, std::pair<const std::string*, mode_t>> files[] = {
      {"ca.crt", {&bundle.ca_cert_pem, 0644}},
      {"ca.key", {&bundle.ca_key_pem, 0600}},
      {"tls.crt", {&bundle.cert_pem, 0644}},
      {"tls.key", {&bundle.key_pem, 0600}},
  };
  // Key before certificate: a watcher that sees the new tls.crt then finds the matching key already there.
  for (int i : {1, 0, 3, 2}) {
    const auto& [name, content] = files[i];
    if (auto st = write_atomically(d / name, *content.first, content.second); !st.ok()) {
      return st;
    }
  }
  return write_atomically(d / "ca-bundle.b64", ca_bundle_base64(bundle) + "\n", 0644);
}

Status check_key_pair(const std::string& cert_pem, const std::string& key_pem) {
  ERR_clear_error();
  BioPtr cb(BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size())));
  X509Ptr cert(cb ? PEM_read_bio_X509(cb.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!cert) {
    return ossl_error("certificate: not a PEM certificate");
  }
  BioPtr kb(BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())));
  PKeyPtr key(kb ? PEM_read_bio_PrivateKey(kb.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!key) {
    return ossl_error("private key: not a PEM private key");
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    return ossl_error("private key does not match the certificate");
  }
  return Status::Ok();
}

FileStamp stat_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return {};
  }
  FileStamp s;
  s.exists = true;
  s.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  s.size = st.st_size;
  s.inode = st.st_ino;
  s.device = st.st_dev;
  return s;
}

FileWatcher::FileWatcher(std::vector<std::string> paths, StatFunction stat)
    : paths_(std::move(paths)), stat_(std::move(stat)) {
  baseline_ = current();
}

std::vector<FileStamp> FileWatcher::current() const {
  std::vector<FileStamp> out;
  out.reserve(paths_.size());
  for (const auto& p : paths_) {
    out.push_back(stat_(p));
  }
  return out;
}

bool FileWatcher::changed() const {
  return current() != baseline_;
}

Result<std::string> read_file(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return make_error(path + ": cannot open: " + std::strerror(errno));
  }
  std::string out;
  char buf[8192];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    out.append(buf, static_cast<size_t>(in.gcount()));
    if (out.size() > max_bytes) {
      return make_error(path + ": larger than " + std::to_string(max_bytes) + " bytes");
    }
  }
  return out;
}

}  // namespace gpuslice::certs
