// Field access on Kubernetes JSON objects and the text helpers (common/json_access.h).
#include "common/json_access.h"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <catch2/catch.hpp>

using namespace gpuslice;
namespace json = boost::json;

TEST_CASE("object_at, array_at and string_at read a member of the expected type, else nothing") {
  const auto o = json::parse(R"({"o":{"k":1},"a":[1,2],"s":"text","n":null,"i":7})").as_object();
  REQUIRE(object_at(o, "o") != nullptr);
  CHECK(object_at(o, "o")->contains("k"));
  CHECK(object_at(o, "a") == nullptr);
  CHECK(object_at(o, "missing") == nullptr);
  REQUIRE(array_at(o, "a") != nullptr);
  CHECK(array_at(o, "a")->size() == 2);
  CHECK(array_at(o, "o") == nullptr);
  CHECK(array_at(o, "n") == nullptr);
  CHECK(string_at(o, "s") == "text");
  CHECK(string_view_at(o, "s") == "text");
  CHECK(string_at(o, "i").empty());
  CHECK(string_at(o, "n").empty());
  CHECK(string_at(o, "missing").empty());
}

TEST_CASE("string_at_pointer follows JSON pointers with escapes") {
  auto o = json::parse(R"({"metadata":{"annotations":{"hami.io/node-lock":"x","a~b":"y"}}})").as_object();
  REQUIRE(string_at_pointer(o, "/metadata/annotations/hami.io~1node-lock") == "x");
  REQUIRE(string_at_pointer(o, "/metadata/annotations/a~0b") == "y");
  REQUIRE(string_at_pointer(o, "/metadata/missing").empty());
  REQUIRE(string_at_pointer(o, "/metadata").empty());
  REQUIRE(string_at_pointer(o, "metadata").empty());
  REQUIRE(string_at_pointer(o, "").empty());
  REQUIRE(string_at_pointer(o, "/metadata/annotations/hami.io~1node-lock/deeper").empty());
}

TEST_CASE("annotation reads metadata.annotations, absent and non-string values are nullopt") {
  const auto pod = json::parse(R"({"metadata":{"annotations":{"a":"1","empty":"","num":3}}})").as_object();
  CHECK(annotation(pod, "a") == std::optional<std::string>("1"));
  CHECK(annotation(pod, "empty") == std::optional<std::string>(""));
  CHECK_FALSE(annotation(pod, "num"));
  CHECK_FALSE(annotation(pod, "missing"));
  REQUIRE(annotations_of(pod) != nullptr);
  CHECK(annotations_of(pod)->size() == 3);
  for (const char* text : {R"({})", R"({"metadata":7})", R"({"metadata":{}})", R"({"metadata":{"annotations":[]}})"}) {
    INFO(text);
    const auto o = json::parse(text).as_object();
    CHECK(annotations_of(o) == nullptr);
    CHECK_FALSE(annotation(o, "a"));
  }
}

TEST_CASE("trim drops ASCII whitespace at both ends only") {
  CHECK(trim("  a b\t") == "a b");
  CHECK(trim("\r\n x \r\n") == "x");
  CHECK(trim("").empty());
  CHECK(trim(" \t ").empty());
  CHECK(trim("x") == "x");
  CHECK(trim("\xC2\xA0x") == "\xC2\xA0x");  // only ASCII whitespace
}

TEST_CASE("iequals compares ASCII case-insensitively") {
  CHECK(iequals("Content-Type", "content-type"));
  CHECK(iequals("", ""));
  CHECK_FALSE(iequals("abc", "abd"));
  CHECK_FALSE(iequals("abc", "ab"));
  CHECK_FALSE(iequals("[", "{"));  // 0x5B vs 0x7B: not letters, not folded
  CHECK_FALSE(iequals("\xC3\xA9", "\xC3\x89"));
}

TEST_CASE("append_json writes the bytes boost::json::serialize writes") {
  std::string all_bytes;
  for (int c = 1; c < 256; ++c) all_bytes.push_back(static_cast<char>(c));
  const json::value values[] = {
      nullptr,
      true,
      false,
      0,
      -9223372036854775807 - 1,
      18446744073709551615u,
      0.5,
      -1e300,
      "",
      "plain",
      json::string(all_bytes),
      json::string(std::string("nul\0byte", 8)),
      json::parse(R"({"a\"b":[1,-2,{"c":[]},{},"\u0000\u001f\\/é"],"":null,"d":{"e":true}})"),
      json::array{},
      json::object{},
  };
  for (const json::value& v : values) {
    INFO(json::serialize(v));
    std::string out = "prefix";
    append_json(out, v);
    CHECK(out == "prefix" + json::serialize(v));
    if (v.is_string()) {
      std::string s;
      append_json_string(s, v.get_string());
      CHECK(s == json::serialize(v));
    }
  }
}
