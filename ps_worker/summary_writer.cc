#include "ps_worker/summary_writer.h"

#include <unistd.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/tf_event.pb.h"

namespace psrt {
namespace {

double WallTime() { return absl::ToUnixMicros(absl::Now()) / 1e6; }

}  // namespace

absl::StatusOr<std::unique_ptr<SummaryWriter>> SummaryWriter::Open(
    const std::string& dir, int worker) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--summary_dir=", dir, ": cannot create it: ", error.message()));
  }
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  const std::string path =
      absl::StrCat(dir, "/events.out.tfevents.",
                   absl::ToUnixSeconds(absl::Now()), ".", host, ".", worker);
  auto file = TfRecordWriter::Open(path, /*gzip=*/false);
  if (!file.ok()) return file.status();
  std::unique_ptr<SummaryWriter> writer(
      new SummaryWriter(path, *std::move(file)));
  tf::Event version;
  version.set_wall_time(WallTime());
  version.set_file_version("brain.Event:2");
  if (absl::Status s = writer->file_->WriteRecord(version.SerializeAsString());
      !s.ok()) {
    return s;
  }
  return writer;
}

absl::Status SummaryWriter::Scalars(
    int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  tf::Event event;
  event.set_wall_time(WallTime());
  event.set_step(step);
  for (const auto& [tag, value] : values) {
    tf::SummaryValue* v = event.mutable_summary()->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  if (absl::Status s = file_->WriteRecord(event.SerializeAsString()); !s.ok()) {
    return s;
  }
  return file_->Flush();
}

absl::Status SummaryWriter::Close() { return file_->Close(); }

}  // namespace psrt
