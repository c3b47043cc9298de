#include "scheduler/node_lock.h"

#include <boost/json/parse.hpp>
#include <catch2/catch.hpp>

using namespace gpuslice;
using namespace gpuslice::scheduler;
using namespace std::chrono;
using namespace std::chrono_literals;
namespace json = boost::json;

namespace {
const WallTime kNow{seconds(1796024904)};  // 2026-11-30T07:48:24Z
constexpr milliseconds kTimeout = 5min;
}  // namespace

TEST_CASE("node lock value format matches HAMi") {
  CHECK(format_node_lock(kNow, "team-a", "train-0") == "2026-11-30T07:48:24Z,team-a,train-0");
  auto v = parse_node_lock("2026-11-30T15:48:24+08:00,team-a,train-0");
  REQUIRE(v.ok());
  CHECK(v->time == kNow);
  CHECK(v->ns == "team-a");
  CHECK(v->pod == "train-0");
  CHECK_FALSE(v->legacy);
  auto legacy = parse_node_lock("2026-11-30T07:48:24Z");
  REQUIRE(legacy.ok());
  CHECK(legacy->legacy);
  CHECK(legacy->pod.empty());
}

TEST_CASE("node lock parse errors name the annotation") {
  for (const char* bad : {"garbage", "2026-11-30T07:48:24Z,ns", "2026-11-30T07:48:24Z,,pod", "2026-11-30T07:48:24Z,ns,",
                          "2026-11-30T07:48:24Z,ns,pod,extra"}) {
    auto r = parse_node_lock(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.message().find("hami.io/mutex.lock") != std::string::npos);
  }
}

TEST_CASE("no lock: take") {
  auto d = decide_node_lock("gpu-1", std::nullopt, "ns", "p", kNow, kTimeout);
  CHECK(d.action == LockAction::take);
}

TEST_CASE("own lock: already ours") {
  auto d = decide_node_lock("gpu-1", format_node_lock(kNow - 1min, "ns", "p"), "ns", "p", kNow, kTimeout);
  CHECK(d.action == LockAction::already_ours);
  // Same name in another namespace is not ours.
  auto other = decide_node_lock("gpu-1", format_node_lock(kNow - 1min, "ns2", "p"), "ns", "p", kNow, kTimeout);
  CHECK(other.action == LockAction::lookup_owner);
  CHECK(other.holder_ns == "ns2");
}

TEST_CASE("expired lock is taken over, the boundary is exclusive") {
  auto at_limit = decide_node_lock("gpu-1", format_node_lock(kNow - kTimeout, "ns", "q"), "ns", "p", kNow, kTimeout,
                                   LockOwnerState::active);
  CHECK(at_limit.action == LockAction::contention);
  auto past = decide_node_lock("gpu-1", format_node_lock(kNow - kTimeout - 1s, "ns", "q"), "ns", "p", kNow, kTimeout,
                               LockOwnerState::active);
  CHECK(past.action == LockAction::take_expired);
  CHECK(past.reason.find("ns/q") != std::string::npos);
  // A legacy lock (no owner) also expires by time.
  auto legacy = decide_node_lock("gpu-1", format_rfc3339(kNow - 6min), "ns", "p", kNow, kTimeout);
  CHECK(legacy.action == LockAction::take_expired);
}

TEST_CASE("fresh lock by another pod: look the owner up, then decide") {
  const auto value = format_node_lock(kNow - 30s, "ns", "q");
  auto first = decide_node_lock("gpu-1", value, "ns", "p", kNow, kTimeout);
  REQUIRE(first.action == LockAction::lookup_owner);
  CHECK(first.holder_pod == "q");

  auto gone = decide_node_lock("gpu-1", value, "ns", "p", kNow, kTimeout, LockOwnerState::deleted);
  CHECK(gone.action == LockAction::take_owner_gone);
  auto finished = decide_node_lock("gpu-1", value, "ns", "p", kNow, kTimeout, LockOwnerState::finished);
  CHECK(finished.action == LockAction::take_owner_gone);
  auto live = decide_node_lock("gpu-1", value, "ns", "p", kNow, kTimeout, LockOwnerState::active);
  CHECK(live.action == LockAction::contention);
  CHECK(live.expires_in == 270s);
  CHECK(live.reason.find("node lock contention") != std::string::npos);
  CHECK(live.reason.find("gpu-1") != std::string::npos);
}

