// certs: the generated CA and serving certificate are what the API server needs (SANs, chain, key match,
// file modes), and the file watcher notices rotation.
#include "certs/certs.h"

#include "common/base64.h"

#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <map>

namespace certs = gpuslice::certs;

namespace {

X509* parse_cert(const std::string& pem) {
  BIO* b = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  X509* x = PEM_read_bio_X509(b, nullptr, nullptr, nullptr);
  BIO_free(b);
  return x;
}

std::vector<std::string> san_strings(X509* x, int type) {
  std::vector<std::string> out;
  auto* names = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(x, NID_subject_alt_name, nullptr, nullptr));
  for (int i = 0; names && i < sk_GENERAL_NAME_num(names); ++i) {
    GENERAL_NAME* g = sk_GENERAL_NAME_value(names, i);
    if (g->type != type) {
      continue;
    }
    if (type == GEN_DNS) {
      out.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(g->d.dNSName)),
                       ASN1_STRING_length(g->d.dNSName));
    } else if (type == GEN_IPADD) {
      out.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(g->d.iPAddress)),
                       ASN1_STRING_length(g->d.iPAddress));
    }
  }
  GENERAL_NAMES_free(names);
  return out;
}

/// X509_verify_cert of leaf against a store holding only `ca`, at time `at`, for purpose sslserver.
int verify_chain(X509* ca, X509* leaf, time_t at, const char* host = nullptr) {
  X509_STORE* store = X509_STORE_new();
  X509_STORE_add_cert(store, ca);
  X509_STORE_CTX* ctx = X509_STORE_CTX_new();
  X509_STORE_CTX_init(ctx, store, leaf, nullptr);
  X509_VERIFY_PARAM* param = X509_STORE_CTX_get0_param(ctx);
  X509_VERIFY_PARAM_set_time(param, at);
  X509_VERIFY_PARAM_set_purpose(param, X509_PURPOSE_SSL_SERVER);
  if (host != nullptr) {
    X509_VERIFY_PARAM_set1_host(param, host, 0);
  }
  int ok = X509_verify_cert(ctx);
  int err = X509_STORE_CTX_get_error(ctx);
  X509_STORE_CTX_free(ctx);
  X509_STORE_free(store);
  return ok == 1 ? 0 : (err == 0 ? -1 : err);
}

std::filesystem::path temp_dir(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() / ("gpuslice-certs-test-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  return p;
}

constexpr int64_t kNow = 1767225600;  // 2026-01-01T00:00:00Z

}  // namespace

TEST_CASE("serving DNS names follow the Service naming, extras appended without duplicates") {
  certs::ServingRequest req{"gpuslice", "kube-system", {}, {"webhook.example", "gpuslice"}, 30};
  auto names = certs::serving_dns_names(req);
  REQUIRE(names == std::vector<std::string>{"gpuslice.kube-system.svc", "gpuslice.kube-system.svc.cluster.local",
                                            "gpuslice", "gpuslice.kube-system", "webhook.example"});
}

TEST_CASE("validate names the field and the value") {
  certs::ServingRequest req{"Bad_Name", "ns", {}, {}, 30};
  auto st = certs::validate(req);
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().find("service: \"Bad_Name\"") != std::string::npos);
  req.service = "ok";
  req.ip_sans = {"10.0.0.300"};
  st = certs::validate(req);
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().find("ip-san: \"10.0.0.300\"") != std::string::npos);
  req.ip_sans = {"::1"};
  req.days = 0;
  st = certs::validate(req);
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().find("days: \"0\"") != std::string::npos);
  CHECK_FALSE(certs::generate(req, kNow).ok());
}

TEST_CASE("generated serving certificate carries every SAN and chains to the CA") {
  certs::ServingRequest req{"gpuslice", "gpu-system", {"127.0.0.1", "::1"}, {"extra.example"}, 10};
  auto b = certs::generate(req, kNow);
  REQUIRE(b.ok());
  X509* ca = parse_cert(b->ca_cert_pem);
  X509* leaf = parse_cert(b->cert_pem);
  REQUIRE(ca != nullptr);
  REQUIRE(leaf != nullptr);

  auto dns = san_strings(leaf, GEN_DNS);
  for (const auto& want : certs::serving_dns_names(req)) {
    CHECK(std::find(dns.begin(), dns.end(), want) != dns.end());
  }
  CHECK(std::find(dns.begin(), dns.end(), "extra.example") != dns.end());
  auto ips = san_strings(leaf, GEN_IPADD);
  CHECK(std::find(ips.begin(), ips.end(), std::string("\x7f\x00\x00\x01", 4)) != ips.end());
  CHECK(ips.size() == 2);

  CHECK(verify_chain(ca, leaf, kNow + 3600) == 0);
  CHECK(verify_chain(ca, leaf, kNow + 3600, "gpuslice.gpu-system.svc") == 0);
  // Not valid for another service, nor after expiry, nor before issue (minus the minute of backdating).
  CHECK(verify_chain(ca, leaf, kNow + 3600, "other.gpu-system.svc") == X509_V_ERR_HOSTNAME_MISMATCH);
  CHECK(verify_chain(ca, leaf, kNow + 11 * 86400) == X509_V_ERR_CERT_HAS_EXPIRED);
  CHECK(verify_chain(ca, leaf, kNow - 3600) == X509_V_ERR_CERT_NOT_YET_VALID);

  // A different CA does not verify this leaf.
  auto other = certs::generate(req, kNow);
  REQUIRE(other.ok());
  X509* other_ca = parse_cert(other->ca_cert_pem);
  CHECK(verify_chain(other_ca, leaf, kNow + 3600) != 0);

  CHECK(X509_check_ca(ca) >= 1);
  CHECK(X509_check_ca(leaf) == 0);
  X509_free(other_ca);
  X509_free(ca);
  X509_free(leaf);
}

