#include "scheduler/leader.h"

#include <catch2/catch.hpp>

using namespace gpuslice;
using namespace gpuslice::scheduler;
using namespace std::chrono_literals;

namespace {

LeaderElectionConfig cfg() {
  LeaderElectionConfig c;
  c.lease_duration = 15s;
  c.renew_deadline = 10s;
  c.retry_period = 2s;
  return c;
}

// A tiny in-memory Lease store with resourceVersion preconditions, standing in for the API server.
struct Store {
  std::optional<kube::Lease> lease;
  int rv = 0;
  LeaderElector::WriteResult apply(const LeaderElector::Plan& p, std::optional<kube::Lease>& written) {
    if (p.op == LeaderElector::Op::create) {
      if (lease) {
        return LeaderElector::WriteResult::conflict;
      }
    } else if (p.op == LeaderElector::Op::update) {
      if (!lease || lease->resource_version != p.desired.resource_version) {
        return LeaderElector::WriteResult::conflict;
      }
    }
    lease = p.desired;
    lease->resource_version = std::to_string(++rv);
    written = lease;
    return LeaderElector::WriteResult::ok;
  }
  // One retry-period attempt of `e` at `now`.
  void step(LeaderElector& e, SteadyTime now, WallTime wall) {
    auto plan = e.observe(lease, now, wall);
    if (plan.op == LeaderElector::Op::none) {
      return;
    }
    std::optional<kube::Lease> written;
    auto r = apply(plan, written);
    e.on_write(r, written, now);
  }
};

// The MicroTime text of a Lease time, as the API server stores it ("" when unset).
std::string micro(const std::optional<WallTime>& t) {
  return t ? kube::format_micro_time(*t) : std::string();
}

const SteadyTime s0{std::chrono::seconds(100)};
const WallTime w0{std::chrono::seconds(1796024904)};

}  // namespace

TEST_CASE("first replica creates the lease and leads, second waits") {
  Store store;
  LeaderElector a("a", "kube-system", "l", cfg());
  LeaderElector b("b", "kube-system", "l", cfg());
  auto plan = a.observe(std::nullopt, s0, w0);
  REQUIRE(plan.op == LeaderElector::Op::create);
  CHECK(plan.desired.spec.holder_identity == "a");
  CHECK(plan.desired.spec.lease_duration_seconds == 15);
  CHECK(micro(plan.desired.spec.renew_time) == "2026-11-30T07:48:24.000000Z");
  std::optional<kube::Lease> written;
  a.on_write(store.apply(plan, written), written, s0);
  CHECK(a.is_leader(s0));

  // b also saw 404 and tries to create: 409, not leader.
  auto bplan = b.observe(std::nullopt, s0, w0);
  std::optional<kube::Lease> bw;
  b.on_write(store.apply(bplan, bw), bw, s0);
  CHECK_FALSE(b.is_leader(s0));
  store.step(b, s0 + 2s, w0 + 2s);
  CHECK_FALSE(b.is_leader(s0 + 2s));
  CHECK(b.observed_holder() == "a");
}

TEST_CASE("renewals keep the leader, the other replica never takes over") {
  Store store;
  LeaderElector a("a", "ns", "l", cfg());
  LeaderElector b("b", "ns", "l", cfg());
  for (int i = 0; i < 30; ++i) {
    SteadyTime now = s0 + std::chrono::seconds(2 * i);
    store.step(a, now, w0 + std::chrono::seconds(2 * i));
    store.step(b, now + 1s, w0 + std::chrono::seconds(2 * i + 1));
    CHECK(a.is_leader(now));
    CHECK_FALSE(b.is_leader(now + 1s));
  }
  CHECK(store.lease->spec.lease_transitions == 0);
  CHECK(micro(store.lease->spec.acquire_time) == "2026-11-30T07:48:24.000000Z");
}

TEST_CASE("expiry is judged by the observer's clock, not the holder's timestamps") {
  Store store;
  LeaderElector a("a", "ns", "l", cfg());
  LeaderElector b("b", "ns", "l", cfg());
  store.step(a, s0, w0);
  // a's wall clock is an hour behind: its renewTime looks ancient, yet it keeps renewing.
  for (int i = 1; i <= 10; ++i) {
    store.step(a, s0 + std::chrono::seconds(2 * i), w0 - 1h + std::chrono::seconds(2 * i));
    store.step(b, s0 + std::chrono::seconds(2 * i) + 1s, w0 + std::chrono::seconds(2 * i));
    CHECK_FALSE(b.is_leader(s0 + std::chrono::seconds(2 * i) + 1s));
  }
  CHECK(store.lease->spec.holder_identity == "a");
}