TEST_CASE("fresh legacy lock: contention without owner lookup") {
  auto d = decide_node_lock("gpu-1", format_rfc3339(kNow - 10s), "ns", "p", kNow, kTimeout);
  CHECK(d.action == LockAction::contention);
}

TEST_CASE("lock from the future (clock skew) is contention, not expired") {
  auto d = decide_node_lock("gpu-1", format_node_lock(kNow + 2min, "ns", "q"), "ns", "p", kNow, kTimeout,
                            LockOwnerState::active);
  CHECK(d.action == LockAction::contention);
  CHECK(d.expires_in == kTimeout);
}

TEST_CASE("unparsable lock is overwritten, never stalls the node") {
  auto d = decide_node_lock("gpu-1", std::string("locked-by-hand"), "ns", "p", kNow, kTimeout);
  CHECK(d.action == LockAction::take_expired);
  CHECK(d.reason.find("locked-by-hand") != std::string::npos);
  CHECK(lock_expired("locked-by-hand", kNow, kTimeout));
}

TEST_CASE("release only by the owner") {
  const auto value = format_node_lock(kNow, "ns", "p");
  CHECK(lock_held_by(value, "ns", "p"));
  CHECK_FALSE(lock_held_by(value, "ns", "q"));
  CHECK_FALSE(lock_held_by(value, "other", "p"));
  CHECK_FALSE(lock_held_by(std::nullopt, "ns", "p"));
  CHECK_FALSE(lock_held_by(format_rfc3339(kNow), "ns", "p"));
  CHECK_FALSE(lock_expired(value, kNow + 5min, kTimeout));
  CHECK(lock_expired(value, kNow + 5min + 1ms, kTimeout));
}

TEST_CASE("an owner whose allocation is over (bound elsewhere, or done here) frees the lock") {
  const auto value = format_node_lock(kNow - 30s, "ns", "q");
  auto d = decide_node_lock("gpu-1", value, "ns", "p", kNow, kTimeout, LockOwnerState::allocation_over);
  CHECK(d.action == LockAction::take_owner_gone);
  CHECK(d.reason.find("can no longer allocate") != std::string::npos);
}

TEST_CASE("a live owner's lock, whoever wrote it, is taken only past the timeout") {
  // HAMi's own scheduler writes the same value form; an active owner holds it until the timeout.
  const auto value = format_node_lock(kNow - 4min, "hami-ns", "mid-bind");
  auto d = decide_node_lock("gpu-1", value, "ns", "p", kNow, kTimeout, LockOwnerState::active);
  CHECK(d.action == LockAction::contention);
  CHECK(d.expires_in == std::chrono::milliseconds(60000));
  auto later = decide_node_lock("gpu-1", value, "ns", "p", kNow + 61s, kTimeout, LockOwnerState::active);
  CHECK(later.action == LockAction::take_expired);
}

TEST_CASE("node lock patch: set or remove the annotation, resourceVersion as precondition") {
  auto lock = json::parse(node_lock_patch("7", std::string("2026-11-30T07:48:24Z,team-a,p"))).as_object();
  CHECK(lock == json::parse(R"({"metadata":{"resourceVersion":"7",)"
                            R"("annotations":{"hami.io/mutex.lock":"2026-11-30T07:48:24Z,team-a,p"}}})"));
  auto unlock = json::parse(node_lock_patch("8", std::nullopt)).as_object();
  CHECK(unlock == json::parse(R"({"metadata":{"resourceVersion":"8","annotations":{"hami.io/mutex.lock":null}}})"));
  // Without a resourceVersion there is no precondition.
  auto blind = json::parse(node_lock_patch("", std::nullopt)).as_object();
  CHECK_FALSE(blind.at("metadata").as_object().contains("resourceVersion"));
}

