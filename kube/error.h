#pragma once
// The error model of the Kubernetes client: every request ends in a value or an ApiError. An ApiError
// carries the HTTP status (0 when no response was received), the Status `reason` decoded from the body
// (NotFound, AlreadyExists, Conflict, Expired, Gone, ...) or a client-side reason (Timeout, Transport,
// TooLarge, Decode, Config, Cancelled, Auth), and a message naming what failed. Nothing is thrown.

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace gpuslice::kube {

/// Client-side reasons (code == 0): no usable HTTP response was received.
inline constexpr const char* kReasonTimeout = "Timeout";      ///< the request's deadline expired
inline constexpr const char* kReasonTransport = "Transport";  ///< resolve/connect/TLS/read/write failed
inline constexpr const char* kReasonTooLarge = "TooLarge";    ///< body or watch line over the configured limit
inline constexpr const char* kReasonDecode = "Decode";        ///< a 2xx body that is not the expected JSON
inline constexpr const char* kReasonConfig = "Config";        ///< bad client configuration (PEM, URL)
inline constexpr const char* kReasonCancelled = "Cancelled";  ///< cancelled by the caller
inline constexpr const char* kReasonAuth = "Auth";            ///< credentials unavailable (token file, exec plugin)

struct ApiError {
  int code = 0;         ///< HTTP status; 0 when no response was received (see the kReason* constants)
  std::string reason;   ///< metav1.Status.reason, or a client-side reason when code == 0
  std::string message;  ///< metav1.Status.message or a description naming the request and the failure

  bool is_not_found() const { return code == 404; }
  /// 409, both Conflict (resourceVersion precondition failed) and AlreadyExists (create of an existing name).
  bool is_conflict() const { return code == 409; }
  bool is_already_exists() const { return code == 409 && reason == "AlreadyExists"; }
  bool is_gone() const { return code == 410; }  ///< resourceVersion too old: relist
  bool is_unauthorized() const { return code == 401; }
  bool is_forbidden() const { return code == 403; }
  bool is_too_many_requests() const { return code == 429; }
  bool is_timeout() const { return code == 0 && reason == kReasonTimeout; }
  bool is_transport() const { return code == 0 && reason == kReasonTransport; }
  bool is_cancelled() const { return code == 0 && reason == kReasonCancelled; }
  /// Worth retrying later with backoff (transport, timeout, 429, 5xx).
  bool is_retriable() const {
    return (code == 0 && (reason == kReasonTimeout || reason == kReasonTransport)) || code == 429 || code >= 500;
  }
  /// "409 AlreadyExists: leases.coordination.k8s.io \"x\" already exists" or "Timeout: GET /api/v1/pods ...".
  std::string to_string() const;
};

inline ApiError client_error(const char* reason, std::string message) {
  return ApiError{0, reason, std::move(message)};
}

/// A value or an ApiError (the client's Result<T>).
template <class T>
class [[nodiscard]] ApiResult {
 public:
  ApiResult(T value) : v_(std::in_place_index<0>, std::move(value)) {}         // NOLINT(implicit)
  ApiResult(ApiError error) : v_(std::in_place_index<1>, std::move(error)) {}  // NOLINT(implicit)

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
  const ApiError& error() const {
    assert(!ok());
    return std::get<1>(v_);
  }
  const std::string& message() const { return error().message; }

 private:
  std::variant<T, ApiError> v_;
};

/// Success without a value (e.g. DELETE) or an ApiError.
class [[nodiscard]] ApiStatus {
 public:
  ApiStatus() = default;
  ApiStatus(ApiError error) : error_(std::move(error)), ok_(false) {}  // NOLINT(implicit)
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const ApiError& error() const { return error_; }
  const std::string& message() const { return error_.message; }

 private:
  ApiError error_;
  bool ok_ = true;
};

}  // namespace gpuslice::kube
