#include "common/base64.h"

#include <catch2/catch.hpp>

using gpuslice::base64_decode;
using gpuslice::base64_encode;

TEST_CASE("base64 encodes the RFC 4648 test vectors") {
  CHECK(base64_encode("") == "");
  CHECK(base64_encode("f") == "Zg==");
  CHECK(base64_encode("fo") == "Zm8=");
  CHECK(base64_encode("foo") == "Zm9v");
  CHECK(base64_encode("foob") == "Zm9vYg==");
  CHECK(base64_encode("fooba") == "Zm9vYmE=");
  CHECK(base64_encode("foobar") == "Zm9vYmFy");
}

TEST_CASE("base64 decodes the RFC 4648 test vectors and round-trips binary data") {
  CHECK(base64_decode("Zg==").value() == "f");
  CHECK(base64_decode("Zm8=").value() == "fo");
  CHECK(base64_decode("Zm9vYmFy").value() == "foobar");
  CHECK(base64_decode("").value().empty());
  std::string bin;
  for (int i = 0; i < 256; ++i) bin.push_back(static_cast<char>(i));
  CHECK(base64_decode(base64_encode(bin)).value() == bin);
}

TEST_CASE("base64 ignores line breaks as in wrapped PEM data") {
  CHECK(base64_decode("Zm9v\nYmFy\r\n").value() == "foobar");
}

TEST_CASE("base64 rejects invalid input") {
  CHECK_FALSE(base64_decode("Zm9").has_value());       // truncated
  CHECK_FALSE(base64_decode("Zm9v!").has_value());     // bad character
  CHECK_FALSE(base64_decode("Zg==Zg==").has_value());  // data after padding
  CHECK_FALSE(base64_decode("Z===").has_value());      // too much padding
  CHECK_FALSE(base64_decode("Zh==").has_value());      // non-canonical trailing bits
}

TEST_CASE("base64_encode_tail encodes the end of a string in place and leaves the rest") {
  std::string bin;
  for (int i = 0; i < 64; ++i) bin.push_back(static_cast<char>(i * 37 + 11));
  for (size_t n = 0; n <= bin.size(); ++n) {
    INFO(n);
    std::string s = "prefix:" + bin.substr(0, n);
    gpuslice::base64_encode_tail(s, 7);
    CHECK(s.substr(0, 7) == "prefix:");
    CHECK(s.size() == 7 + (n + 2) / 3 * 4);
    CHECK(base64_decode(s.substr(7)).value() == bin.substr(0, n));
  }
  std::string s = "x=foobar";
  gpuslice::base64_encode_tail(s, 2);
  CHECK(s == "x=Zm9vYmFy");
}
