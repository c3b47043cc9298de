#pragma once
// RFC 3339 timestamps as Kubernetes writes them (metav1.Time: seconds, "Z"; metav1.MicroTime: 6 fraction
// digits) and as HAMi writes its node lock (Go time.RFC3339, any offset). Pure: the time is a parameter.

#include "common/result.h"

#include <chrono>
#include <string>
#include <string_view>

namespace gpuslice::scheduler {

using WallTime = std::chrono::system_clock::time_point;

/// Formats `t` in UTC as "2026-11-30T07:48:24Z", or with `fraction_digits` (1..9) sub-second digits
/// ("2026-11-30T07:48:24.123456Z" for a MicroTime). Times before 1970 or after 9999 are clamped.
std::string format_rfc3339(WallTime t, int fraction_digits = 0);

/// Parses RFC 3339 ("Z" or a numeric offset, optional fraction of up to 9 digits, "T" or "t" separator).
/// Errors quote the text.
Result<WallTime> parse_rfc3339(std::string_view text);

}  // namespace gpuslice::scheduler
