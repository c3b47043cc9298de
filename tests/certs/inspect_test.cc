// Certificate inspection (certs/inspect.h): PEM parsing, chain verification at a given time, SAN matching.
#include "certs/inspect.h"
#include "certs/certs.h"

#include <catch2/catch.hpp>

using namespace gpuslice::certs;
using Catch::Matchers::Contains;

namespace {

constexpr int64_t kNow = 1796000000;  // 2026-11-30, an arbitrary fixed "now"

Bundle bundle_for(std::string service) {
  ServingRequest req;
  req.service = std::move(service);
  req.namespace_ = "gpuslice-system";
  req.days = 30;
  auto b = generate(req, kNow - 3600);
  REQUIRE(b.ok());
  return *b;
}

}  // namespace

TEST_CASE("inspect: SAN wildcard, chain errors, time format", "[certs][inspect]") {
  CertInfo c;
  c.dns_sans = {"*.gpuslice-system.svc", "localhost"};
  CHECK(san_covers(c, "gpuslice-webhook.gpuslice-system.svc"));
  CHECK(san_covers(c, "LOCALHOST"));
  CHECK_FALSE(san_covers(c, "a.b.gpuslice-system.svc"));
  CHECK_FALSE(san_covers(c, "gpuslice-system.svc"));
  auto good = bundle_for("gpuslice-webhook");
  auto other = bundle_for("gpuslice-webhook");
  CHECK(verify_chain(good.ca_cert_pem, good.cert_pem, kNow).ok());
  auto bad = verify_chain(other.ca_cert_pem, good.cert_pem, kNow);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.message(), Contains("issuer"));
  auto parsed = parse_pem_certificates(good.ca_cert_pem + good.cert_pem);
  REQUIRE(parsed.ok());
  CHECK(parsed->size() == 2);
  CHECK(parsed->at(0).is_ca);
  CHECK_FALSE(parsed->at(1).is_ca);
  CHECK(format_unix_time(0) == "1970-01-01T00:00:00Z");
}
