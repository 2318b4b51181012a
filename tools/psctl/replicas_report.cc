#include "tools/psctl/replicas_report.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "clients/cpp/client.h"

namespace psrt {
namespace {

struct Copy {
  int ps = 0;
  bool backup = false;
  int64_t version = 0;
  uint64_t digest = 0;
  std::string role;  // ShardInfo.role (older servers: primary or backup)
};

struct ShardRow {
  int variable = 0;  // catalog position
  int shard = 0;
  int primary = 0;
  std::vector<Copy> copies;
};

}  // namespace

int ReplicasReport(const ClientOptions& options, std::ostream& out) {
  const int n = static_cast<int>(options.ps_addresses.size());
  int replicas = 0;
  std::vector<bool> answered(n, false);
  // "variable/shard" in catalog order -> copies.
  std::vector<std::string> order;
  std::map<std::string, ShardRow> shards;
  for (int ps = 0; ps < n; ++ps) {
    ClientOptions one = options;
    one.ps_addresses = {options.ps_addresses[ps]};
    auto client = Client::Connect(one);
    if (!client.ok()) return 2;
    auto stats = (*client)->Stats();
    ListVariablesRequest request;
    request.set_with_digests(true);
    auto lists = stats.ok()
                     ? (*client)->ListVariables(request)
                     : decltype((*client)->ListVariables())(stats.status());
    if (!stats.ok() || !lists.ok()) {
      out << absl::StrFormat(
          "PS %-3d %-22s does not answer: %s\n", ps, options.ps_addresses[ps],
          (stats.ok() ? lists.status() : stats.status()).ToString());
      continue;
    }
    answered[ps] = true;
    const StatsResponse& s = (*stats)[0];
    replicas = std::max(replicas, s.replicas());
    // Terms (odd: failed over; even and > 0: handed back since).
    std::vector<std::string> handed_back;
    for (const auto& [task, term] : s.ps_terms()) {
      if (term > 0 && term % 2 == 0) {
        handed_back.push_back(absl::StrFormat("%d (term %d)", task, term));
      }
    }
    std::sort(handed_back.begin(), handed_back.end());
    out << absl::StrFormat(
        "PS %-3d %-22s replicas %d, failovers it knows of: %s%s\n", ps,
        options.ps_addresses[ps], s.replicas(),
        s.failed_ps().empty() ? "none" : absl::StrJoin(s.failed_ps(), ", "),
        handed_back.empty() ? ""
                            : absl::StrCat("; handed back since: ",
                                           absl::StrJoin(handed_back, ", ")));
    const auto& variables = (*lists)[0].variables();
    for (int index = 0; index < variables.size(); ++index) {
      const VariableInfo& v = variables[index];
      for (const ShardInfo& info : v.shards()) {
        const std::string key =
            absl::StrFormat("%s/%d", v.spec().name(), info.shard());
        auto [it, inserted] = shards.try_emplace(key);
        if (inserted) order.push_back(key);
        it->second.variable = index;
        it->second.shard = info.shard();
        it->second.primary = info.ps_task();
        it->second.copies.push_back(
            {ps, info.backup(), info.version(), info.digest(),
             info.role().empty() ? (info.backup() ? "backup" : "primary")
                                 : info.role()});
      }
    }
  }
  std::sort(order.begin(), order.end(),
            [&](const std::string& a, const std::string& b) {
              const ShardRow& x = shards[a];
              const ShardRow& y = shards[b];
              return std::make_pair(x.variable, x.shard) <
                     std::make_pair(y.variable, y.shard);
            });
  int problems = 0;
  for (int ps = 0; ps < n; ++ps) problems += !answered[ps];
  out << absl::StrFormat("%-24s %7s %7s  %s\n", "shard", "placed", "serving",
                         "copies (PS role version digest)");
  for (const std::string& key : order) {
    const ShardRow& row = shards[key];
    const Copy* serving = nullptr;
    for (const Copy& c : row.copies) {
      if (!c.backup) serving = &c;
    }
    std::string copies;
    for (const Copy& c : row.copies) {
      absl::StrAppendFormat(&copies, "%d %-7s v%d %016x  ", c.ps, c.role,
                            c.version, c.digest);
    }
    std::string verdict;
    if (serving == nullptr) {
      verdict = "NO PRIMARY";
    } else {
      int64_t lag = 0;
      bool differ = false;
      for (const Copy& c : row.copies) {
        lag = std::max(lag, serving->version - c.version);
        // A copy at the primary's version must hold its bits; one past it
        // applied something the primary did not (never right).
        differ |=
            (c.version == serving->version && c.digest != serving->digest) ||
            c.version > serving->version;
      }
      if (differ) {
        verdict = "COPIES DIFFER";
      } else if (static_cast<int>(row.copies.size()) < std::max(1, replicas)) {
        verdict = absl::StrFormat("%d of %d copies", row.copies.size(),
                                  std::max(1, replicas));
      } else if (lag > 0) {
        verdict = absl::StrFormat("backup lag %d", lag);
      } else {
        verdict = "in sync";
      }
    }
    problems += verdict != "in sync";
    out << absl::StrFormat("%-24s %7d %7s  %s%s\n", key, row.primary,
                           serving == nullptr
                               ? std::string("-")
                               : absl::StrFormat("%d", serving->ps),
                           copies, verdict);
  }
  if (order.empty()) out << "no variables\n";
  return problems == 0 ? 0 : 1;
}

}  // namespace psrt
