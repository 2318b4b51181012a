#include "ps_server/checkpoint/checkpoint_catalog.h"

#include <algorithm>
#include <map>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "google/protobuf/util/json_util.h"

namespace psrt {

namespace {
bool IsDigits(absl::string_view s) {
  if (s.empty() || s.size() > 19) return false;
  for (char c : s) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

absl::string_view WithoutTrailingSlashes(absl::string_view uri) {
  while (uri.size() > 1 && uri.back() == '/' && !absl::EndsWith(uri, "://")) {
    uri.remove_suffix(1);
  }
  return uri;
}

// A name a checkpoint file may have inside its directory: one component
// of letters, digits, '.', '_', '-' and '%' (ShardFileName's escapes),
// never "." or "..".
bool IsSafeFileName(absl::string_view name) {
  if (name.empty() || name.size() > 512 || name == "." || name == "..") {
    return false;
  }
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' &&
        c != '_' && c != '-' && c != '%') {
      return false;
    }
  }
  return true;
}
}  // namespace

std::string CheckpointName(int64_t global_step, absl::Time now) {
  return absl::StrFormat("ckpt-%010d-%013d", global_step,
                         absl::ToUnixMillis(now));
}

std::string JoinUri(absl::string_view root, absl::string_view name) {
  if (name.empty()) return std::string(root);
  const absl::string_view r = WithoutTrailingSlashes(root);
  return absl::StrCat(r, absl::EndsWith(r, "/") ? "" : "/", name);
}

absl::Status CheckCheckpointName(absl::string_view name) {
  std::vector<absl::string_view> parts = absl::StrSplit(name, '-');
  if (parts.size() != 3 || parts[0] != "ckpt" || !IsDigits(parts[1]) ||
      !IsDigits(parts[2])) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", absl::CHexEscape(name.substr(0, 100)),
        "' is not a checkpoint name (ckpt-<step>-<unix ms>, digits only)"));
  }
  return absl::OkStatus();
}

bool SameCheckpointRoot(absl::string_view a, absl::string_view b) {
  return WithoutTrailingSlashes(a) == WithoutTrailingSlashes(b);
}

absl::StatusOr<std::string> CheckpointNameUnder(absl::string_view root,
                                                absl::string_view uri) {
  std::string prefix = JoinUri(root, "x");  // root, separator, "x"
  prefix.pop_back();
  absl::string_view rest = uri;
  if (!absl::ConsumePrefix(&rest, prefix)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "checkpoint location '", absl::CHexEscape(uri.substr(0, 200)),
        "' is not under this PS's --checkpoint_uri '", root,
        "'; a PS writes checkpoints only there"));
  }
  if (absl::Status s = CheckCheckpointName(rest); !s.ok()) return s;
  return std::string(rest);
}

absl::Status CheckManifest(const CheckpointManifest& manifest,
                           absl::string_view described_as) {
  auto corrupt = [&](absl::string_view why) {
    return absl::DataLossError(
        absl::StrCat("checkpoint manifest ", described_as, ": ", why));
  };
  if (manifest.format_version() < 1 ||
      manifest.format_version() > kManifestFormatVersion ||
      manifest.num_ps() <= 0) {
    return corrupt(absl::StrCat(
        "format_version ", manifest.format_version(), " and num_ps ",
        manifest.num_ps(), "; expected format 1 to ", kManifestFormatVersion,
        " and at least one PS"));
  }
  if (manifest.global_step() < 0 || manifest.total_bytes() < 0) {
    return corrupt("negative global_step or total_bytes");
  }
  absl::flat_hash_set<std::string> variables;
  for (const VariableSpec& v : manifest.variables()) {
    variables.insert(v.name());
  }
  for (const CheckpointFile& f : manifest.files()) {
    if (!IsSafeFileName(f.path())) {
      return corrupt(
          absl::StrCat("file path '", absl::CHexEscape(f.path().substr(0, 100)),
                       "' is not a plain file name inside the checkpoint"));
    }
    if (!variables.contains(f.variable())) {
      return corrupt(absl::StrCat("lists file ", f.path(),
                                  " of unknown variable '", f.variable(), "'"));
    }
    if (f.bytes() < 0 || f.num_rows() < 0 || f.row_begin() < 0 ||
        f.shard() < 0 || f.ps_task() < 0 || f.ps_task() >= manifest.num_ps()) {
      return corrupt(absl::StrCat("file ", f.path(),
                                  " has a negative size, row count, row, "
                                  "shard or a PS task outside [0, num_ps)"));
    }
  }
  return absl::OkStatus();
}

namespace {
// The unix-ms part of a checkpoint name (0 if it has none).
int64_t NameMillis(absl::string_view name) {
  std::vector<absl::string_view> parts = absl::StrSplit(name, '-');
  int64_t ms = 0;
  if (parts.size() == 3) (void)absl::SimpleAtoi(parts[2], &ms);
  return ms;
}
}  // namespace

