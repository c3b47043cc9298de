// Certificate checks for `gpuslice doctor` (OpenSSL C API; verification time injected).
#include "certs/inspect.h"

#include "common/json_access.h"

#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <arpa/inet.h>

#include <cstdio>
#include <ctime>
#include <memory>

namespace gpuslice::certs {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct StoreFree {
  void operator()(X509_STORE* s) const { X509_STORE_free(s); }
};
struct StoreCtxFree {
  void operator()(X509_STORE_CTX* c) const { X509_STORE_CTX_free(c); }
};
struct StackFree {
  void operator()(STACK_OF(X509) * s) const { sk_X509_pop_free(s, X509_free); }
};
struct NamesFree {
  void operator()(GENERAL_NAMES* n) const { GENERAL_NAMES_free(n); }
};
using X509Ptr = std::unique_ptr<X509, X509Free>;

std::string name_line(const X509_NAME* name) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new(BIO_s_mem()));
  if (!bio || X509_NAME_print_ex(bio.get(), name, 0, XN_FLAG_RFC2253) < 0) {
    return {};
  }
  char* data = nullptr;
  long len = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(len > 0 ? len : 0));
}

int64_t asn1_time_unix(const ASN1_TIME* t) {
  std::tm tm{};
  if (t == nullptr || ASN1_TIME_to_tm(t, &tm) != 1) {
    return 0;
  }
  return static_cast<int64_t>(timegm(&tm));
}

// Every certificate of a PEM text, in order. A block that does not parse stops the read with an error naming
// its position; the OpenSSL error queue is cleared either way (the end-of-input "no start line" included).
Result<std::vector<X509Ptr>> read_all(std::string_view pem) {
  std::vector<X509Ptr> out;
  std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (!bio) {
    return make_error("out of memory reading PEM");
  }
  for (;;) {
    X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr);
    if (x == nullptr) {
      unsigned long err = ERR_peek_last_error();
      ERR_clear_error();
      bool clean_end = ERR_GET_LIB(err) == ERR_LIB_PEM && ERR_GET_REASON(err) == PEM_R_NO_START_LINE;
      if (!clean_end && err != 0) {
        return make_error("PEM certificate " + std::to_string(out.size()) + " does not parse");
      }
      break;
    }
    out.emplace_back(x);
  }
  if (out.empty()) {
    return make_error("no PEM certificate found (want -----BEGIN CERTIFICATE-----)");
  }
  return out;
}

CertInfo info_of(X509* x) {
  CertInfo info;
  info.subject = name_line(X509_get_subject_name(x));
  info.issuer = name_line(X509_get_issuer_name(x));
  info.not_before_unix = asn1_time_unix(X509_get0_notBefore(x));
  info.not_after_unix = asn1_time_unix(X509_get0_notAfter(x));
  info.is_ca = X509_check_ca(x) >= 1;
  std::unique_ptr<GENERAL_NAMES, NamesFree> names(
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(x, NID_subject_alt_name, nullptr, nullptr)));
  if (names) {
    for (int i = 0; i < sk_GENERAL_NAME_num(names.get()); ++i) {
      const GENERAL_NAME* gn = sk_GENERAL_NAME_value(names.get(), i);
      if (gn->type == GEN_DNS) {
        const ASN1_IA5STRING* s = gn->d.dNSName;
        info.dns_sans.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                                   static_cast<size_t>(ASN1_STRING_length(s)));
      } else if (gn->type == GEN_IPADD) {
        const ASN1_OCTET_STRING* s = gn->d.iPAddress;
        char buf[INET6_ADDRSTRLEN] = {};
        int len = ASN1_STRING_length(s);
        const unsigned char* d = ASN1_STRING_get0_data(s);
        if (len == 4 && inet_ntop(AF_INET, d, buf, sizeof buf) != nullptr) {
          info.ip_sans.emplace_back(buf);
        } else if (len == 16 && inet_ntop(AF_INET6, d, buf, sizeof buf) != nullptr) {
          info.ip_sans.emplace_back(buf);
        }
      }
    }
  }
  return info;
}

}  // namespace

Result<std::vector<CertInfo>> parse_pem_certificates(std::string_view pem) {
  auto certs = read_all(pem);
  if (!certs) {
    return certs.error();
  }
  std::vector<CertInfo> out;
  for (auto& x : *certs) {
    out.push_back(info_of(x.get()));
  }
  return out;
}

Status verify_chain(std::string_view ca_pem, std::string_view leaf_pem, int64_t at_unix) {
  auto cas = read_all(ca_pem);
  if (!cas) {
    return make_error("caBundle: " + cas.message());
  }
  auto leaf = read_all(leaf_pem);
  if (!leaf) {
    return make_error("serving certificate: " + leaf.message());
  }
  std::unique_ptr<X509_STORE, StoreFree> store(X509_STORE_new());
  std::unique_ptr<STACK_OF(X509), StackFree> untrusted(sk_X509_new_null());
  std::unique_ptr<X509_STORE_CTX, StoreCtxFree> ctx(X509_STORE_CTX_new());
  if (!store || !untrusted || !ctx) {
    return make_error("out of memory verifying the certificate chain");
  }
  for (auto& ca : *cas) {
    X509_STORE_add_cert(store.get(), ca.get());  // takes its own reference
  }
  auto& leaves = *leaf;
  for (size_t i = 1; i < leaves.size(); ++i) {
    sk_X509_push(untrusted.get(), leaves[i].release());
  }
  if (X509_STORE_CTX_init(ctx.get(), store.get(), leaves[0].get(), untrusted.get()) != 1) {
    ERR_clear_error();
    return make_error("cannot initialise certificate verification");
  }
  X509_STORE_CTX_set_time(ctx.get(), 0, static_cast<time_t>(at_unix));
  int ok = X509_verify_cert(ctx.get());
  ERR_clear_error();
  if (ok != 1) {
    int err = X509_STORE_CTX_get_error(ctx.get());
    return make_error(X509_verify_cert_error_string(err));
  }
  return Status::Ok();
}

bool san_covers(const CertInfo& cert, std::string_view name) {
  for (const auto& san : cert.dns_sans) {
    std::string_view s = san;
    if (iequals(s, name)) {
      return true;
    }
    // "*.rest" covers exactly one extra left-most label.
    if (s.size() > 2 && s.substr(0, 2) == "*.") {
      auto dot = name.find('.');
      if (dot != std::string_view::npos && dot > 0 && iequals(s.substr(1), name.substr(dot))) {
        return true;
      }
    }
  }
  return false;
}

std::string format_unix_time(int64_t unix_seconds) {
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];  // room for any int year, keeps -Wformat-truncation quiet
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec);
  return buf;
}

}  // namespace gpuslice::certs
