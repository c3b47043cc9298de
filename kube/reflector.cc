#include "kube/reflector.h"

#include "common/log.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace gpuslice::kube {

namespace asio = boost::asio;

namespace {

// metadata.managedFields (server-side apply's bookkeeping, about a third of a pod's JSON) is read by nothing
// downstream: dropped before the handler, as kube-scheduler's informers do (client-go TransformStripManagedFields).
void strip_managed_fields(boost::json::object& object) {
  if (auto* meta = object.if_contains("metadata"); meta != nullptr && meta->is_object()) {
    meta->as_object().erase("managedFields");
  }
}

}  // namespace

const char* reflector_event_type_name(ReflectorEventType t) {
  switch (t) {
    case ReflectorEventType::added:
      return "ADDED";
    case ReflectorEventType::modified:
      return "MODIFIED";
    case ReflectorEventType::deleted:
      return "DELETED";
    case ReflectorEventType::bookmark:
      return "BOOKMARK";
    case ReflectorEventType::relisted:
      return "RELISTED";
  }
  return "?";
}

Reflector::Reflector(std::shared_ptr<Client> client, ReflectorOptions options, Handler handler)
    : client_(std::move(client)),
      options_(std::move(options)),
      handler_(std::move(handler)),
      cancel_(std::make_shared<Cancellation>()) {
  if (!options_.random) {
    options_.random = make_uniform_random();
  }
  if (options_.name.empty()) {
    options_.name = options_.resource.plural;
  }
}

void Reflector::stop() {
  stopped_ = true;
  cancel_->cancel();
  if (wake_) {
    auto w = std::move(wake_);
    wake_ = nullptr;
    w();
  }
}

asio::awaitable<bool> Reflector::sleep(std::chrono::milliseconds d) {
  if (stopped_) {
    co_return false;
  }
  asio::steady_timer timer(client_->get_executor());
  timer.expires_after(d);
  wake_ = [&timer] { timer.cancel(); };
  co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
  wake_ = nullptr;
  co_return !stopped_;
}

asio::awaitable<void> Reflector::run() {
  const std::string path = collection_path(options_.resource, options_.namespace_);
  Backoff backoff(options_.backoff, options_.random);
  while (!stopped_) {
    ListOptions lo;
    lo.label_selector = options_.label_selector;
    lo.field_selector = options_.field_selector;
    lo.limit = options_.page_size;
    // Each page goes to the handler as it arrives (and is freed after it): the list never exists whole.
    int64_t listed = 0;
    Client::ListPageHandler deliver = [this, &listed](ListPage& page, bool first) {
      if (first) {
        listed = 0;
      }
      listed += static_cast<int64_t>(page.items.size());
      for (auto& item : page.items) {
        strip_managed_fields(item);
      }
      ReflectorEvent ev;
      ev.type = ReflectorEventType::relisted;
      ev.items = &page.items;
      ev.resource_version = page.resource_version;
      ev.relist_begins = first;
      ev.relist_complete = page.continue_token.empty();
      if (!stopped_) {
        handler_(ev);
      }
      std::vector<boost::json::object>().swap(page.items);
    };
    auto list = co_await client_->list_pages(path, lo, std::move(deliver));
    if (stopped_) {
      break;
    }
    if (!list) {
      // A list that fails after some pages were delivered is retried from its first page (relist_begins).
      const auto delay = backoff.next();
      log::warning("reflector list failed", {{"reflector", options_.name},
                                             {"error", list.error().to_string()},
                                             {"retryInMs", static_cast<int64_t>(delay.count())}});
      if (!co_await sleep(delay)) {
        break;
      }
      continue;
    }
    ++relists_;
    last_rv_ = *list;
    synced_ = true;
#if defined(__GLIBC__)
    // The decoded pages are freed; give their memory back to the system instead of leaving it in the heap.
    malloc_trim(0);
#endif
    log::info("reflector listed", {{"reflector", options_.name}, {"items", listed}, {"resourceVersion", last_rv_}}, 2);

    // Watch from the list's RV, resuming from the last RV seen, until a relist is needed or stop().
    bool relist = false;
    while (!stopped_ && !relist) {
      WatchOptions wo;
      wo.label_selector = options_.label_selector;
      wo.field_selector = options_.field_selector;
      wo.resource_version = last_rv_;
      wo.allow_bookmarks = true;
      // Spread reconnects of many watchers (client-go: between the minimum and twice it).
      double u = options_.random();
      if (!(u >= 0.0 && u < 1.0)) {
        u = 0.0;
      }
      wo.timeout_seconds = static_cast<int>(options_.watch_timeout_seconds * (1.0 + 0.5 * u));
      ++watches_;
      const auto started = std::chrono::steady_clock::now();
      auto result = co_await client_->watch(
          path, wo,
          [this](WatchEvent& e) {
            if (stopped_) {
              return false;
            }
            ReflectorEvent ev;
            switch (e.type) {
              case WatchEventType::added:
                ev.type = ReflectorEventType::added;
                break;
              case WatchEventType::modified:
                ev.type = ReflectorEventType::modified;
                break;
              case WatchEventType::deleted:
                ev.type = ReflectorEventType::deleted;
                break;
              case WatchEventType::bookmark:
                ev.type = ReflectorEventType::bookmark;
                break;
              case WatchEventType::error:
                return true;  // never delivered by the client
            }
            if (!e.resource_version.empty()) {
              last_rv_ = e.resource_version;
            }
            strip_managed_fields(e.object);
            ev.object = &e.object;
            ev.resource_version = e.resource_version;
            handler_(ev);
            return !stopped_;
          },
          cancel_);
      if (stopped_) {
        break;
      }
      const bool healthy = std::chrono::steady_clock::now() - started > std::chrono::seconds(1);
      if (result) {
        switch (result->end) {
          case WatchEnd::gone:
            log::info("reflector watch expired (410); relisting",
                      {{"reflector", options_.name}, {"resourceVersion", last_rv_}}, 1);
            relist = true;  // never resume from the expired RV
            break;
          case WatchEnd::closed:
            if (result->events > 0 || healthy) {
              backoff.reset();
            } else if (!co_await sleep(backoff.next())) {
              relist = true;
            }
            break;
          case WatchEnd::idle:
            // A dead connection (no byte, not even a BOOKMARK, for the idle deadline): the RV seen so far is
            // still good, so resume from it at once on a fresh connection. No relist, no backoff: a path that is
            // still down fails the connect, and that error backs off.
            log::warning("reflector watch idle: no event or bookmark within the deadline; resuming",
                         {{"reflector", options_.name},
                          {"resourceVersion", last_rv_},
                          {"idleMs", static_cast<int64_t>(client_->options().watch_read_idle_timeout.count())}});
            backoff.reset();
            ++idle_resumes_;
            break;
          case WatchEnd::stopped:
          case WatchEnd::cancelled:
            relist = true;
            break;
        }
        continue;
      }
      const ApiError& err = result.error();
      if (err.is_gone()) {
        relist = true;
        continue;
      }
      if (healthy || result.error().is_timeout()) {
        backoff.reset();
      }
      const auto delay = backoff.next();
      log::warning("reflector watch failed", {{"reflector", options_.name},
                                              {"error", err.to_string()},
                                              {"retryInMs", static_cast<int64_t>(delay.count())}});
      if (!co_await sleep(delay)) {
        break;
      }
      // Transport trouble: resume from the last RV. Anything the server rejected: start over with a list.
      relist = !err.is_retriable();
    }
  }
  co_return;
}

}  // namespace gpuslice::kube
