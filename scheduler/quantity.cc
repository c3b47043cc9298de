#include "scheduler/quantity.h"

#include <cstdint>
#include <string>

namespace gpuslice::scheduler {

namespace {
// 128-bit arithmetic keeps suffix scaling exact without overflow checks at every step.
__extension__ typedef __int128 i128;

// Quantities above this many whole units are rejected: x1000 (milli) must stay within int64 with headroom.
constexpr i128 kMaxMilli = static_cast<i128>(9'200'000'000'000'000'000LL);
}  // namespace

Result<int64_t> parse_quantity_milli(std::string_view text) {
  auto bad = [&](const char* why) { return make_error("quantity \"" + std::string(text) + "\" " + why); };
  if (text.empty()) {
    return bad("is empty");
  }
  size_t i = 0;
  if (text[0] == '+') {
    i = 1;
  } else if (text[0] == '-') {
    return bad("is negative");
  }
  // Mantissa as an integer of digits with `frac_digits` of them after the point.
  i128 mantissa = 0;
  int frac_digits = 0;
  bool any_digit = false;
  bool seen_point = false;
  for (; i < text.size(); ++i) {
    char c = text[i];
    if (c >= '0' && c <= '9') {
      any_digit = true;
      if (mantissa > kMaxMilli) {
        return bad("is too large");
      }
      mantissa = mantissa * 10 + (c - '0');
      if (seen_point) {
        ++frac_digits;
      }
    } else if (c == '.' && !seen_point) {
      seen_point = true;
    } else {
      break;
    }
  }
  if (!any_digit) {
    return bad("is not a number");
  }
  std::string_view suffix = text.substr(i);
  // Value = mantissa * 10^dec_exp * 2^bin_exp / 10^frac_digits, expressed in milli-units (dec_exp += 3).
  int dec_exp = 3;
  int bin_exp = 0;
  if (suffix.empty()) {
  } else if (suffix == "m") {
    dec_exp -= 3;
  } else if (suffix == "u") {
    dec_exp -= 6;
  } else if (suffix == "n") {
    dec_exp -= 9;
  } else if (suffix == "k") {
    dec_exp += 3;
  } else if (suffix == "M") {
    dec_exp += 6;
  } else if (suffix == "G") {
    dec_exp += 9;
  } else if (suffix == "T") {
    dec_exp += 12;
  } else if (suffix == "P") {
    dec_exp += 15;
  } else if (suffix == "E") {
    dec_exp += 18;
  } else if (suffix == "Ki") {
    bin_exp = 10;
  } else if (suffix == "Mi") {
    bin_exp = 20;
  } else if (suffix == "Gi") {
    bin_exp = 30;
  } else if (suffix == "Ti") {
    bin_exp = 40;
  } else if (suffix == "Pi") {
    bin_exp = 50;
  } else if (suffix == "Ei") {
    bin_exp = 60;
  } else if (suffix[0] == 'e' || suffix[0] == 'E') {
    std::string_view exp = suffix.substr(1);
    bool neg = false;
    if (!exp.empty() && (exp[0] == '+' || exp[0] == '-')) {
      neg = exp[0] == '-';
      exp.remove_prefix(1);
    }
    if (exp.empty() || exp.size() > 2) {
      return bad("has a bad exponent");
    }
    int e = 0;
    for (char c : exp) {
      if (c < '0' || c > '9') {
        return bad("has a bad exponent");
      }
      e = e * 10 + (c - '0');
    }
    dec_exp += neg ? -e : e;
  } else {
    return bad("has an unknown suffix");
  }
  dec_exp -= frac_digits;
  i128 v = mantissa;
  for (int b = 0; b < bin_exp; ++b) {
    v *= 2;
    if (v > kMaxMilli * 1000) {
      return bad("is too large");
    }
  }
  for (; dec_exp > 0; --dec_exp) {
    v *= 10;
    if (v > kMaxMilli * 1000) {
      return bad("is too large");
    }
  }
  if (dec_exp < 0) {
    i128 div = 1;
    for (; dec_exp < 0; ++dec_exp) {
      div *= 10;
      if (div > kMaxMilli * 1000) {
        // Below one milli-unit, rounded up to 1 when non-zero.
        return static_cast<int64_t>(v > 0 ? 1 : 0);
      }
    }
    v = (v + div - 1) / div;  // round up, as resource.Quantity.MilliValue does
  }
  if (v > kMaxMilli) {
    return bad("is too large");
  }
  return static_cast<int64_t>(v);
}

}  // namespace gpuslice::scheduler
