#include "common/base64.h"

#include <array>
#include <cstdint>

namespace gpuslice {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

constexpr std::array<int8_t, 256> make_table() {
  std::array<int8_t, 256> t{};
  for (auto& v : t) v = -1;
  for (int i = 0; i < 64; ++i) t[static_cast<unsigned char>(kAlphabet[i])] = static_cast<int8_t>(i);
  return t;
}
constexpr auto kTable = make_table();

}  // namespace

std::string base64_encode(std::string_view data) {
  std::string out;
  out.reserve((data.size() + 2) / 3 * 4);
  out.assign(data);
  base64_encode_tail(out, 0);
  return out;
}

void base64_encode_tail(std::string& s, std::size_t from) {
  const std::size_t n = s.size() - from;
  const std::size_t groups = (n + 2) / 3;
  s.resize(from + groups * 4);
  char* p = s.data() + from;
  // Group g reads bytes [3g, 3g + 3) and writes [4g, 4g + 4): from the last group to the first, each group's
  // input is read before its output is written, and no output reaches the input of a group still to come.
  std::size_t g = groups;
  if (n % 3 != 0) {
    --g;
    const std::size_t i = g * 3;
    uint32_t v = uint32_t(uint8_t(p[i])) << 16;
    const bool two = n % 3 == 2;
    if (two) v |= uint32_t(uint8_t(p[i + 1])) << 8;
    char* o = p + g * 4;
    o[0] = kAlphabet[(v >> 18) & 63];
    o[1] = kAlphabet[(v >> 12) & 63];
    o[2] = two ? kAlphabet[(v >> 6) & 63] : '=';
    o[3] = '=';
  }
  while (g > 0) {
    --g;
    const std::size_t i = g * 3;
    uint32_t v = (uint32_t(uint8_t(p[i])) << 16) | (uint32_t(uint8_t(p[i + 1])) << 8) | uint8_t(p[i + 2]);
    char* o = p + g * 4;
    o[0] = kAlphabet[(v >> 18) & 63];
    o[1] = kAlphabet[(v >> 12) & 63];
    o[2] = kAlphabet[(v >> 6) & 63];
    o[3] = kAlphabet[v & 63];
  }
}

std::optional<std::string> base64_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size() / 4 * 3);
  uint32_t acc = 0;
  int bits = 0;
  int quantum = 0;  // symbols in the current 4-symbol group, padding included
  int padding = 0;
  for (char c : text) {
    if (c == '\n' || c == '\r' || c == ' ' || c == '\t') continue;
    if (c == '=') {
      if (quantum < 2) return std::nullopt;
      ++padding;
      ++quantum;
      if (quantum == 4) {
        quantum = 0;
      }
      continue;
    }
    if (padding > 0) return std::nullopt;  // data after padding
    int8_t v = kTable[static_cast<unsigned char>(c)];
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    quantum = (quantum + 1) % 4;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  if (quantum != 0) return std::nullopt;  // truncated group or missing padding
  if (padding > 2) return std::nullopt;
  // Leftover bits must be zero (canonical encoding), otherwise the input was not produced by an encoder.
  if (bits > 0 && (acc & ((1u << bits) - 1)) != 0) return std::nullopt;
  return out;
}

}  // namespace gpuslice