TEST_CASE("a dead leader is replaced after the lease duration, counted from the last change seen") {
  Store store;
  LeaderElector a("a", "ns", "l", cfg());
  LeaderElector b("b", "ns", "l", cfg());
  store.step(a, s0, w0);
  store.step(b, s0 + 1s, w0);  // b first sees the record at s0+1s
  // a dies. b keeps observing the same record: not expired until s0+1s+15s.
  store.step(b, s0 + 15s, w0);
  CHECK_FALSE(b.is_leader(s0 + 15s));
  CHECK(store.lease->spec.holder_identity == "a");
  store.step(b, s0 + 16s, w0 + 16s);
  CHECK(b.is_leader(s0 + 16s));
  CHECK(store.lease->spec.holder_identity == "b");
  CHECK(store.lease->spec.lease_transitions == 1);
  CHECK(micro(store.lease->spec.acquire_time) == "2026-11-30T07:48:40.000000Z");
}

TEST_CASE("a leader that cannot renew stops leading at the renew deadline, before others may take over") {
  Store store;
  LeaderElector a("a", "ns", "l", cfg());
  LeaderElector b("b", "ns", "l", cfg());
  store.step(a, s0, w0);
  store.step(b, s0, w0);
  // a's GETs fail from now on.
  for (int i = 1; i <= 6; ++i) {
    a.on_get_error(s0 + std::chrono::seconds(2 * i));
  }
  CHECK(a.is_leader(s0 + 9s));
  CHECK_FALSE(a.is_leader(s0 + 10s));
  // b may take over only at s0+15s: strictly after a stopped.
  store.step(b, s0 + 14s, w0 + 14s);
  CHECK_FALSE(b.is_leader(s0 + 14s));
  store.step(b, s0 + 15s, w0 + 15s);
  CHECK(b.is_leader(s0 + 15s));
  // a comes back: it sees b holding and stays follower.
  store.step(a, s0 + 16s, w0 + 16s);
  CHECK_FALSE(a.is_leader(s0 + 16s));
  CHECK(a.observed_holder() == "b");
}

TEST_CASE("a concurrent takeover is caught by the resourceVersion precondition") {
  Store store;
  LeaderElector a("a", "ns", "l", cfg());
  LeaderElector b("b", "ns", "l", cfg());
  LeaderElector c("c", "ns", "l", cfg());
  store.step(a, s0, w0);
  // b and c both observe, both see the lease expire at the same moment, both try to update.
  b.observe(store.lease, s0, w0);
  c.observe(store.lease, s0, w0);
  auto pb = b.observe(store.lease, s0 + 16s, w0);
  auto pc = c.observe(store.lease, s0 + 16s, w0);
  REQUIRE(pb.op == LeaderElector::Op::update);
  REQUIRE(pc.op == LeaderElector::Op::update);
  std::optional<kube::Lease> wb;
  std::optional<kube::Lease> wc;
  b.on_write(store.apply(pb, wb), wb, s0 + 16s);
  c.on_write(store.apply(pc, wc), wc, s0 + 16s);
  CHECK(b.is_leader(s0 + 16s));
  CHECK_FALSE(c.is_leader(s0 + 16s));
  CHECK(store.lease->spec.holder_identity == "b");
}

TEST_CASE("release hands the lease over without waiting for expiry") {
  Store store;
  LeaderElector a("a", "ns", "l", cfg());
  LeaderElector b("b", "ns", "l", cfg());
  store.step(a, s0, w0);
  store.step(b, s0, w0);
  auto rel = a.release(w0 + 1s);
  REQUIRE(rel.has_value());
  CHECK(rel->spec.holder_identity.empty());
  CHECK_FALSE(a.is_leader(s0 + 1s));
  store.lease = *rel;
  store.lease->resource_version = "99";
  store.step(b, s0 + 2s, w0 + 2s);
  CHECK(b.is_leader(s0 + 2s));
  CHECK(b.release(w0).has_value());
  CHECK_FALSE(a.release(w0).has_value());
}

TEST_CASE("stamps are MicroTime: the record read back equals the one written, so no change is seen") {
  LeaderElector a("a", "kube-system", "l", cfg());
  const WallTime wall = w0 + std::chrono::nanoseconds(123456789);
  auto plan = a.observe(std::nullopt, s0, wall);
  REQUIRE(plan.op == LeaderElector::Op::create);
  CHECK(micro(plan.desired.spec.renew_time) == "2026-11-30T07:48:24.123456Z");
  CHECK(micro(plan.desired.spec.acquire_time) == "2026-11-30T07:48:24.123456Z");
  auto back = kube::decode_lease(kube::encode_lease(plan.desired));
  REQUIRE(back);
  CHECK(back->spec == plan.desired.spec);

  // b watches a renew through the wire codec: every renewal is a change (its expiry clock restarts), an
  // unchanged record read twice is not.
  LeaderElector b("b", "kube-system", "l", cfg());
  back->resource_version = "1";
  CHECK(b.observe(*back, s0, w0).op == LeaderElector::Op::none);
  auto again = kube::decode_lease(kube::encode_lease(*back));
  REQUIRE(again);
  CHECK(b.observe(*again, s0 + 14s, w0 + 14s).op == LeaderElector::Op::none);
  CHECK(b.observe(*again, s0 + 16s, w0 + 16s).op == LeaderElector::Op::update);  // 15 s after it last changed
}
