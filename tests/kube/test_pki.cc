#include "tests/kube/test_pki.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>
#include <stdexcept>

namespace gpuslice::kube::testing {

namespace {
using PkeyPtr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;
using X509Ptr = std::unique_ptr<X509, decltype(&X509_free)>;

void check(bool ok, const char* what) {
  if (!ok) {
    throw std::runtime_error(std::string("test PKI: ") + what);
  }
}

PkeyPtr gen_key() {
  PkeyPtr k(EVP_EC_gen("P-256"), EVP_PKEY_free);
  check(k != nullptr, "EVP_EC_gen");
  return k;
}

std::string key_pem(EVP_PKEY* k) {
  BIO* b = BIO_new(BIO_s_mem());
  check(PEM_write_bio_PrivateKey(b, k, nullptr, nullptr, 0, nullptr, nullptr) == 1, "write key");
  char* data = nullptr;
  long n = BIO_get_mem_data(b, &data);
  std::string out(data, static_cast<std::size_t>(n));
  BIO_free(b);
  return out;
}

std::string cert_pem(X509* c) {
  BIO* b = BIO_new(BIO_s_mem());
  check(PEM_write_bio_X509(b, c) == 1, "write cert");
  char* data = nullptr;
  long n = BIO_get_mem_data(b, &data);
  std::string out(data, static_cast<std::size_t>(n));
  BIO_free(b);
  return out;
}

void add_ext(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  check(ext != nullptr, "extension");
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
}

X509Ptr make_cert(EVP_PKEY* key, const std::string& cn, const std::string& org, X509* issuer, EVP_PKEY* issuer_key,
                  bool ca, const std::string& eku, const std::vector<std::string>& sans, long serial) {
  X509Ptr c(X509_new(), X509_free);
  X509_set_version(c.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(c.get()), serial);
  X509_gmtime_adj(X509_getm_notBefore(c.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(c.get()), 3600L * 24 * 30);
  X509_set_pubkey(c.get(), key);
  X509_NAME* name = X509_get_subject_name(c.get());
  if (!org.empty()) {
    X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(org.c_str()), -1, -1, 0);
  }
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509* iss = issuer != nullptr ? issuer : c.get();
  X509_set_issuer_name(c.get(), X509_get_subject_name(iss));
  if (ca) {
    add_ext(c.get(), iss, NID_basic_constraints, "critical,CA:TRUE");
    add_ext(c.get(), iss, NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    add_ext(c.get(), iss, NID_basic_constraints, "critical,CA:FALSE");
    add_ext(c.get(), iss, NID_key_usage, "critical,digitalSignature,keyEncipherment");
    add_ext(c.get(), iss, NID_ext_key_usage, eku);
  }
  if (!sans.empty()) {
    std::string joined;
    for (const auto& s : sans) {
      joined += (joined.empty() ? "" : ",") + s;
    }
    add_ext(c.get(), iss, NID_subject_alt_name, joined);
  }
  check(X509_sign(c.get(), issuer_key != nullptr ? issuer_key : key, EVP_sha256()) > 0, "sign");
  return c;
}
}  // namespace

TestPki make_pki(const std::vector<std::string>& server_sans) {
  TestPki pki;
  auto ca_key = gen_key();
  auto ca = make_cert(ca_key.get(), "test-ca", "", nullptr, nullptr, true, "", {}, 1);
  pki.ca = {cert_pem(ca.get()), key_pem(ca_key.get())};
  auto server_key = gen_key();
  auto server =
      make_cert(server_key.get(), "test-server", "", ca.get(), ca_key.get(), false, "serverAuth", server_sans, 2);
  pki.server = {cert_pem(server.get()), key_pem(server_key.get())};
  auto client_key = gen_key();
  auto client =
      make_cert(client_key.get(), "test-client", "system:masters", ca.get(), ca_key.get(), false, "clientAuth", {}, 3);
  pki.client = {cert_pem(client.get()), key_pem(client_key.get())};
  return pki;
}

}  // namespace gpuslice::kube::testing