TEST_CASE("node lock test-and-set: the lock's expected value (null: absent) is tested before it is set or removed") {
  const std::string v = "2026-11-30T07:48:24Z,team-a,p";
  CHECK(json::parse(node_lock_test_and_set(std::nullopt, v)) ==
        json::parse(R"([{"op":"test","path":"/metadata/annotations/hami.io~1mutex.lock","value":null},)"
                    R"({"op":"add","path":"/metadata/annotations/hami.io~1mutex.lock","value":")" +
                    v + R"("}])"));
  CHECK(json::parse(node_lock_test_and_set("old", std::nullopt)) ==
        json::parse(R"([{"op":"test","path":"/metadata/annotations/hami.io~1mutex.lock","value":"old"},)"
                    R"({"op":"remove","path":"/metadata/annotations/hami.io~1mutex.lock"}])"));
  // Nothing expected and nothing to write: only the test.
  CHECK(json::parse(node_lock_test_and_set(std::nullopt, std::nullopt)).as_array().size() == 1);
}

TEST_CASE("pod brief: uid, nodeName, vgpu-node, bind-phase and phase; absent or mistyped fields are empty") {
  auto pod = json::parse(R"({"metadata":{"name":"p","uid":"u-1","annotations":{
      "hami.io/vgpu-node":"gpu-0","hami.io/bind-phase":"allocating"}},
      "spec":{"nodeName":"gpu-0"},"status":{"phase":"Pending"}})")
                 .as_object();
  PodBrief b = brief_of(pod);
  CHECK(b.uid == "u-1");
  CHECK(b.node_name == "gpu-0");
  CHECK(b.vgpu_node == "gpu-0");
  CHECK(b.bind_phase == "allocating");
  CHECK(b.phase == "Pending");
  CHECK(b.scheduler_name.empty());
  auto named = json::parse(R"({"spec":{"schedulerName":"gpuslice-scheduler"}})").as_object();
  CHECK(brief_of(named).scheduler_name == "gpuslice-scheduler");

  PodBrief empty = brief_of(json::object{});
  CHECK(empty.uid.empty());
  CHECK(empty.node_name.empty());
  CHECK(empty.vgpu_node.empty());
  CHECK(empty.bind_phase.empty());
  CHECK(empty.phase.empty());

  auto odd = json::parse(R"({"metadata":{"uid":7,"annotations":"x"},"spec":[],"status":{"phase":null}})").as_object();
  PodBrief o = brief_of(odd);
  CHECK(o.uid.empty());
  CHECK(o.vgpu_node.empty());
  CHECK(o.node_name.empty());
  CHECK(o.phase.empty());
}

TEST_CASE("lock owner: only what is provable frees a lock; any unbound owner may be mid-bind", "[node_lock]") {
  using S = LockOwnerState;
  struct Case {
    const char* what;
    PodBrief owner;  // uid, nodeName, vgpu-node, bind-phase, phase
    bool binding_now;
    S want;
  };
  const Case cases[] = {
      {"bound here, waiting for Allocate", {"u", "gpu-0", "gpu-0", "allocating", "Pending"}, false, S::active},
      {"unbound, allocating here", {"u", "", "gpu-0", "allocating", "Pending"}, false, S::active},
      // Not bound yet: active whatever its annotations say (HAMi's scheduler locks before it writes bind-phase,
      // so its owner mid-bind has no bind-phase, or a stale one from an earlier attempt).
      {"unbound, annotated for another node", {"u", "", "gpu-1", "allocating", "Pending"}, false, S::active},
      {"unbound, HAMi mid-bind (no bind-phase)", {"u", "", "gpu-0", "", "Pending"}, false, S::active},
      {"unbound, HAMi retrying (old failed)", {"u", "", "gpu-0", "failed", "Pending"}, false, S::active},
      // Bound: a pod is bound once, so bound elsewhere or finished allocating here can never use this lock.
      {"bound elsewhere", {"u", "gpu-1", "gpu-0", "allocating", "Pending"}, false, S::allocation_over},
      {"bound here, allocation succeeded", {"u", "gpu-0", "gpu-0", "success", "Running"}, false, S::allocation_over},
      {"being bound by us", {"u", "gpu-0", "gpu-0", "success", "Running"}, true, S::active},
      {"bound here, allocation failed", {"u", "gpu-0", "gpu-0", "failed", "Pending"}, false, S::allocation_over},
      {"bound here, no bind-phase yet", {"u", "gpu-0", "", "", "Pending"}, false, S::active},
      {"Succeeded", {"u", "gpu-0", "gpu-0", "allocating", "Succeeded"}, false, S::finished},
      {"Failed", {"u", "gpu-0", "gpu-0", "allocating", "Failed"}, false, S::finished},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    CHECK(classify_lock_owner(c.owner, "gpu-0", c.binding_now) == c.want);
  }
  CHECK(classify_lock_owner(std::nullopt, "gpu-0", false) == S::deleted);
}

