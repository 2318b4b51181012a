// Training input files: the first byte picks the format (LibSVM/LibFFM,
// TFRecord of tf.Example, plain or gzip, Criteo TSV, CSV with the Adult
// schema), whether bad records are skipped and the size of the file's
// reads (8 to 1,024 bytes, so that records and lines cross them, or the
// default 1 MiB); the rest is the file.
#include <cstdint>
#include <cstdio>
#include <string>

#include "ps_worker/data/criteo_tsv_reader.h"
#include "ps_worker/data/csv_reader.h"
#include "ps_worker/data/input_file.h"
#include "ps_worker/data/libsvm_reader.h"
#include "ps_worker/data/tfrecord_reader.h"
#include "tests/fuzz/scratch_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string& path = psrt::fuzz::ScratchFilePath("record_fuzz");
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return 0;
  std::fwrite(data + 1, 1, size - 1, f);
  std::fclose(f);
  const size_t buffer_bytes = (data[0] & 0x80)
                                  ? psrt::InputFile::kDefaultBufferBytes
                                  : size_t{8} << ((data[0] >> 4) & 7);
  auto file = psrt::InputFile::Open(path, buffer_bytes);
  if (!file.ok()) return 0;
  psrt::ReaderOptions options;
  options.skip_bad_records = (data[0] & 4) != 0;
  std::unique_ptr<psrt::RecordReader> reader;
  switch (data[0] % 4) {
    case 0:
      reader = psrt::NewLibsvmReader(std::move(*file), options);
      break;
    case 1:
      reader = psrt::NewTfRecordReader(std::move(*file), options);
      break;
    case 2:
      options.criteo_buckets = (data[0] & 8) ? 1000 : 0;
      reader = psrt::NewCriteoTsvReader(std::move(*file), options);
      break;
    default:
      reader = psrt::NewCsvReader(std::move(*file), options);
      break;
  }
  if (reader == nullptr) return 0;
  psrt::Example example;
  for (int i = 0; i < 100000; ++i) {
    auto more = reader->Next(&example);
    if (!more.ok() || !*more) break;
  }
  return 0;
}
