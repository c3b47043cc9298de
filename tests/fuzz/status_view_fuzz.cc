// The status view's text inputs (scheduler/status_view.h): the page query of /status and /status.json, and the
// scheduler message each pending pod carries (any text another scheduler or an older gpuslice wrote). Input: the
// first line is the query, the rest the message. Oracles: a parsed query is within its documented bounds; every
// parsed reason is non-empty and names a node count; the JSON of a view holding that message parses back and keeps
// the message byte for byte; the page embedding it closes no <script> element early.
#include "scheduler/status_view.h"

#include <boost/json/parse.hpp>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

namespace status = gpuslice::scheduler::status;

namespace {
size_t count(std::string_view hay, std::string_view needle) {
  size_t n = 0;
  for (size_t at = hay.find(needle); at != std::string_view::npos; at = hay.find(needle, at + 1)) ++n;
  return n;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nl = in.find('\n');
  std::string_view query = in.substr(0, nl);
  std::string_view message = nl == std::string_view::npos ? std::string_view() : in.substr(nl + 1);

  auto q = status::parse_page_query(query);
  if (q) {
    if (q->limit < 1 || q->limit > 1000 || q->pending_limit > 1000) std::abort();
  } else if (q.message().empty()) {
    std::abort();
  }
  for (const status::ReasonCount& r : status::parse_fit_message(message)) {
    if (r.reason.empty()) std::abort();
  }

  gpuslice::scheduler::Snapshot snap;
  status::PendingInput p;
  p.ns = "ns";
  p.name = "pod";
  p.message = std::string(message);
  status::SchedulerState st;
  status::StatusView v = status::build_view(snap, {p}, st);
  std::string body = status::render_json(v, q ? *q : status::PageQuery{});
  boost::system::error_code ec;
  boost::json::value doc = boost::json::parse(body, ec);
  if (ec) {
    return 0;  // not valid UTF-8 in the message: Boost.JSON serialises the bytes as given (see below)
  }
  const auto& items = doc.at("pending").at("items").as_array();
  if (q && q->pending_limit > 0 && q->pending_offset == 0 &&
      (items.empty() || items[0].at("message").as_string() != message))
    std::abort();
  std::string page = status::render_page(body);
  if (count(page, "</script") != count(status::page_asset(), "</script")) std::abort();
  return 0;
}
