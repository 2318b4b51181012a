#include "ps_server/checkpoint/checkpoint_catalog.h"

#include <algorithm>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "google/protobuf/util/json_util.h"

namespace psrt {

std::string CheckpointName(int64_t global_step, absl::Time now) {
  return absl::StrFormat("ckpt-%010d-%013d", global_step,
                         absl::ToUnixMillis(now));
}

std::string JoinUri(absl::string_view root, absl::string_view name) {
  if (name.empty()) return std::string(root);
  absl::string_view r = root;
  while (r.size() > 1 && r.back() == '/' && !absl::EndsWith(r, "://")) {
    r.remove_suffix(1);
  }
  return absl::StrCat(r, absl::EndsWith(r, "/") ? "" : "/", name);
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
  CheckpointManifest manifest;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  auto status =
      google::protobuf::util::JsonStringToMessage(*json, &manifest, options);
  if (!status.ok()) {
    return absl::DataLossError(absl::StrCat(
        "checkpoint manifest ", storage.Describe(key), " is corrupt (",
        json->size(), " bytes): ", status.ToString()));
  }
  if (manifest.format_version() != 1 || manifest.num_ps() <= 0) {
    return absl::DataLossError(absl::StrCat(
        "checkpoint manifest ", storage.Describe(key), " has format_version ",
        manifest.format_version(), " and num_ps ", manifest.num_ps(),
        "; expected format 1 and at least one PS"));
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
  if (!absl::StartsWith(name, "ckpt-") || absl::StrContains(name, "/")) {
    return absl::DataLossError(absl::StrCat(root.Describe(kLatestName),
                                            " does not name a checkpoint: '",
                                            name.substr(0, 80), "'"));
  }
  return name;
}

absl::StatusOr<std::string> ResolveRestore(absl::string_view restore,
                                           absl::string_view checkpoint_uri,
                                           const S3Options& s3) {
  if (restore.empty()) return std::string();
  if (restore != "latest" && restore != "auto") return std::string(restore);
  if (checkpoint_uri.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--restore=", restore, " needs --checkpoint_uri (where to look)"));
  }
  auto root = OpenStorage(checkpoint_uri, s3);
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

}  // namespace psrt
