#include "common/rfc3339.h"

#include <cstdint>
#include <cstdio>

namespace gpuslice {
namespace {

// Howard Hinnant's days_from_civil / civil_from_days: proleptic Gregorian, no time zone database needed.
int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

void civil_from_days(int64_t z, int64_t& y, unsigned& m, unsigned& d) {
  z += 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const unsigned doe = static_cast<unsigned>(z - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  y = static_cast<int64_t>(yoe) + era * 400;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  d = doy - (153 * mp + 2) / 5 + 1;
  m = mp < 10 ? mp + 3 : mp - 9;
  y += m <= 2;
}

int days_in_month(int y, int m) {
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m == 2 && leap ? 29 : kDays[m - 1];
}

bool digits(std::string_view s, size_t pos, size_t n, int& out) {
  if (pos + n > s.size()) {
    return false;
  }
  int v = 0;
  for (size_t i = pos; i < pos + n; ++i) {
    if (s[i] < '0' || s[i] > '9') {
      return false;
    }
    v = v * 10 + (s[i] - '0');
  }
  out = v;
  return true;
}

Error bad(std::string_view text, std::string_view why) {
  std::string quoted;
  for (char c : text.substr(0, 64)) {
    quoted.push_back(c >= 0x20 && c < 0x7f ? c : ' ');
  }
  return make_error("\"" + quoted + (text.size() > 64 ? "...\"" : "\"") +
                    " is not an RFC 3339 time: " + std::string(why));
}

}  // namespace

std::string format_rfc3339(WallTime t, int fraction_digits) {
  using namespace std::chrono;
  const int64_t ns = duration_cast<nanoseconds>(t.time_since_epoch()).count();
  // Floor division: 0.5 s before the epoch is 1969-12-31T23:59:59.5.
  int64_t secs = ns / 1000000000;
  int64_t frac = ns % 1000000000;
  if (frac < 0) {
    frac += 1000000000;
    secs -= 1;
  }
  int64_t days = secs / 86400;
  int64_t sod = secs % 86400;
  if (sod < 0) {
    sod += 86400;
    days -= 1;
  }
  int64_t y = 0;
  unsigned m = 0;
  unsigned d = 0;
  civil_from_days(days, y, m, d);
  char buf[64];
  int n = std::snprintf(buf, sizeof buf, "%04lld-%02u-%02uT%02lld:%02lld:%02lld", static_cast<long long>(y), m, d,
                        static_cast<long long>(sod / 3600), static_cast<long long>(sod / 60 % 60),
                        static_cast<long long>(sod % 60));
  std::string out(buf, static_cast<size_t>(n));
  if (fraction_digits > 0) {
    if (fraction_digits > 9) {
      fraction_digits = 9;
    }
    char fb[16];
    std::snprintf(fb, sizeof fb, "%09lld", static_cast<long long>(frac));
    out += '.';
    out.append(fb, static_cast<size_t>(fraction_digits));
  }
  out += 'Z';
  return out;
}

Result<WallTime> parse_rfc3339(std::string_view s) {
  int y = 0;
  int mo = 0;
  int d = 0;
  int h = 0;
  int mi = 0;
  int se = 0;
  if (s.size() < 20 || !digits(s, 0, 4, y) || s[4] != '-' || !digits(s, 5, 2, mo) || s[7] != '-' ||
      !digits(s, 8, 2, d) || (s[10] != 'T' && s[10] != 't') || !digits(s, 11, 2, h) || s[13] != ':' ||
      !digits(s, 14, 2, mi) || s[16] != ':' || !digits(s, 17, 2, se)) {
    return bad(s, "expected YYYY-MM-DDTHH:MM:SS");
  }
  if (mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 || se > 60) {
    return bad(s, "field out of range");
  }
  size_t pos = 19;
  int64_t frac_ns = 0;
  if (pos < s.size() && s[pos] == '.') {
    ++pos;
    size_t start = pos;
    int64_t scale = 100000000;
    while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') {
      if (pos - start < 9) {
        frac_ns += (s[pos] - '0') * scale;
        scale /= 10;
      }
      ++pos;
    }
    if (pos == start) {
      return bad(s, "empty fraction");
    }
  }
  int64_t offset_s = 0;
  if (pos < s.size() && (s[pos] == 'Z' || s[pos] == 'z')) {
    ++pos;
  } else if (pos < s.size() && (s[pos] == '+' || s[pos] == '-')) {
    int oh = 0;
    int om = 0;
    if (!digits(s, pos + 1, 2, oh) || pos + 3 >= s.size() || s[pos + 3] != ':' || !digits(s, pos + 4, 2, om) ||
        oh > 23 || om > 59) {
      return bad(s, "bad zone offset");
    }
    offset_s = (oh * 3600 + om * 60) * (s[pos] == '-' ? -1 : 1);
    pos += 6;
  } else {
    return bad(s, "missing zone (Z or +hh:mm)");
  }
  if (pos != s.size()) {
    return bad(s, "trailing characters");
  }
  if (se == 60) {
    se = 59;  // leap second: Kubernetes never writes one; keep it valid and monotone
  }
  const int64_t secs = days_from_civil(y, static_cast<unsigned>(mo), static_cast<unsigned>(d)) * 86400 + h * 3600 +
                       mi * 60 + se - offset_s;
  // WallTime counts nanoseconds in 64 bits (libstdc++'s system_clock): 1677-09-21 to 2262-04-11. Beyond, the
  // conversion below overflowed (undefined behaviour; found by tests/fuzz/kubeconfig_fuzz.cc, an ExecCredential
  // expiring in 4060).
  constexpr int64_t kLimit = std::chrono::duration_cast<std::chrono::seconds>(WallTime::duration::max()).count() - 1;
  if (secs > kLimit || secs < -kLimit) {
    return bad(s, "outside the years 1678 to 2261 a time point holds");
  }
  return WallTime(
      std::chrono::duration_cast<WallTime::duration>(std::chrono::seconds(secs) + std::chrono::nanoseconds(frac_ns)));
}

}  // namespace gpuslice
