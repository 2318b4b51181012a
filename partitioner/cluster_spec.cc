#include "partitioner/cluster_spec.h"

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace psrt {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

absl::Status Invalid(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("cluster spec: ", what));
}

absl::Status ReadAddresses(const Struct& cluster, const std::string& job,
                           std::vector<std::string>* out) {
  auto it = cluster.fields().find(job);
  if (it == cluster.fields().end()) return absl::OkStatus();
  const Value& v = it->second;
  if (v.kind_case() != Value::kListValue) {
    return Invalid(absl::StrCat("cluster.", job,
                                " must be a list of \"host:port\" strings"));
  }
  for (int i = 0; i < v.list_value().values_size(); ++i) {
    const Value& a = v.list_value().values(i);
    if (a.kind_case() != Value::kStringValue) {
      return Invalid(
          absl::StrCat("cluster.", job, "[", i, "] is not a string"));
    }
    std::string host;
    int port;
    absl::Status s = SplitHostPort(a.string_value(), &host, &port);
    if (!s.ok()) {
      return Invalid(absl::StrCat("cluster.", job, "[", i, "]: ", s.message()));
    }
    out->push_back(a.string_value());
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SplitHostPort(const std::string& address, std::string* host,
                           int* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("address '", address, "' is not host:port"));
  }
  *host = address.substr(0, colon);
  if (host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  if (!absl::SimpleAtoi(address.substr(colon + 1), port) || *port < 1 ||
      *port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("address '", address, "' has no valid port (1-65535)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ClusterSpec> ParseClusterSpec(const std::string& json) {
  Struct root;
  auto parsed = google::protobuf::util::JsonStringToMessage(json, &root);
  if (!parsed.ok()) {
    return Invalid(absl::StrCat("not valid JSON (",
                                parsed.message().as_string(),
                                "): ", json.substr(0, 200)));
  }
  auto cluster_it = root.fields().find("cluster");
  if (cluster_it == root.fields().end() ||
      cluster_it->second.kind_case() != Value::kStructValue) {
    return Invalid("missing the \"cluster\" object");
  }
  const Struct& cluster = cluster_it->second.struct_value();
  for (const auto& [job, unused] : cluster.fields()) {
    if (job != "ps" && job != "worker" && job != "chief" && job != "master" &&
        job != "evaluator") {
      return Invalid(
          absl::StrCat("unknown job \"", job,
                       "\" (expected ps, worker, chief or master, evaluator)"));
    }
  }
  // TF 1.x (and SageMaker's TensorFlow toolkit, which also adds
  // "environment": "cloud") names the chief "master"; TensorFlow treats the
  // two alike, and so does psrt.
  const bool has_master = cluster.fields().contains("master");
  if (has_master && cluster.fields().contains("chief")) {
    return Invalid("both cluster.chief and cluster.master: list one chief");
  }
  const std::string chief_job = has_master ? "master" : "chief";
  ClusterSpec spec;
  std::vector<std::string> chief;
  if (auto s = ReadAddresses(cluster, "ps", &spec.ps); !s.ok()) return s;
  if (auto s = ReadAddresses(cluster, chief_job, &chief); !s.ok()) return s;
  if (auto s = ReadAddresses(cluster, "worker", &spec.workers); !s.ok()) {
    return s;
  }
  if (chief.size() > 1) {
    return Invalid(absl::StrCat("at most one ", chief_job));
  }
  if (has_master) {
    spec.notes.push_back(
        "cluster.master is taken as the chief (TensorFlow 1.x's name for "
        "it): worker 0");
  }
  spec.workers.insert(spec.workers.begin(), chief.begin(), chief.end());
  if (spec.ps.empty()) return Invalid("cluster.ps must list at least one PS");
  std::set<std::string> seen;
  for (const auto& list : {spec.ps, spec.workers}) {
    for (const auto& a : list) {
      if (!seen.insert(a).second) {
        return Invalid(absl::StrCat("address ", a, " appears twice"));
      }
    }
  }

  auto task_it = root.fields().find("task");
  if (task_it != root.fields().end()) {
    if (task_it->second.kind_case() != Value::kStructValue) {
      return Invalid(
          "\"task\" must be an object {\"type\": ..., \"index\": ...}");
    }
    const auto& task = task_it->second.struct_value().fields();
    auto type = task.find("type");
    if (type == task.end() || type->second.kind_case() != Value::kStringValue) {
      return Invalid("task.type must be a string");
    }
    int index = 0;
    auto idx = task.find("index");
    if (idx != task.end()) {
      if (idx->second.kind_case() != Value::kNumberValue ||
          idx->second.number_value() !=
              static_cast<int>(idx->second.number_value())) {
        return Invalid("task.index must be an integer");
      }
      index = static_cast<int>(idx->second.number_value());
    }
    std::string t = type->second.string_value();
    if (t == "master") t = "chief";
    if (t == "chief") {
      if (index != 0) return Invalid("task.index of the chief must be 0");
    } else if (t == "worker") {
      index += static_cast<int>(chief.size());
    } else if (t != "ps" && t != "evaluator") {
      return Invalid(
          absl::StrCat("task.type \"", t,
                       "\" is not ps, worker, chief (or master) or evaluator"));
    }
    if (t == "chief") t = "worker";
    const int count = t == "ps" ? spec.num_ps() : spec.num_workers();
    if (t != "evaluator" && (index < 0 || index >= count)) {
      return Invalid(absl::StrCat("task ", type->second.string_value(), ":",
                                  index, " is outside the cluster (", count,
                                  " ", t, " tasks)"));
    }
    spec.task = {t, index};
    spec.has_task = true;
  }
  return spec;
}

absl::StatusOr<ClusterSpec> LoadClusterSpec(const std::string& flag_value,
                                            int default_ps_port) {
  if (!flag_value.empty()) {
    if (flag_value.front() == '{') return ParseClusterSpec(flag_value);
    std::ifstream in(flag_value);
    if (!in) {
      return absl::NotFoundError(absl::StrCat(
          "--cluster: cannot open file '", flag_value,
          "' (pass inline JSON starting with '{' or a readable file)"));
    }
    std::stringstream contents;
    contents << in.rdbuf();
    auto spec = ParseClusterSpec(contents.str());
    if (!spec.ok()) {
      return absl::Status(
          spec.status().code(),
          absl::StrCat(flag_value, ": ", spec.status().message()));
    }
    return spec;
  }
  if (const char* env = std::getenv("TF_CONFIG"); env != nullptr && *env) {
    auto spec = ParseClusterSpec(env);
    if (!spec.ok()) {
      return absl::Status(spec.status().code(),
                          absl::StrCat("TF_CONFIG: ", spec.status().message()));
    }
    return spec;
  }
  ClusterSpec local;
  local.ps = {absl::StrCat("localhost:", default_ps_port)};
  local.workers = {absl::StrCat("localhost:", default_ps_port - 1)};
  return local;
}

std::string ClusterSpecToJson(const ClusterSpec& cluster) {
  auto quoted = [](const std::vector<std::string>& v) {
    std::vector<std::string> q;
    for (const auto& a : v) q.push_back(absl::StrCat("\"", a, "\""));
    return absl::StrCat("[", absl::StrJoin(q, ", "), "]");
  };
  std::string json =
      absl::StrCat("{\"cluster\": {\"ps\": ", quoted(cluster.ps),
                   ", \"worker\": ", quoted(cluster.workers), "}");
  if (cluster.has_task) {
    absl::StrAppend(&json, ", \"task\": {\"type\": \"", cluster.task.type,
                    "\", \"index\": ", cluster.task.index, "}");
  }
  return json + "}";
}

}  // namespace psrt
