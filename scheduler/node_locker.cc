#include "scheduler/node_locker.h"

#include "common/log.h"
#include "scheduler/loop_metrics.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>

namespace gpuslice::scheduler {
namespace {

namespace asio = boost::asio;
using std::chrono::duration_cast;
using std::chrono::milliseconds;

constexpr auto kAwait = asio::as_tuple(asio::use_awaitable);

const char* takeover_operation(LockAction a) {
  return a == LockAction::take_expired ? "released_expired" : "released_owner_gone";
}

}  // namespace

NodeLocker::NodeLocker(asio::any_io_executor executor, NodeLockerOptions options, std::shared_ptr<LoopApi> api,
                       Hooks hooks)
    : executor_(std::move(executor)), options_(std::move(options)), api_(std::move(api)), hooks_(std::move(hooks)) {}

void NodeLocker::observe(const std::string& node, std::string resource_version, std::optional<std::string> lock) {
  auto it = nodes_.find(node);
  const bool lock_changed = it == nodes_.end() || it->second.lock != lock;
  auto& stored = nodes_[node];
  stored.resource_version = std::move(resource_version);
  stored.lock = std::move(lock);
  if (stored.lock) {
    locked_.insert(node);
  } else {
    locked_.erase(node);
  }
  notify(node);
  if (lock_changed && stored.lock) {
    check(node);
  }
}

void NodeLocker::forget(const std::string& node) {
  nodes_.erase(node);
  locked_.erase(node);
  notify(node);
}

void NodeLocker::stop() {
  stopped_ = true;
  for (auto& [node, waiters] : waiters_) {
    for (auto& t : waiters) {
      t->cancel();
    }
  }
}

void NodeLocker::check_held_by(const std::string& ns, const std::string& pod) {
  for (const auto& node : std::vector<std::string>(locked_.begin(), locked_.end())) {
    auto it = nodes_.find(node);
    if (it != nodes_.end() && lock_held_by(it->second.lock, ns, pod)) {
      check(node);
    }
  }
}

void NodeLocker::sweep() {
  for (const auto& node : std::vector<std::string>(locked_.begin(), locked_.end())) {
    check(node);
  }
}

asio::awaitable<LockOwnerState> NodeLocker::owner_state(const std::string& ns, const std::string& pod,
                                                        const std::string& node) {
  if (auto known = hooks_.cached_owner(ns, pod, node)) {
    co_return *known;
  }
  // Not in the cache: finished pods leave the watch; a brand-new pod may not have arrived. Ask.
  auto r = co_await api_->get_pod(ns, pod);
  if (!r) {
    if (r.error().is_not_found()) {
      co_return LockOwnerState::deleted;
    }
    co_return LockOwnerState::active;  // cannot tell: do not steal
  }
  co_return classify_lock_owner(brief_of(*r), node, false, options_.scheduler_name);
}

asio::awaitable<bool> NodeLocker::acquire(std::string node, PodKey key) {
  auto& line = lines_[node];
  line.push_back(key);
  // Leaving the line (taken, given up or stopped) lets the next binder of this node try.
  struct Leave {
    NodeLocker* self;
    std::string node;
    PodKey key;
    ~Leave() {
      auto it = self->lines_.find(node);
      if (it != self->lines_.end()) {
        auto& l = it->second;
        l.erase(std::remove(l.begin(), l.end(), key), l.end());
        if (l.empty()) {
          self->lines_.erase(it);
        }
      }
      self->notify(node);
    }
  } leave{this, node, key};
  const auto deadline = options_.clock.steady() + options_.wait;
  bool rv_fallback = false;
  while (!stopped_ && hooks_.may_write()) {
    if (auto it = lines_.find(node); it != lines_.end() && !it->second.empty() && !(it->second.front() == key)) {
      const auto now = options_.clock.steady();
      if (now >= deadline) {
        co_return false;
      }
      co_await wait_change(node, std::min(duration_cast<milliseconds>(deadline - now), milliseconds(2000)));
      continue;
    }
    auto mit = nodes_.find(node);
    if (mit == nodes_.end()) {
      co_return false;
    }
    LockDecision d =
        decide_node_lock(node, mit->second.lock, key.ns, key.name, options_.clock.wall(), options_.timeout);
    if (d.action == LockAction::lookup_owner) {
      const std::string seen_value = *mit->second.lock;
      LockOwnerState owner = co_await owner_state(d.holder_ns, d.holder_pod, node);
      mit = nodes_.find(node);
      if (mit == nodes_.end()) {
        co_return false;
      }
      if (mit->second.lock != seen_value) {
        continue;  // changed while we looked: judge the new value
      }
      d = decide_node_lock(node, mit->second.lock, key.ns, key.name, options_.clock.wall(), options_.timeout, owner,
                           options_.abandon_grace);
    }
    switch (d.action) {
      case LockAction::already_ours:
        co_return true;
      case LockAction::take:
      case LockAction::take_expired:
      case LockAction::take_owner_gone: {
        if (d.action != LockAction::take) {
          log::info("taking over node lock", {{"node", node}, {"pod", key.str()}, {"reason", d.reason}});
          LoopMetrics::get().lock_ops.with({takeover_operation(d.action)}).inc();
        }
        const std::optional<std::string> seen = mit->second.lock;
        auto r =
            co_await write_lock(node, seen, format_node_lock(options_.clock.wall(), key.ns, key.name), rv_fallback);
        if (r) {
          hooks_.node_written(*r);
          ++taken_;
          LoopMetrics::get().lock_ops.with({"taken"}).inc();
          co_return true;
        }
        if (r.error().is_not_found()) {
          co_return false;
        }
        if (r.error().is_conflict() || r.error().code == 422) {
          // The lock is no longer what we saw (often: the previous owner's release, or a rival's take). Read the
          // node now rather than wait for the watch, then judge again.
          LoopMetrics::get().lock_ops.with({"conflict"}).inc();
          auto g = co_await api_->get_node(node);
          if (g) {
            hooks_.node_written(*g);
            auto now_seen = nodes_.find(node);
            if (r.error().code == 422 && now_seen != nodes_.end() && now_seen->second.lock == seen) {
              rv_fallback = true;  // the test failed though the lock is as seen: no annotations map to test in
            }
          }
          continue;
        }
        log::warning("node lock patch failed", {{"node", node}, {"error", r.error().to_string()}});
        break;
      }
      case LockAction::lookup_owner:
      case LockAction::contention:
        break;
    }
    const auto now = options_.clock.steady();
    if (now >= deadline) {
      co_return false;
    }
    auto wait = duration_cast<milliseconds>(deadline - now);
    wait = std::min(wait, milliseconds(2000));  // re-judge now and then even without node events
    if (d.action == LockAction::contention && d.expires_in > milliseconds(0)) {
      wait = std::min(wait, d.expires_in + milliseconds(10));
    }
    co_await wait_change(node, wait);
  }
  co_return false;
}

asio::awaitable<kube::ApiResult<boost::json::object>> NodeLocker::write_lock(const std::string& node,
                                                                             const std::optional<std::string>& expected,
                                                                             const std::optional<std::string>& value,
                                                                             bool with_resource_version) {
  if (with_resource_version) {
    auto mit = nodes_.find(node);
    const std::string rv = mit != nodes_.end() ? mit->second.resource_version : std::string();
    co_return co_await api_->patch_node(node, node_lock_patch(rv, value));
  }
  co_return co_await api_->json_patch_node(node, node_lock_test_and_set(expected, value));
}

asio::awaitable<bool> NodeLocker::remove_lock(std::string node,
                                              std::function<bool(const std::optional<std::string>&)> still,
                                              int attempts) {
  bool rv_fallback = false;
  for (int attempt = 0; attempt < attempts && !stopped_; ++attempt) {
    auto mit = nodes_.find(node);
    if (mit == nodes_.end() || !still(mit->second.lock)) {
      co_return false;  // gone or changed meanwhile: nothing of ours to remove
    }
    const std::optional<std::string> seen = mit->second.lock;
    auto r = co_await write_lock(node, seen, std::nullopt, rv_fallback);
    if (r) {
      hooks_.node_written(*r);
      ++released_;
      co_return true;
    }
    if (r.error().is_not_found()) {
      co_return false;
    }
    // Usually a failed test (422) or, on the fallback, a 409: read the node now rather than wait for the watch,
    // then judge again.
    auto g = co_await api_->get_node(node);
    if (g) {
      hooks_.node_written(*g);
      auto now_seen = nodes_.find(node);
      if (r.error().code == 422 && now_seen != nodes_.end() && now_seen->second.lock == seen) {
        rv_fallback = true;
      }
    }
  }
  co_return false;
}

asio::awaitable<void> NodeLocker::release(std::string node, std::string ns, std::string pod, std::string why) {
  auto held = [&](const std::optional<std::string>& lock) { return lock_held_by(lock, ns, pod); };
  if (co_await remove_lock(node, held, 4)) {
    LoopMetrics::get().lock_ops.with({"released_bind_failed"}).inc();
    log::info("released node lock", {{"node", node}, {"pod", ns + "/" + pod}, {"reason", why}}, 1);
  }
}

void NodeLocker::check(const std::string& node) {
  if (stopped_ || !hooks_.may_sweep() || janitor_busy_.count(node)) {
    return;
  }
  if (auto l = lines_.find(node); l != lines_.end() && !l->second.empty()) {
    return;  // a binder of ours waits for this node: it judges the lock itself and takes it over in one write
  }
  auto mit = nodes_.find(node);
  if (mit == nodes_.end() || !mit->second.lock) {
    return;
  }
  janitor_busy_.insert(node);
  hooks_.spawn(janitor(node));
}

asio::awaitable<void> NodeLocker::janitor(std::string n) {
  auto nit = nodes_.find(n);
  if (nit != nodes_.end() && nit->second.lock) {
    const std::string value = *nit->second.lock;
    // An empty pod name never matches a holder: this asks "could anyone take it?".
    LockDecision d = decide_node_lock(n, value, "", "", options_.clock.wall(), options_.timeout);
    LockOwnerState owner = LockOwnerState::unknown;
    if (d.action == LockAction::lookup_owner) {
      owner = co_await owner_state(d.holder_ns, d.holder_pod, n);
      d = decide_node_lock(n, value, "", "", options_.clock.wall(), options_.timeout, owner, options_.abandon_grace);
    }
    if (d.action == LockAction::take_owner_gone &&
        (owner == LockOwnerState::finished || owner == LockOwnerState::allocation_over)) {
      // Done allocating: the device plugin releases this lock itself; the sweep looks again after the grace.
      auto parsed = parse_node_lock(value);
      if (parsed && options_.clock.wall() - parsed->time < options_.release_grace) {
        d.action = LockAction::contention;
      }
    }
    if (auto l = lines_.find(n); l != lines_.end() && !l->second.empty()) {
      d.action = LockAction::contention;  // a binder arrived meanwhile: it takes the lock over itself
    }
    if (d.action == LockAction::take_expired || d.action == LockAction::take_owner_gone) {
      // Only the value judged, and only while leading; a changed value is judged again by its own event.
      auto unchanged = [&](const std::optional<std::string>& lock) { return hooks_.may_write() && lock == value; };
      if (co_await remove_lock(n, unchanged, 3)) {
        LoopMetrics::get().lock_ops.with({takeover_operation(d.action)}).inc();
        log::info("released stale node lock", {{"node", n}, {"reason", d.reason}});
      }
    }
  }
  janitor_busy_.erase(n);
}

asio::awaitable<void> NodeLocker::wait_change(const std::string& node, milliseconds max_wait) {
  auto timer = std::make_shared<asio::steady_timer>(executor_);
  timer->expires_after(max_wait);
  waiters_[node].push_back(timer);
  co_await timer->async_wait(kAwait);
  auto it = waiters_.find(node);
  if (it != waiters_.end()) {
    auto& v = it->second;
    v.erase(std::remove(v.begin(), v.end(), timer), v.end());
    if (v.empty()) {
      waiters_.erase(it);
    }
  }
}

void NodeLocker::notify(const std::string& node) {
  auto it = waiters_.find(node);
  if (it == waiters_.end()) {
    return;
  }
  auto waiters = std::move(it->second);
  waiters_.erase(it);
  for (auto& t : waiters) {
    t->cancel();
  }
}

}  // namespace gpuslice::scheduler
