// The one result template (common/result.h): Result<T, E> and BasicStatus<E>, with Error as the default.
#include "common/result.h"

#include <catch2/catch.hpp>

#include <memory>
#include <type_traits>

using namespace gpuslice;

namespace {
struct CodedError {  // another layer's error type, as kube::ApiError is
  int code = 0;
  std::string message;
};

Result<int> half(int v) {
  if (v % 2 != 0) {
    return make_error(std::to_string(v) + " is odd");
  }
  return v / 2;
}
}  // namespace

TEST_CASE("Result holds a value or an Error") {
  auto ok = half(8);
  REQUIRE(ok.ok());
  REQUIRE(ok);
  CHECK(*ok == 4);
  CHECK(ok.value() == 4);
  auto bad = half(3);
  REQUIRE_FALSE(bad);
  CHECK(bad.message() == "3 is odd");
  CHECK(bad.error().message == "3 is odd");
  static_assert(std::is_same_v<Result<int>, Result<int, Error>>);
}

TEST_CASE("Result moves its value out and reaches members through ->") {
  Result<std::unique_ptr<std::string>> r(std::make_unique<std::string>("abc"));
  REQUIRE(r);
  CHECK((*r)->size() == 3);
  std::unique_ptr<std::string> taken = std::move(r).value();
  CHECK(*taken == "abc");
  Result<std::string> s(std::string("xyz"));
  CHECK(s->size() == 3);
}

TEST_CASE("Result and BasicStatus over another error type") {
  Result<std::string, CodedError> r(CodedError{409, "conflict"});
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == 409);
  CHECK(r.message() == "conflict");
  Result<std::string, CodedError> v(std::string("value"));
  REQUIRE(v);
  CHECK(*v == "value");

  BasicStatus<CodedError> fine;
  CHECK(fine.ok());
  BasicStatus<CodedError> failed(CodedError{500, "boom"});
  REQUIRE_FALSE(failed);
  CHECK(failed.error().code == 500);
  CHECK(failed.message() == "boom");
}

TEST_CASE("Status is success or an Error") {
  Status s = Status::Ok();
  CHECK(s.ok());
  CHECK(Status().ok());
  Status e = make_error("field x: bad");
  REQUIRE_FALSE(e);
  CHECK(e.message() == "field x: bad");
  static_assert(std::is_same_v<Status, BasicStatus<Error>>);
}
