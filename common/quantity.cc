#include "common/quantity.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace gpuslice {

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
  // resource.Quantity's suffixes: decimal SI (power of ten) and binary (power of two).
  struct Suffix {
    std::string_view text;
    int dec;
    int bin;
  };
  static constexpr Suffix kSuffixes[] = {{"", 0, 0},    {"m", -3, 0},  {"u", -6, 0},  {"n", -9, 0},
                                         {"k", 3, 0},   {"M", 6, 0},   {"G", 9, 0},   {"T", 12, 0},
                                         {"P", 15, 0},  {"E", 18, 0},  {"Ki", 0, 10}, {"Mi", 0, 20},
                                         {"Gi", 0, 30}, {"Ti", 0, 40}, {"Pi", 0, 50}, {"Ei", 0, 60}};
  const Suffix* known = nullptr;
  for (const Suffix& s : kSuffixes) {
    if (s.text == suffix) {
      known = &s;
    }
  }
  if (known != nullptr) {
    dec_exp += known->dec;
    bin_exp = known->bin;
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

Result<int64_t> parse_whole_quantity(std::string_view text) {
  auto bad = [&](const char* why) { return make_error("\"" + std::string(text) + "\" " + why); };
  if (text.empty()) {
    return bad("is empty");
  }
  // The written form first: [+]digits and one of the suffixes a count or a MiB figure is written with. The value
  // is then the general parser's, which must come out as whole units.
  size_t i = text[0] == '+' ? 1 : 0;
  if (i < text.size() && text[i] == '-') {
    return bad("is negative");
  }
  const size_t digits_start = i;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
    ++i;
  }
  if (i == digits_start) {
    return bad("is not a whole number");
  }
  static constexpr std::string_view kWholeSuffixes[] = {"", "k", "M", "G", "T", "Ki", "Mi", "Gi", "Ti", "m"};
  const std::string_view suffix = text.substr(i);
  bool known = false;
  for (std::string_view s : kWholeSuffixes) {
    known = known || suffix == s;
  }
  if (!known) {
    return bad("is not a whole number");
  }
  auto milli = parse_quantity_milli(text);
  if (!milli) {
    return bad("is too large");  // the form is valid, so only the range can fail
  }
  if (*milli % 1000 != 0) {
    return bad("is not a whole number");
  }
  return *milli / 1000;
}

}  // namespace gpuslice
