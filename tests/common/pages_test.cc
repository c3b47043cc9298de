// Read-only pages of the health port (common/pages.h).
#include "common/pages.h"

#include <catch2/catch.hpp>

using gpuslice::Page;
using gpuslice::Pages;

TEST_CASE("pages: exact paths, replaced on add, gone on remove, the query passed through") {
  Pages pages;
  CHECK_FALSE(pages.serve("/status", "").has_value());
  pages.add("/status", [](std::string_view q) { return Page{200, "text/html", "page " + std::string(q)}; });
  pages.add("/status.json", [](std::string_view) { return Page{200, "application/json", "{}"}; });
  CHECK(pages.has("/status"));
  CHECK_FALSE(pages.has("/status/"));
  CHECK_FALSE(pages.has("/stat"));
  CHECK(pages.paths() == std::vector<std::string>{"/status", "/status.json"});
  CHECK(pages.serve("/status", "limit=1")->body == "page limit=1");
  pages.add("/status", [](std::string_view) { return Page{503, "text/plain", "later"}; });
  CHECK(pages.serve("/status", "")->status == 503);
  CHECK(pages.paths().size() == 2);
  pages.remove("/status");
  CHECK_FALSE(pages.serve("/status", "").has_value());
  CHECK(pages.serve("/status.json", "")->content_type == "application/json");
}
