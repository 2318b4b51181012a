// Reading S3's XML answers: the few elements psrt needs, found by tag (no
// namespaces, no attributes), and one ListObjectsV2 page. Every byte comes
// from the network: nothing here trusts sizes or keys.
#ifndef PSRT_STORAGE_S3_XML_H_
#define PSRT_STORAGE_S3_XML_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "storage/storage.h"

namespace psrt {

// Text of every <tag>...</tag> in xml, in order, XML entities decoded.
std::vector<std::string> XmlAll(absl::string_view xml, absl::string_view tag);
// The first of them, or "".
std::string XmlFirst(absl::string_view xml, absl::string_view tag);

// One ListObjectsV2 page: appends its objects to *out with `strip` leading
// bytes of each key removed (the storage's own prefix and '/'), and sets
// *next_token ("" on the last page). DATA_LOSS naming the key when one does
// not start with `full_prefix` (what was asked for), or a truncated page
// repeats `token` (the page just requested: it would loop forever).
absl::Status ParseListPage(absl::string_view xml, absl::string_view full_prefix,
                           size_t strip, absl::string_view token,
                           std::vector<StorageObject>* out,
                           std::string* next_token);

}  // namespace psrt

#endif  // PSRT_STORAGE_S3_XML_H_
