#include "ps_server/shards/row_shard.h"

#include "absl/strings/str_cat.h"

namespace psrt {

absl::Status NonFiniteRowError(int64_t id, int64_t column, float value,
                               float old) {
  return absl::InvalidArgumentError(absl::StrCat(
      "the update would make the row of id ", id, " ", value, " at float ",
      column, " of its values and slots (from ", old, ")"));
}

}  // namespace psrt