TEST_CASE("keys match their certificates and not each other's") {
  certs::ServingRequest req{"svc", "ns", {}, {}, 1};
  auto b = certs::generate(req, kNow);
  REQUIRE(b.ok());
  CHECK(certs::check_key_pair(b->cert_pem, b->key_pem).ok());
  CHECK(certs::check_key_pair(b->ca_cert_pem, b->ca_key_pem).ok());
  auto mismatch = certs::check_key_pair(b->cert_pem, b->ca_key_pem);
  CHECK_FALSE(mismatch.ok());
  CHECK(mismatch.message().find("does not match") != std::string::npos);
  CHECK_FALSE(certs::check_key_pair("garbage", b->key_pem).ok());
  CHECK(b->cert_pem != b->ca_cert_pem);
  CHECK(b->key_pem != b->ca_key_pem);
}

TEST_CASE("write_bundle writes the five files, keys 0600, caBundle decodes to ca.crt") {
  certs::ServingRequest req{"svc", "ns", {}, {}, 1};
  auto b = certs::generate(req, kNow);
  REQUIRE(b.ok());
  auto dir = temp_dir("write");
  REQUIRE(certs::write_bundle(*b, (dir / "nested").string()).ok());
  std::map<std::string, mode_t> want{
      {"ca.crt", 0644}, {"ca.key", 0600}, {"tls.crt", 0644}, {"tls.key", 0600}, {"ca-bundle.b64", 0644}};
  for (const auto& [name, mode] : want) {
    struct stat st {};
    REQUIRE(::stat((dir / "nested" / name).c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == mode);
  }
  CHECK(certs::read_file((dir / "nested" / "tls.key").string()).value() == b->key_pem);
  auto b64 = certs::read_file((dir / "nested" / "ca-bundle.b64").string());
  REQUIRE(b64.ok());
  std::string text = *b64;
  while (!text.empty() && text.back() == '\n') {
    text.pop_back();
  }
  auto decoded = gpuslice::base64_decode(text);
  REQUIRE(decoded.has_value());
  CHECK(*decoded == b->ca_cert_pem);
  std::filesystem::remove_all(dir);
}

TEST_CASE("FileWatcher reports a change of any stamp field and only until accepted") {
  std::map<std::string, certs::FileStamp> fs;
  fs["a"] = {true, 100, 10, 1, 1};
  fs["b"] = {true, 100, 20, 2, 1};
  certs::FileWatcher w({"a", "b"}, [&](const std::string& p) { return fs[p]; });
  CHECK_FALSE(w.changed());
  fs["b"].inode = 3;  // kubelet's ..data symlink swap: same size, new inode
  CHECK(w.changed());
  w.accept(w.current());
  CHECK_FALSE(w.changed());
  fs["a"].mtime_ns = 101;
  CHECK(w.changed());
  w.accept(w.current());
  fs["a"].exists = false;
  CHECK(w.changed());
}

TEST_CASE("stat_file sees a real rewrite") {
  auto dir = temp_dir("stat");
  std::filesystem::create_directories(dir);
  auto p = (dir / "f").string();
  CHECK_FALSE(certs::stat_file(p).exists);
  certs::ServingRequest req{"svc", "ns", {}, {}, 1};
  auto b = certs::generate(req, kNow);
  REQUIRE(b.ok());
  REQUIRE(certs::write_bundle(*b, dir.string()).ok());
  certs::FileWatcher w({(dir / "tls.crt").string(), (dir / "tls.key").string()});
  CHECK_FALSE(w.changed());
  auto b2 = certs::generate(req, kNow);
  REQUIRE(b2.ok());
  REQUIRE(certs::write_bundle(*b2, dir.string()).ok());  // rename gives a new inode
  CHECK(w.changed());
  std::filesystem::remove_all(dir);
}
