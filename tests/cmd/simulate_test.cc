// `gpuslice simulate` end to end: the built binary on examples/, its JSON parsed (issue 3, item 10).
#include <boost/json.hpp>
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace json = boost::json;
using Catch::Matchers::Contains;

namespace {

struct Run {
  int status = -1;
  std::string out;
  std::string err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::filesystem::path scratch() {
  auto dir = std::filesystem::path(GPUSLICE_BINARY_DIR) / "tests" / "scheduler" /
             ("simulate_cli_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

Run gpuslice(const std::string& args) {
  auto dir = scratch();
  std::string out = (dir / "stdout").string();
  std::string err = (dir / "stderr").string();
  std::string cmd = std::string(GPUSLICE_BINARY_DIR) + "/cmd/gpuslice " + args + " >" + out + " 2>" + err;
  Run r;
  int rc = std::system(cmd.c_str());
  r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

std::string example(const std::string& rel) {
  return std::string(GPUSLICE_SOURCE_DIR) + "/examples/" + rel;
}

const json::object& pod_named(const json::value& doc, std::string_view name) {
  for (const json::value& p : doc.at("pods").as_array()) {
    if (p.at("name").as_string() == name) {
      return p.as_object();
    }
  }
  FAIL("pod " << name << " missing from the output");
  return doc.at("pods").as_array().at(0).as_object();
}

}  // namespace

TEST_CASE("tenant-a: three 20000 MiB / 30 % pods share the A100 while the 4th and the 90000 MiB pod stay Pending",
          "[simulate][cli]") {
  Run r = gpuslice("simulate --nodes " + example("tenant-a/nodes.yaml") + " --pods " + example("tenant-a/pods.yaml") +
                   " -o json");
  INFO(r.err);
  REQUIRE(r.status == 0);
  json::value doc = json::parse(r.out);
  std::string uuid;
  for (const char* name : {"share-1", "share-2", "share-3"}) {
    const json::object& p = pod_named(doc, name);
    CHECK(p.at("status").as_string() == "Scheduled");
    CHECK(p.at("node").as_string() == "tenant-a-gpu-0");
    const json::array& devs = p.at("devices").as_array();
    REQUIRE(devs.size() == 1);
    CHECK(devs[0].at("memMiB").as_int64() == 20000);
    CHECK(devs[0].at("cores").as_int64() == 30);
    CHECK(devs[0].at("type").as_string() == "NVIDIA A100-SXM4-80GB");
    if (uuid.empty()) {
      uuid = std::string(devs[0].at("uuid").as_string());
    }
    CHECK(devs[0].at("uuid").as_string() == uuid);  // same card
  }
  const json::object& fourth = pod_named(doc, "share-4");
  CHECK(fourth.at("status").as_string() == "Pending");
  CHECK(fourth.at("node").is_null());
  CHECK_THAT(std::string(fourth.at("message").as_string()), Contains("CardInsufficientCore"));
  const json::object& big = pod_named(doc, "big");
  CHECK(big.at("status").as_string() == "Pending");
  CHECK_THAT(std::string(big.at("message").as_string()), Contains("CardInsufficientMemory"));

  const json::array& cards = doc.at("cards").as_array();
  REQUIRE(cards.size() == 1);
  CHECK(cards[0].at("memUsedMiB").as_int64() == 60000);
  CHECK(cards[0].at("memTotalMiB").as_int64() == 81920);
  CHECK(cards[0].at("coresUsed").as_int64() == 90);
  CHECK(cards[0].at("coresTotal").as_int64() == 100);
  CHECK(cards[0].at("pods").as_array().size() == 3);
}

TEST_CASE("tenant-b: a pod asking nvidia.com/gpu: 2 gets both L4s", "[simulate][cli]") {
  Run r = gpuslice("simulate --nodes " + example("tenant-b/nodes.yaml") + " --pods " + example("tenant-b/pods.yaml") +
                   " -o json");
  INFO(r.err);
  REQUIRE(r.status == 0);
  json::value doc = json::parse(r.out);
  const json::object& p = pod_named(doc, "two-l4");
  CHECK(p.at("status").as_string() == "Scheduled");
  const json::array& devs = p.at("devices").as_array();
  REQUIRE(devs.size() == 2);
  CHECK(devs[0].at("uuid") != devs[1].at("uuid"));
  for (const json::value& d : devs) {
    CHECK(d.at("type").as_string() == "NVIDIA L4");
    CHECK(d.at("memMiB").as_int64() == 23034);
  }
  for (const json::value& c : doc.at("cards").as_array()) {
    CHECK(c.at("memUsedMiB").as_int64() == 23034);
    CHECK(c.at("pods").as_array().size() == 1);
  }
}

TEST_CASE("table output lists pods and cards", "[simulate][cli]") {
  Run r = gpuslice("simulate --nodes " + example("tenant-a/nodes.yaml") + " --pods " + example("tenant-a/pods.yaml"));
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Contains("default/share-4"));
  CHECK_THAT(
      r.out,
      Contains("0/1 nodes are available: 1 CardInsufficientCore (asks 30% of a card's cores, largest free 10%)."));
  CHECK_THAT(r.out, Contains("60000/81920"));
  CHECK_THAT(r.out, Contains("90/100"));
}

TEST_CASE("bad files are reported with file, document index and field", "[simulate][cli]") {
  auto dir = scratch();
  std::string bad = (dir / "bad-nodes.yaml").string();
  std::ofstream(bad) << "kind: Node\nmetadata: {name: ok}\n---\nmetadata: {name: nokind}\n";
  Run r = gpuslice("simulate --nodes " + bad);
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Contains(bad + ": document 1: kind: missing"));

  std::string reg = (dir / "bad-register.yaml").string();
  std::ofstream(reg) << "kind: Node\nmetadata:\n  name: n\n  annotations:\n"
                        "    hami.io/node-nvidia-register: 'GPU-a,10,lots,100,NVIDIA,0,true:'\n"
                        "status: {allocatable: {nvidia.com/gpu: '10'}}\n";
  Run r2 = gpuslice("simulate --nodes " + reg);
  CHECK(r2.status == 2);
  CHECK_THAT(r2.err,
             Contains(reg + ": document 0: node \"n\": hami.io/node-nvidia-register: devices[0].devmem: \"lots\""));

  Run r3 = gpuslice("simulate --nodes " + example("tenant-a/nodes.yaml") + " -o yaml");
  CHECK(r3.status != 0);
  std::filesystem::remove_all(dir);
}
