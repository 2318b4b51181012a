// Which PS an error came from, carried on the absl::Status itself (as a
// payload) so that callers — the Python binding's PsError.ps among them —
// need not parse messages. The client sets it on every error a PS returns.
#ifndef PSRT_CLIENTS_CPP_PS_TASK_STATUS_H_
#define PSRT_CLIENTS_CPP_PS_TASK_STATUS_H_

#include <optional>
#include <string>

#include "absl/status/status.h"

namespace psrt {

// `s` naming PS task `ps_task` (nothing for an OK status).
absl::Status WithPsTask(absl::Status s, int ps_task);

// The PS task `s` names, if any.
std::optional<int> PsTaskOf(const absl::Status& s);

// `s` with its code and payloads and another message.
absl::Status WithMessage(const absl::Status& s, std::string message);

}  // namespace psrt

#endif  // PSRT_CLIENTS_CPP_PS_TASK_STATUS_H_
