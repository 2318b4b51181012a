// ps_worker's --cache=DIR files (example_cache_file.h), as a damaged or
// hostile disk could present them: opened with the key "fuzz", both with
// and without the up-front chunk check, and read to the end twice.
#include <cstdint>
#include <cstdio>
#include <string>

#include "ps_worker/data/example_cache_file.h"
#include "tests/fuzz/scratch_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = psrt::fuzz::ScratchFilePath("example_cache_fuzz");
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  for (bool verify : {false, true}) {
    auto reader = psrt::ExampleCacheReader::Open(path, "fuzz", verify);
    if (!reader.ok()) continue;
    psrt::Example example;
    for (int pass = 0; pass < 2; ++pass) {
      while (true) {
        auto more = (*reader)->Next(&example);
        if (!more.ok() || !*more) break;
      }
      if (!(*reader)->Rewind().ok()) break;
    }
  }
  return 0;
}