absl::StatusOr<std::vector<CheckpointListing>> ListCheckpoints(Storage& root) {
  auto objects = root.List("ckpt-");
  if (!objects.ok()) return objects.status();
  std::map<std::string, CheckpointListing> by_name;
  for (const StorageObject& o : *objects) {
    const size_t slash = o.key.find('/');
    if (slash == std::string::npos) continue;
    const std::string name = o.key.substr(0, slash);
    CheckpointListing& l = by_name[name];
    l.name = name;
    l.bytes += o.bytes;
    ++l.objects;
    if (o.key.substr(slash + 1) == kManifestName) l.complete = true;
  }
  std::vector<CheckpointListing> out;
  for (auto& [name, l] : by_name) out.push_back(l);
  std::stable_sort(out.begin(), out.end(),
                   [](const CheckpointListing& a, const CheckpointListing& b) {
                     return NameMillis(a.name) < NameMillis(b.name);
                   });
  return out;
}

absl::StatusOr<CheckpointManifest> ReadManifest(Storage& storage,
                                                absl::string_view name) {
  const std::string key =
      name.empty() ? kManifestName : absl::StrCat(name, "/", kManifestName);
  auto json = storage.Read(key);
  if (!json.ok()) {
    if (absl::IsNotFound(json.status())) {
      return absl::NotFoundError(absl::StrCat(
          storage.Describe(key),
          " does not exist: the checkpoint is incomplete (a save that did not "
          "finish) or the URI is wrong"));
    }
    return json.status();
  }
  return ParseManifest(*json, storage.Describe(key));
}

absl::StatusOr<CheckpointManifest> ParseManifest(
    absl::string_view json, absl::string_view described_as) {
  CheckpointManifest manifest;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), &manifest,
      options);
  if (!status.ok()) {
    return absl::DataLossError(
        absl::StrCat("checkpoint manifest ", described_as, " is corrupt (",
                     json.size(), " bytes): ", status.ToString()));
  }
  if (absl::Status s = CheckManifest(manifest, described_as); !s.ok()) {
    return s;
  }
  return manifest;
}

std::string ManifestJson(const CheckpointManifest& manifest) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(manifest, &json, options);
  return json;
}

absl::StatusOr<std::string> ReadLatest(Storage& root) {
  auto latest = root.Read(kLatestName);
  if (!latest.ok()) return latest.status();
  const std::string name(absl::StripAsciiWhitespace(*latest));
  if (!CheckCheckpointName(name).ok()) {
    return absl::DataLossError(absl::StrCat(root.Describe(kLatestName),
                                            " does not name a checkpoint: '",
                                            name.substr(0, 80), "'"));
  }
  return name;
}

absl::StatusOr<std::string> ResolveRestore(absl::string_view restore,
                                           absl::string_view checkpoint_uri,
                                           const StorageOpener& open_storage) {
  if (restore.empty()) return std::string();
  if (restore != "latest" && restore != "auto") return std::string(restore);
  if (checkpoint_uri.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--restore=", restore, " needs --checkpoint_uri (where to look)"));
  }
  auto root = open_storage(checkpoint_uri);
  if (!root.ok()) return root.status();
  auto latest = ReadLatest(**root);
  if (absl::IsNotFound(latest.status())) {
    if (restore == "auto") return std::string();
    return absl::NotFoundError(
        absl::StrCat("--restore=latest: no checkpoint under ", checkpoint_uri,
                     " (", latest.status().message(), ")"));
  }
  if (!latest.ok()) return latest.status();
  return JoinUri(checkpoint_uri, *latest);
}

absl::StatusOr<CheckpointManifest> BuildManifest(
    const std::string& uri, const std::string& name, absl::Time start,
    const std::vector<absl::StatusOr<SaveShardsResponse>>& saved,
    const std::vector<const LocalVariable*>& variables,
    const std::vector<std::string>& ps_addresses) {
  CheckpointManifest manifest;
  const int n = static_cast<int>(saved.size());
  for (int t = 0; t < n; ++t) {
    if (!saved[t].ok()) {
      return absl::Status(
          saved[t].status().code(),
          absl::StrCat("checkpoint ", uri, " failed: PS ", t, " (",
                       ps_addresses[t], "): ", saved[t].status().message()));
    }
    manifest.set_global_step(
        std::max(manifest.global_step(), saved[t]->global_step()));
    for (const CheckpointFile& f : saved[t]->files()) {
      *manifest.add_files() = f;
      manifest.set_total_bytes(manifest.total_bytes() + f.bytes());
    }
  }
  // Every shard of every variable must be in it: a PS that restarted and
  // has not been given its variables again would otherwise make a
  // "complete" checkpoint without them.
  absl::flat_hash_set<std::pair<std::string, int>> files;
  for (const CheckpointFile& f : manifest.files()) {
    files.insert({f.variable(), f.shard()});
  }
  for (const LocalVariable* v : variables) {
    for (int s = 0; s < v->layout->num_shards(); ++s) {
      if (!files.contains({v->name(), s})) {
        const int ps = v->layout->shards[s].ps_task;
        return absl::FailedPreconditionError(absl::StrCat(
            "checkpoint ", uri, " failed: PS ", ps, " (", ps_addresses[ps],
            ") holds no shard ", s, " of '", v->name(),
            "' (restarted, and no worker has re-created its variables yet?)"));
      }
    }
  }
  manifest.set_format_version(kManifestFormatVersion);
  manifest.set_name(name);
  manifest.set_created(
      absl::FormatTime(absl::RFC3339_sec, start, absl::UTCTimeZone()));
  manifest.set_num_ps(n);
  for (const LocalVariable* v : variables) {
    *manifest.add_variables() = v->layout->spec;
  }
  manifest.set_save_seconds(absl::ToDoubleSeconds(absl::Now() - start));
  return manifest;
}

}  // namespace psrt
