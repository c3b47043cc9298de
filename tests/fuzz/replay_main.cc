// Replays fuzz corpora without libFuzzer (g++ has none), as Envoy's test/fuzz/main.cc does: every file
// named on the command line, or found in a named directory, is fed once to LLVMFuzzerTestOneInput.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {
int run_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", p.c_str());
    return 1;
  }
  std::vector<char> buf((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // A copy in exactly-sized heap memory lets ASan catch reads past the end.
  auto* data = new uint8_t[buf.size() + 1];
  std::copy(buf.begin(), buf.end(), data);
  LLVMFuzzerTestOneInput(data, buf.size());
  delete[] data;
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  int files = 0;
  int failures = 0;
  for (int i = 1; i < argc; ++i) {
    std::filesystem::path arg(argv[i]);
    if (std::filesystem::is_directory(arg)) {
      std::vector<std::filesystem::path> paths;
      for (const auto& e : std::filesystem::recursive_directory_iterator(arg)) {
        if (e.is_regular_file()) paths.push_back(e.path());
      }
      std::sort(paths.begin(), paths.end());
      for (const auto& p : paths) {
        failures += run_file(p);
        ++files;
      }
    } else {
      failures += run_file(arg);
      ++files;
    }
  }
  std::printf("replayed %d inputs\n", files);
  if (files == 0) {
    std::fprintf(stderr, "no corpus inputs found\n");
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
