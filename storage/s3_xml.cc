#include "storage/s3_xml.h"

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace psrt {
namespace {

std::string XmlUnescape(absl::string_view s) {
  return absl::StrReplaceAll(s, {{"&lt;", "<"},
                                 {"&gt;", ">"},
                                 {"&quot;", "\""},
                                 {"&apos;", "'"},
                                 {"&#34;", "\""},
                                 {"&amp;", "&"}});
}

}  // namespace

std::vector<std::string> XmlAll(absl::string_view xml, absl::string_view tag) {
  std::vector<std::string> out;
  const std::string open = absl::StrCat("<", tag, ">");
  const std::string close = absl::StrCat("</", tag, ">");
  size_t pos = 0;
  while ((pos = xml.find(open, pos)) != absl::string_view::npos) {
    pos += open.size();
    const size_t end = xml.find(close, pos);
    if (end == absl::string_view::npos) break;
    out.push_back(XmlUnescape(xml.substr(pos, end - pos)));
    pos = end + close.size();
  }
  return out;
}

std::string XmlFirst(absl::string_view xml, absl::string_view tag) {
  std::vector<std::string> all = XmlAll(xml, tag);
  return all.empty() ? "" : all[0];
}

absl::Status ParseListPage(absl::string_view xml, absl::string_view full_prefix,
                           size_t strip, absl::string_view token,
                           std::vector<StorageObject>* out,
                           std::string* next_token) {
  for (const std::string& c : XmlAll(xml, "Contents")) {
    StorageObject object;
    object.key = XmlFirst(c, "Key");
    if (!absl::SimpleAtoi(XmlFirst(c, "Size"), &object.bytes) ||
        object.bytes < 0) {
      object.bytes = -1;
    }
    // Keys come back with the prefix; a listing with any other key (a
    // broken or hostile endpoint) is an error, not a crash.
    if (!absl::StartsWith(object.key, full_prefix) ||
        object.key.size() < strip) {
      return absl::DataLossError(absl::StrCat(
          "S3 LIST of '", full_prefix, "' returned key '",
          absl::CHexEscape(absl::string_view(object.key).substr(0, 200)),
          "' outside that prefix"));
    }
    object.key.erase(0, strip);
    out->push_back(std::move(object));
  }
  *next_token = XmlFirst(xml, "IsTruncated") == "true"
                    ? XmlFirst(xml, "NextContinuationToken")
                    : "";
  if (!next_token->empty() && *next_token == token) {
    return absl::DataLossError(
        absl::StrCat("S3 LIST of '", full_prefix,
                     "' answered the same continuation token again; stopping"));
  }
  return absl::OkStatus();
}

}  // namespace psrt
