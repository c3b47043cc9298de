// The status board (scheduler/status_board.h): the publication rate's bound, the board's swap, and the view's
// age in /status.json, the page and /metrics.
#include "scheduler/status_board.h"

#include "sched_fixtures.h"

#include <boost/json.hpp>
#include <catch2/catch.hpp>

using namespace gpuslice;
using namespace gpuslice::scheduler;
using namespace gpuslice::scheduler::testing;
using namespace std::chrono_literals;
namespace json = boost::json;

namespace {

std::shared_ptr<const status::Published> published(uint64_t generation, status::SteadyTime at,
                                                   std::chrono::microseconds build = 1500us) {
  Snapshot snap;
  REQUIRE(
      snap.upsert_node(node({"gpu-" + std::to_string(generation), {card("GPU-" + std::to_string(generation))}})).ok());
  auto p = std::make_shared<status::Published>();
  status::SchedulerState st;
  st.synced = true;
  st.now_unix = 1000;
  p->view = status::build_view(snap, {}, st);
  p->generation = generation;
  p->at = at;
  p->build_time = build;
  return p;
}

const status::SteadyTime kT0 = status::SteadyTime{} + 1000h;

}  // namespace

TEST_CASE("status board: the next view waits at least a second and keeps building under 5% of the loop's time") {
  const status::PublishPolicy policy;  // 1 s, 5 %
  CHECK(status::next_publish_delay(0us, policy) == 1000ms);
  CHECK(status::next_publish_delay(40ms, policy) == 1000ms);   // 40 ms x 20 = 800 ms < 1 s
  CHECK(status::next_publish_delay(250ms, policy) == 5000ms);  // 5,000 nodes x 8 cards: one view per 5 s
  CHECK(status::next_publish_delay(2s, policy) == 40s);        // a slower loop gets views less often, never more load
  CHECK(status::next_publish_delay(1001us, policy) == 1000ms);
  CHECK(status::next_publish_delay(50001us, policy) == 1001ms);  // rounded up: the share is a bound
  status::PublishPolicy ten{200ms, 10};
  CHECK(status::next_publish_delay(10ms, ten) == 200ms);
  CHECK(status::next_publish_delay(30ms, ten) == 300ms);
  status::PublishPolicy silly{0ms, 0};  // a share below 1 % is 1 %
  CHECK(status::next_publish_delay(3ms, silly) == 300ms);
}

TEST_CASE("status board: readers get the last published view; one they hold stays intact after the next") {
  status::StatusBoard board;
  CHECK(board.latest() == nullptr);
  board.publish(published(1, kT0));
  auto held = board.latest();
  REQUIRE(held != nullptr);
  CHECK(held->generation == 1);
  board.publish(published(2, kT0 + 1s));
  CHECK(board.latest()->generation == 2);
  // The reader's view is immutable and still its own (shared ownership, no copy).
  CHECK(held->generation == 1);
  REQUIRE(held->view.nodes.size() == 1);
  CHECK(held->view.nodes[0].name == "gpu-1");
  CHECK(board.latest()->view.nodes[0].name == "gpu-2");
}

TEST_CASE("status board: /status.json and the page say how old the view is; 503 before the first, 400 kept") {
  auto p = published(7, kT0, 2500us);
  Page page = status::board_response(true, "limit=10", p.get(), kT0 + 2500ms, "unused");
  CHECK(page.status == 200);
  json::object doc = json::parse(page.body).as_object();
  REQUIRE(doc.contains("view"));
  const json::object& view = doc.at("view").as_object();
  CHECK(view.at("generation").as_int64() == 7);
  CHECK(view.at("ageSeconds").to_number<double>() == Approx(2.5));
  CHECK(view.at("buildMs").to_number<double>() == Approx(2.5));
  // The rest of the document is render_json's.
  CHECK(doc.at("nodes").at("limit").as_int64() == 10);
  CHECK(doc.at("state").at("synced").as_bool());
  // A clock behind the publication (another thread's reading) is age 0, never negative.
  json::object early = json::parse(status::board_response(true, "", p.get(), kT0 - 1s, "").body).as_object();
  CHECK(early.at("view").at("ageSeconds").to_number<double>() == 0.0);

  Page html = status::board_response(false, "", p.get(), kT0 + 61s, "unused");
  CHECK(html.status == 200);
  CHECK_THAT(html.body, Catch::Contains("{\"view\":{\"generation\":7,\"ageSeconds\":61.000,"));
  CHECK_THAT(html.body, Catch::Contains("d.view.ageSeconds"));  // and the page shows it

  Page none = status::board_response(true, "", nullptr, kT0, "the scheduling loop has published no view yet");
  CHECK(none.status == 503);
  CHECK(none.body == "503 service unavailable: the scheduling loop has published no view yet\n");
  Page bad = status::board_response(true, "limit=0", p.get(), kT0, "");
  CHECK(bad.status == 400);
  CHECK(bad.body.find("\"view\"") == std::string::npos);
}

TEST_CASE("status board: /metrics carries the view's age, build time and generation") {
  CHECK(status::render_board_metrics(nullptr, kT0).empty());
  auto p = published(3, kT0, 120ms);
  std::string text = status::render_board_metrics(p.get(), kT0 + 4s);
  CHECK_THAT(text, Catch::Contains("\ngpuslice_scheduler_status_view_age_seconds 4\n"));
  CHECK_THAT(text, Catch::Contains("\ngpuslice_scheduler_status_view_build_seconds 0.12\n"));
  CHECK_THAT(text, Catch::Contains("\ngpuslice_scheduler_status_view_generation 3\n"));
  CHECK_THAT(text, Catch::Contains("# TYPE gpuslice_scheduler_status_view_age_seconds gauge\n"));
}

TEST_CASE("status board: publish says whether it freed the previous view (none held it)") {
  status::StatusBoard board;
  CHECK_FALSE(board.publish(published(1, kT0)));  // nothing before
  CHECK(board.publish(published(2, kT0 + 1s)));   // view 1 freed here
  auto held = board.latest();
  CHECK_FALSE(board.publish(published(3, kT0 + 2s)));  // view 2 is the reader's to free
  CHECK(held->generation == 2);
  held.reset();
  CHECK(board.publish(published(4, kT0 + 3s)));
}
