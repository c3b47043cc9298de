#pragma once
// The error model of parsing and I/O paths: a value or an error, never an exception. One template serves every
// layer: Result<T> / Status carry an Error (a human-readable message naming the field and the value at fault);
// the Kubernetes client instantiates the same template over its ApiError (kube/error.h: ApiResult<T>,
// ApiStatus). Exceptions are reserved for start-up and configuration.

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace gpuslice {

struct Error {
  std::string message;
};

/// A value of type T or an error of type E (which has a `message` member).
template <class T, class E = Error>
class [[nodiscard]] Result {
 public:
  using value_type = T;
  using error_type = E;

  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT(implicit)
  Result(E error) : v_(std::in_place_index<1>, std::move(error)) {}  // NOLINT(implicit)

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & {
    assert(ok());
    return std::get<0>(v_);
  }
  const T& value() const& {
    assert(ok());
    return std::get<0>(v_);
  }
  T&& value() && {
    assert(ok());
    return std::get<0>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  const E& error() const {
    assert(!ok());
    return std::get<1>(v_);
  }
  const std::string& message() const { return error().message; }

 private:
  std::variant<T, E> v_;
};

/// Result<void>: success or an error of type E.
template <class E>
class [[nodiscard]] BasicStatus {
 public:
  using error_type = E;

  BasicStatus() = default;
  BasicStatus(E error) : error_(std::move(error)), ok_(false) {}  // NOLINT(implicit)
  static BasicStatus Ok() { return {}; }
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const E& error() const { return error_; }
  const std::string& message() const { return error_.message; }

 private:
  E error_{};
  bool ok_ = true;
};

/// Success or an Error.
using Status = BasicStatus<Error>;

inline Error make_error(std::string message) {
  return Error{std::move(message)};
}

}  // namespace gpuslice
