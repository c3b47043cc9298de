// Read-only pages on the health port (see pages.h).
#include "common/pages.h"

#include <algorithm>

namespace gpuslice {

void Pages::add(std::string path, PageHandler handler) {
  std::lock_guard lock(mutex_);
  for (auto& [p, h] : pages_) {
    if (p == path) {
      h = std::move(handler);
      return;
    }
  }
  pages_.emplace_back(std::move(path), std::move(handler));
}

void Pages::remove(const std::string& path) {
  std::lock_guard lock(mutex_);
  std::erase_if(pages_, [&](const auto& p) { return p.first == path; });
}

bool Pages::has(std::string_view path) const {
  std::lock_guard lock(mutex_);
  return std::any_of(pages_.begin(), pages_.end(), [&](const auto& p) { return p.first == path; });
}

std::vector<std::string> Pages::paths() const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> out;
  for (const auto& [p, h] : pages_) {
    out.push_back(p);
  }
  return out;
}

std::optional<Page> Pages::serve(std::string_view path, std::string_view query) const {
  PageHandler handler;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [p, h] : pages_) {
      if (p == path) {
        handler = h;
        break;
      }
    }
  }
  if (!handler) {
    return std::nullopt;
  }
  return handler(query);
}

}  // namespace gpuslice
