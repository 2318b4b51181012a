// The cluster description every psrt process reads: TF_CONFIG-style JSON.
//
//   {"cluster": {"ps": ["host1:2223", "host2:2223"],
//                "worker": ["host1:2222", "host2:2222"]},
//    "task": {"type": "ps", "index": 0}}
//
// A "chief" job, as TensorFlow writes it, counts as worker 0 (the chief) and
// shifts the "worker" entries up by one; "evaluator" tasks are ignored.
#ifndef PSRT_PARTITIONER_CLUSTER_SPEC_H_
#define PSRT_PARTITIONER_CLUSTER_SPEC_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace psrt {

struct TaskSpec {
  std::string type;  // "ps" or "worker" ("chief" becomes worker 0)
  int index = 0;
};

struct ClusterSpec {
  std::vector<std::string> ps;       // host:port of each PS task
  std::vector<std::string> workers;  // host:port of each worker; [0] is chief
  TaskSpec task;                     // this process; empty type if absent
  bool has_task = false;
  // What the parser read differently from how it was written, for the log
  // (e.g. a "master" job taken as the chief).
  std::vector<std::string> notes;

  int num_ps() const { return static_cast<int>(ps.size()); }
  int num_workers() const { return static_cast<int>(workers.size()); }
};

// Parses TF_CONFIG-style JSON. Errors name the offending field.
absl::StatusOr<ClusterSpec> ParseClusterSpec(const std::string& json);

// Resolves where the cluster comes from, in order: `flag_value` (inline JSON
// if it starts with '{', else a file path), the TF_CONFIG environment
// variable, and finally a one-PS cluster on localhost:`default_ps_port` with
// one worker on localhost:`default_ps_port - 1`.
absl::StatusOr<ClusterSpec> LoadClusterSpec(const std::string& flag_value,
                                            int default_ps_port);

// Splits "host:port" (or "[v6]:port"); port must be 1..65535.
absl::Status SplitHostPort(const std::string& address, std::string* host,
                           int* port);

// The JSON form of a cluster, for TF_CONFIG of child processes.
std::string ClusterSpecToJson(const ClusterSpec& cluster);

}  // namespace psrt

#endif  // PSRT_PARTITIONER_CLUSTER_SPEC_H_
