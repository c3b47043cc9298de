#pragma once
// Client-side QPS/burst limit (client-go's flowcontrol token bucket). Pure: time is a parameter. The client
// asks for a reservation per request and sleeps for the returned delay before sending.

#include <chrono>

namespace gpuslice::kube {

class TokenBucket {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  using duration = std::chrono::steady_clock::duration;

  /// `qps` tokens per second refill, at most `burst` stored; starts full. qps <= 0 means unlimited.
  TokenBucket(double qps, int burst, time_point now);

  /// Takes one token, possibly borrowing from the future (tokens may go negative), and returns how long the
  /// caller must wait before acting: zero when a token was available. Reservations are FIFO-fair.
  duration reserve(time_point now);
  /// Takes one token only if available now.
  bool try_take(time_point now);
  /// Tokens available at `now` (negative while reservations are outstanding).
  double tokens(time_point now) const;

  double qps() const { return qps_; }
  int burst() const { return burst_; }
  bool unlimited() const { return qps_ <= 0; }

 private:
  void advance(time_point now);

  double qps_;
  int burst_;
  double tokens_;
  time_point last_;
};

}  // namespace gpuslice::kube