TEST_CASE("lock owner: an unbound pod of our own schedulerName that we are not binding has abandoned it",
          "[node_lock]") {
  using S = LockOwnerState;
  PodBrief ours{"u", "", "", "", "Pending", "gpuslice-scheduler"};
  PodBrief hami{"u", "", "gpu-0", "", "Pending", "hami-scheduler"};
  // Only the caller that binds every pod of that schedulerName (and is not binding this one) can say so.
  CHECK(classify_lock_owner(ours, "gpu-0", false, "gpuslice-scheduler") == S::abandoned);
  CHECK(classify_lock_owner(ours, "gpu-0", true, "gpuslice-scheduler") == S::active);
  CHECK(classify_lock_owner(ours, "gpu-0", false) == S::active);
  // Another scheduler's pod may be between its lock and its bind.
  CHECK(classify_lock_owner(hami, "gpu-0", false, "gpuslice-scheduler") == S::active);
  // Bound: the usual rules, whoever scheduled it.
  PodBrief bound = ours;
  bound.node_name = "gpu-0";
  bound.bind_phase = "allocating";
  CHECK(classify_lock_owner(bound, "gpu-0", false, "gpuslice-scheduler") == S::active);
  bound.node_name = "gpu-1";
  CHECK(classify_lock_owner(bound, "gpu-0", false, "gpuslice-scheduler") == S::allocation_over);
}

TEST_CASE("an abandoned lock is taken over only after the grace (a previous leader's Binding may still land)",
          "[node_lock]") {
  const auto value = format_node_lock(kNow - 20s, "ns", "q");
  auto d = decide_node_lock("gpu-1", value, "ns", "p", kNow, kTimeout, LockOwnerState::abandoned, 60s);
  CHECK(d.action == LockAction::contention);
  CHECK(d.expires_in == 40s);  // the grace ends before the timeout does
  auto later = decide_node_lock("gpu-1", value, "ns", "p", kNow + 40s, kTimeout, LockOwnerState::abandoned, 60s);
  CHECK(later.action == LockAction::take_owner_gone);
  CHECK(later.reason.find("abandoned") != std::string::npos);
  // The default grace is kAbandonedLockGrace.
  CHECK(decide_node_lock("gpu-1", value, "ns", "p", kNow + 39s, kTimeout, LockOwnerState::abandoned).action ==
        LockAction::contention);
  CHECK(decide_node_lock("gpu-1", value, "ns", "p", kNow + 40s, kTimeout, LockOwnerState::abandoned).action ==
        LockAction::take_owner_gone);
}

