#pragma once
// Reflector (informer core): list, then watch from the list's resourceVersion, resuming each watch from the
// last resourceVersion seen (bookmarks included) after jittered backoff; a watch silent for the client's
// watch_read_idle_timeout (a dead connection) is resumed from that RV at once; relists on 410 Gone (HTTP or
// in-stream) and on watch errors that a resume cannot fix. Delivers events to one handler on the client's
// executor, in order.
//
//   kube::Reflector pods(client, {.resource = kube::resources::pods(),
//                                 .field_selector = "spec.schedulerName=gpuslice-scheduler"},
//                        [&](const kube::ReflectorEvent& e) { ... });
//   co_spawn(io, pods.run(), detached);   // ... later: pods.stop();

#include "kube/backoff.h"
#include "kube/client.h"

#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace gpuslice::kube {

enum class ReflectorEventType {
  added,
  modified,
  deleted,
  bookmark,  ///< only the resourceVersion advanced (object holds just metadata.resourceVersion)
  relisted,  ///< one page of a full list: `items` is that page. The pages of one list come in order, the first
             ///< with `relist_begins`, the last with `relist_complete`; together they are the complete current
             ///< state, so on the last page remove what no page of this list had. The first list is delivered
             ///< this way too. Pages are delivered as they arrive, so a large list never exists whole.
};
const char* reflector_event_type_name(ReflectorEventType t);

struct ReflectorEvent {
  ReflectorEventType type = ReflectorEventType::added;
  const boost::json::object* object = nullptr;              ///< added/modified/deleted/bookmark; valid during the call
  const std::vector<boost::json::object>* items = nullptr;  ///< relisted only: this page; valid during the call
  std::string resource_version;                             ///< the event's or the list's resourceVersion
  bool relist_begins = true;    ///< relisted: the first page of a list (forget what the previous list's pages said)
  bool relist_complete = true;  ///< relisted: the last page (the list is whole: remove what it did not contain)
};

/// The keys a store holds (`known`) and, while a paged list is being delivered, the keys its pages had so far.
template <class Key>
struct KeyedSet {
  std::set<Key> known;
  std::set<Key> listed;  ///< between a list's first and last page
};

/// Applies a reflector event to a store whose keys are kept in `keys.known`: added/modified call
/// `upsert(object)` (which inserts its key into `keys.known`), deleted erases the key and calls `remove(key)`,
/// relisted upserts every item of the page and, on the list's last page, removes every known key no page of the
/// list had. Returns false for a bookmark (nothing changed). `key_of(object)` gives an object's key. Keys,
/// key_of, upsert and remove are the caller's.
template <class Key, class KeyOf, class Upsert, class Remove>
bool apply_keyed(const ReflectorEvent& event, KeyedSet<Key>& keys, KeyOf key_of, Upsert upsert, Remove remove) {
  std::set<Key>& known = keys.known;
  switch (event.type) {
    case ReflectorEventType::relisted: {
      std::set<Key>& seen = keys.listed;
      if (event.relist_begins) {
        seen.clear();
      }
      for (const auto& item : *event.items) {
        seen.insert(key_of(item));
        upsert(item);
      }
      if (!event.relist_complete) {
        return true;
      }
      for (auto it = known.begin(); it != known.end();) {
        if (seen.count(*it) == 0) {
          Key gone = *it;
          it = known.erase(it);
          remove(gone);
        } else {
          ++it;
        }
      }
      seen.clear();
      return true;
    }
    case ReflectorEventType::added:
    case ReflectorEventType::modified:
      upsert(*event.object);
      return true;
    case ReflectorEventType::deleted: {
      Key key = key_of(*event.object);
      known.erase(key);
      remove(key);
      return true;
    }
    case ReflectorEventType::bookmark:
      return false;
  }
  return false;
}

struct ReflectorOptions {
  Resource resource;
  std::string namespace_;  ///< "" = all namespaces
  std::string label_selector;
  std::string field_selector;
  int64_t page_size = 500;
  int watch_timeout_seconds = 300;  ///< per watch request; jittered up to +50% (randomness injected)
  BackoffPolicy backoff{std::chrono::milliseconds(200), std::chrono::milliseconds(30000), 2.0, 0.5};
  UniformRandom random;  ///< empty: make_uniform_random()
  std::string name;      ///< for logs, e.g. "pods"
};

class Reflector {
 public:
  using Handler = std::function<void(const ReflectorEvent& event)>;

  Reflector(std::shared_ptr<Client> client, ReflectorOptions options, Handler handler);

  /// Runs list+watch until stop(). Errors are logged, counted and retried with backoff; returns once
  /// stopped. Call on the client's executor; one run() at a time.
  boost::asio::awaitable<void> run();
  /// Ends run() soon (closes the watch in flight; a list in flight finishes first). Call on the executor.
  void stop();

  bool has_synced() const { return synced_; }  ///< true after the first successful list was delivered
  const std::string& last_resource_version() const { return last_rv_; }
  int relists() const { return relists_; }            ///< lists done (the first included)
  int watches() const { return watches_; }            ///< watch requests started
  int idle_resumes() const { return idle_resumes_; }  ///< watches that ended WatchEnd::idle and were resumed

 private:
  boost::asio::awaitable<bool> sleep(std::chrono::milliseconds d);

  std::shared_ptr<Client> client_;
  std::function<void()> wake_;  // cancels the backoff sleep in progress
  ReflectorOptions options_;
  Handler handler_;
  std::shared_ptr<Cancellation> cancel_;
  bool stopped_ = false;
  bool synced_ = false;
  std::string last_rv_;
  int relists_ = 0;
  int watches_ = 0;
  int idle_resumes_ = 0;
};

}  // namespace gpuslice::kube
