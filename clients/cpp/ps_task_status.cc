#include "clients/cpp/ps_task_status.h"

#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"

namespace psrt {
namespace {

constexpr char kPsTaskPayload[] = "type.psrt.dev/ps_task";

}  // namespace

absl::Status WithPsTask(absl::Status s, int ps_task) {
  if (!s.ok())
    s.SetPayload(kPsTaskPayload, absl::Cord(std::to_string(ps_task)));
  return s;
}

std::optional<int> PsTaskOf(const absl::Status& s) {
  const auto payload = s.GetPayload(kPsTaskPayload);
  int ps_task = 0;
  if (!payload.has_value() ||
      !absl::SimpleAtoi(std::string(*payload), &ps_task)) {
    return std::nullopt;
  }
  return ps_task;
}

absl::Status WithMessage(const absl::Status& s, std::string message) {
  absl::Status out(s.code(), std::move(message));
  s.ForEachPayload([&out](absl::string_view url, const absl::Cord& payload) {
    out.SetPayload(url, payload);
  });
  return out;
}

}  // namespace psrt