TEST_CASE(
    "lock owner: bound here with every device entry consumed can no longer allocate (the plugin's success "
    "write was lost)",
    "[node_lock]") {
  auto pod = json::parse(R"({"metadata":{"annotations":{"hami.io/vgpu-node":"gpu-0","hami.io/bind-phase":"allocating",
      "hami.io/vgpu-devices-to-allocate":";"}},"spec":{"nodeName":"gpu-0"},"status":{"phase":"Pending"}})")
                 .as_object();
  PodBrief b = brief_of(pod);
  CHECK(b.devices_consumed);
  CHECK(classify_lock_owner(b, "gpu-0", false) == LockOwnerState::allocation_over);
  // An entry left to allocate: still active.
  pod["metadata"].as_object()["annotations"].as_object()["hami.io/vgpu-devices-to-allocate"] =
      ";GPU-a,NVIDIA,1000,10:;";
  b = brief_of(pod);
  CHECK_FALSE(b.devices_consumed);
  CHECK(classify_lock_owner(b, "gpu-0", false) == LockOwnerState::active);
  // No annotation at all (another vendor, or not written yet): not judged consumed.
  pod["metadata"].as_object()["annotations"].as_object().erase("hami.io/vgpu-devices-to-allocate");
  CHECK_FALSE(brief_of(pod).devices_consumed);
}

TEST_CASE("LockOwnerBrief: classify_lock_owner decides on it as on the pod's full brief (not finished)") {
  // Every combination of what classify_lock_owner reads, for a pod the loop keeps (finished pods are dropped).
  const std::vector<std::string> nodes = {"", "n1", "n2"};
  const std::vector<std::string> bind_phases = {"", "allocating", "success", "failed", "weird"};
  const std::vector<std::string> schedulers = {"", "gpuslice-scheduler", "default-scheduler"};
  const std::vector<std::string> phases = {"", "Pending", "Running", "Unknown"};
  size_t cases = 0;
  for (const auto& node_name : nodes) {
    for (const auto& bind_phase : bind_phases) {
      for (const auto& scheduler : schedulers) {
        for (const auto& phase : phases) {
          for (bool consumed : {false, true}) {
            PodBrief full;
            full.uid = "u-1";
            full.node_name = node_name;
            full.vgpu_node = "n1";
            full.bind_phase = bind_phase;
            full.phase = phase;
            full.scheduler_name = scheduler;
            full.devices_consumed = consumed;
            for (std::string_view ours : {"gpuslice-scheduler", ""}) {
              const LockOwnerBrief kept = LockOwnerBrief::of(full, ours);
              CHECK(sizeof(kept) < sizeof(full));
              for (std::string_view node : {"n1", "n2"}) {
                for (bool binding : {false, true}) {
                  INFO(node_name << " " << bind_phase << " " << scheduler << " " << phase << " " << consumed << " "
                                 << ours << " " << node << " " << binding);
                  CHECK(classify_lock_owner(kept.brief(ours), node, binding, ours) ==
                        classify_lock_owner(full, node, binding, ours));
                  ++cases;
                }
              }
            }
          }
        }
      }
    }
  }
  CHECK(cases == 3 * 5 * 3 * 4 * 2 * 2 * 2 * 2);
}

TEST_CASE("LockOwnerBrief: the bind phases the loop acts on stay apart") {
  PodBrief b;
  auto phase_of = [&](const char* p) {
    b.bind_phase = p;
    return LockOwnerBrief::of(b, "s").bind_phase;
  };
  CHECK(phase_of("success") == LockOwnerBrief::BindPhase::success);
  CHECK(phase_of("failed") == LockOwnerBrief::BindPhase::failed);
  CHECK(phase_of("allocating") == LockOwnerBrief::BindPhase::allocating);
  CHECK(phase_of("") == LockOwnerBrief::BindPhase::other);
  CHECK(phase_of("Success") == LockOwnerBrief::BindPhase::other);
  CHECK(LockOwnerBrief::of(b, "s").brief("s").bind_phase.empty());
  b.bind_phase = "success";
  b.scheduler_name = "s";
  const PodBrief back = LockOwnerBrief::of(b, "s").brief("s");
  CHECK(back.bind_phase == "success");
  CHECK(back.scheduler_name == "s");
}
