// HealthChecks::evaluate as plain calls: the reply of every form of /livez and /readyz request.
#include "common/health.h"

#include <catch2/catch.hpp>

#include <stdexcept>

using gpuslice::HealthChecks;
using gpuslice::Status;

namespace {

Status failed(const char* why) {
  return gpuslice::make_error(why);
}

/// Adds checks named in `passing` (always OK) then `failing` (always an error).
void add_checks(HealthChecks& h, std::initializer_list<const char*> passing,
                std::initializer_list<const char*> failing = {}) {
  for (const char* n : passing) {
    h.add(n, [] { return Status::Ok(); });
  }
  for (const char* n : failing) {
    h.add(n, [] { return failed("failing on purpose"); });
  }
}

bool reply_is(const HealthChecks::Reply& r, int status, const std::string& body) {
  INFO(r.status << " " << r.body);
  return r.status == status && r.body == body;
}

}  // namespace

TEST_CASE("health: all checks pass: ok, or the list with verbose") {
  HealthChecks h("readyz");
  add_checks(h, {"ping", "leader"});
  CHECK(reply_is(h.evaluate("", ""), 200, "ok"));
  CHECK(reply_is(h.evaluate("", "verbose"), 200, "[+]ping ok\n[+]leader ok\nreadyz check passed\n"));
  CHECK(reply_is(h.evaluate("", "verbose=1&x=y"), 200, "[+]ping ok\n[+]leader ok\nreadyz check passed\n"));
}

TEST_CASE("health: a failing check fails the endpoint and its reason is withheld") {
  HealthChecks h("livez");
  add_checks(h, {"ping"});
  h.add("deadlock", [] { return failed("worker stuck for 5m"); });
  auto r = h.evaluate("", "");
  CHECK(r.status == 500);
  CHECK(r.body == "[+]ping ok\n[-]deadlock failed: reason withheld\nlivez check failed\n");
  CHECK(r.body.find("stuck") == std::string::npos);
}

TEST_CASE("health: one check by name, and 404 for an unknown name") {
  HealthChecks h("readyz");
  add_checks(h, {"ping"}, {"leader"});
  CHECK(reply_is(h.evaluate("/ping", ""), 200, "ok"));
  CHECK(reply_is(h.evaluate("/leader", ""), 500, "internal server error: leader check failed\n"));
  CHECK(reply_is(h.evaluate("/nope", ""), 404, "404 page not found: no check \"nope\" under /readyz\n"));
}

TEST_CASE("health: exclude skips checks and may repeat") {
  HealthChecks h("readyz");
  add_checks(h, {"ping"}, {"leader", "informer-sync"});
  CHECK(h.evaluate("", "exclude=leader").status == 500);
  auto r = h.evaluate("", "exclude=leader&exclude=informer-sync&verbose");
  CHECK(r.status == 200);
  CHECK(r.body == "[+]ping ok\n[+]leader excluded: ok\n[+]informer-sync excluded: ok\nreadyz check passed\n");
}

TEST_CASE("health: a check that throws counts as failed; add replaces, remove removes, order is kept") {
  HealthChecks h("livez");
  add_checks(h, {"ping"});
  h.add("boom", []() -> Status { throw std::runtime_error("boom"); });
  CHECK(h.evaluate("", "").status == 500);
  h.add("boom", [] { return Status::Ok(); });  // replaced in place
  CHECK(h.evaluate("", "").status == 200);
  CHECK(h.names() == std::vector<std::string>{"ping", "boom"});
  h.remove("boom");
  CHECK(h.names() == std::vector<std::string>{"ping"});
  CHECK(h.endpoint() == "livez");
}

TEST_CASE("health: a check may add checks while being evaluated (no lock held)") {
  HealthChecks h("readyz");
  h.add("grow", [&h] {
    h.add("late", [] { return Status::Ok(); });
    return Status::Ok();
  });
  CHECK(h.evaluate("", "").status == 200);
  CHECK(h.names() == std::vector<std::string>{"grow", "late"});
}
