#include "ps_server/rpc/request_item.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "util/finite.h"
#include "util/wire_dtype.h"

namespace psrt {
namespace {

std::string Where(RequestKind kind, const TensorItem& item) {
  return absl::StrCat(kind == RequestKind::kPull ? "pull of '" : "push to '",
                      item.variable(), "' shard ", item.shard(), ": ");
}

// True if every id routes to `shard`. Written as branch-free reductions so
// that the common routings vectorize (no division for DIV).
bool IdsBelongToShard(const VariableLayout& layout, int shard,
                      const std::vector<int64_t>& ids) {
  const size_t n = ids.size();
  const int64_t* v = ids.data();
  switch (layout.routing()) {
    case PartitionSpec::DIV: {
      const uint64_t begin =
          static_cast<uint64_t>(layout.shards[shard].row_begin);
      const uint64_t count =
          static_cast<uint64_t>(layout.shards[shard].num_rows);
      uint64_t outside = 0;
      for (size_t i = 0; i < n; ++i) {
        outside |= static_cast<uint64_t>(v[i]) - begin >= count;
      }
      return outside == 0;
    }
    case PartitionSpec::MOD: {
      const int64_t shards = layout.num_shards();
      const uint64_t rows = static_cast<uint64_t>(layout.rows);
      uint64_t bad = 0;
      for (size_t i = 0; i < n; ++i) {
        bad |= (static_cast<uint64_t>(v[i]) >= rows) | (v[i] % shards != shard);
      }
      return bad == 0;
    }
    default: {
      const uint64_t shards = static_cast<uint64_t>(layout.num_shards());
      uint64_t bad = 0;
      for (size_t i = 0; i < n; ++i)
        bad |= MixId(v[i]) % shards != static_cast<uint64_t>(shard);
      return bad == 0;
    }
  }
}

}  // namespace

size_t FirstNonFiniteMaxAbs(const PayloadView& values, float* max_abs) {
  const size_t n = values.size() / sizeof(float);
  size_t bad = n;
  *max_abs = 0;
  // Read where gRPC put the bytes (often not float-aligned): an aligned
  // copy first cost more than the check (perf: memmove 13% of a PS's
  // cycles under dense pushes).
  ForEachFloatBytes(values, [&](const char* bytes, size_t count, size_t first) {
    if (bad < n) return;
    float top = 0;
    const size_t i = FirstNonFiniteMaxAbsBytes(bytes, count, &top);
    if (i < count) {
      bad = first + i;
    } else {
      *max_abs = std::max(*max_abs, top);
    }
  });
  return bad;
}

namespace {

// The variable and shard the item names, which must live on this PS.
absl::Status ResolveTarget(const ShardStore& store, const TensorItem& item,
                           RequestKind kind, ResolvedItem* out) {
  const LocalVariable* v = store.Find(item.variable());
  if (v == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        kind == RequestKind::kPull ? "pull of" : "push to",
        " unknown variable '", item.variable(), "' (PS ", store.ps_task(),
        " knows ", store.Variables().size(), " variables; create it first)"));
  }
  const VariableLayout& layout = *v->layout;
  if (item.shard() < 0 || item.shard() >= layout.num_shards()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(kind, item), "no such shard; the variable has ",
                     layout.num_shards(), " shards"));
  }
  if (kind == RequestKind::kReplica && !v->IsBackup(item.shard())) {
    return absl::FailedPreconditionError(
        absl::StrCat(Where(kind, item), "PS ", store.ps_task(),
                     " keeps no backup copy of it (its primary is PS ",
                     layout.shards[item.shard()].ps_task, ")"));
  }
  if (kind != RequestKind::kReplica && v->IsBackup(item.shard())) {
    // Retryable: the shard moved (a failover, or its primary took it back)
    // and the client has not learned it yet.
    return absl::UnavailableError(absl::StrCat(
        Where(kind, item), "PS ", store.ps_task(),
        " keeps only a backup copy of it (placed on PS ",
        layout.shards[item.shard()].ps_task,
        "; served by that PS or, after a failover, its first live backup): "
        "learn the routing and retry"));
  }
  if (kind != RequestKind::kReplica && !v->IsPrimary(item.shard())) {
    return absl::FailedPreconditionError(absl::StrCat(
        Where(kind, item), "the shard lives on PS ",
        layout.shards[item.shard()].ps_task, ", not on PS ", store.ps_task(),
        "; the client's shard map disagrees with the cluster's"));
  }
  out->variable = v;
  out->shard = item.shard();
  return absl::OkStatus();
}

// A range of a dense shard's floats: inside the shard.
absl::Status ResolveRange(const TensorItem& item, RequestKind kind,
                          ResolvedItem* out) {
  const VariableLayout& layout = *out->variable->layout;
  if (item.has_ids_payload()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(kind, item),
                     "a DENSE variable is addressed by offset/count, not ids"));
  }
  const int64_t size = layout.shards[item.shard()].num_rows * layout.row_width;
  if (item.offset() < 0 || item.count() <= 0 ||
      item.offset() > size - item.count()) {
    return absl::OutOfRangeError(
        absl::StrCat(Where(kind, item), "range [", item.offset(), ", ",
                     item.offset() + item.count(),
                     ") is not inside the shard's ", size, " floats"));
  }
  out->offset = item.offset();
  out->count = item.count();
  return absl::OkStatus();
}

// Rows by id: a whole payload of int64 ids, each routed to this shard (and
// inside the vocabulary of an EMBEDDING).
absl::Status ResolveIds(const TensorItem& item, const FrameReader& frame,
                        RequestKind kind, ResolvedItem* out) {
  const VariableLayout& layout = *out->variable->layout;
  if (!item.has_ids_payload() || item.ids_payload() < 0 ||
      item.ids_payload() >= frame.num_payloads()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(kind, item), "ids_payload ",
                     item.has_ids_payload() ? absl::StrCat(item.ids_payload())
                                            : std::string("(unset)"),
                     " does not name one of the message's ",
                     frame.num_payloads(), " payloads"));
  }
  const PayloadView ids = frame.payload(item.ids_payload());
  if (ids.size() % sizeof(int64_t) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(kind, item), "ids payload has ", ids.size(),
                     " bytes, not a multiple of 8 (int64 ids)"));
  }
  out->ids.resize(ids.size() / sizeof(int64_t));
  ids.CopyTo(out->ids.data());
  if (IdsBelongToShard(layout, item.shard(), out->ids)) {
    return absl::OkStatus();
  }
  // Find the first offender only now, for the message.
  for (int64_t id : out->ids) {
    if (layout.kind() == EMBEDDING && (id < 0 || id >= layout.rows)) {
      return absl::OutOfRangeError(
          absl::StrCat(Where(kind, item), "id ", id,
                       " is outside the vocabulary [0, ", layout.rows, ")"));
    }
    const int owner = layout.ShardOf(id);
    if (owner != item.shard()) {
      return absl::InvalidArgumentError(absl::StrCat(
          Where(kind, item), "id ", id, " belongs to shard ", owner, " (",
          PartitionSpec::Routing_Name(layout.routing()), " routing over ",
          layout.num_shards(), " shards), not ", item.shard()));
    }
  }
  return absl::OkStatus();
}

// A push's gradient: a payload of exactly the addressed values (float32,
// or 16-bit as the item says), all finite, and a valid learning-rate
// override.
absl::Status ResolveGradient(const TensorItem& item, const FrameReader& frame,
                             RequestKind kind, ResolvedItem* out) {
  const VariableLayout& layout = *out->variable->layout;
  if (!item.has_grad_payload() || item.grad_payload() < 0 ||
      item.grad_payload() >= frame.num_payloads()) {
    return absl::InvalidArgumentError(absl::StrCat(
        Where(kind, item), "grad_payload does not name one of the message's ",
        frame.num_payloads(), " payloads"));
  }
  out->grad = frame.payload(item.grad_payload());
  const int64_t rows = static_cast<int64_t>(out->ids.size());
  const int64_t width = layout.row_width;
  int64_t expected = item.count();
  if (!out->by_range && __builtin_mul_overflow(rows, width, &expected)) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(kind, item), rows, " ids x ", width,
                     " per row overflows 64 bits"));
  }
  const size_t value_bytes = WireValueBytes(out->dtype);
  if (out->grad.size() % value_bytes != 0 ||
      static_cast<int64_t>(out->grad.size() / value_bytes) != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        Where(kind, item), "grad has ", out->grad.size() / value_bytes,
        out->dtype == FLOAT32
            ? std::string(" floats")
            : absl::StrCat(" ", WireDtype_Name(out->dtype), " values"),
        out->grad.size() % value_bytes ? " (and a partial one)" : "",
        ", expected ", expected,
        out->by_range
            ? " (the range's size)"
            : absl::StrCat(" (", rows, " ids x ", width, " per row)")));
  }
  // Widened once here: the finite check and the update read float32.
  if (out->dtype != FLOAT32) {
    WidenValues(out->dtype, &out->grad, &out->decoded_grad);
  }
  const size_t bad_index = FirstNonFiniteMaxAbs(out->grad, &out->max_abs_grad);
  if (bad_index < out->grad.size() / sizeof(float)) {
    float bad_value = 0;
    ForEachFloatRun(out->grad, [&](const float* v, size_t n, size_t first) {
      if (bad_index >= first && bad_index < first + n) {
        bad_value = v[bad_index - first];
      }
    });
    absl::Status s = absl::InvalidArgumentError(absl::StrCat(
        Where(kind, item), "gradient element ", bad_index, " is ", bad_value,
        "; the push was rejected and nothing was applied"));
    s.SetPayload(kNonFiniteGradient, absl::Cord());
    return s;
  }
  out->learning_rate = item.learning_rate() > 0
                           ? item.learning_rate()
                           : layout.spec.optimizer().learning_rate();
  if (!std::isfinite(item.learning_rate()) || item.learning_rate() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        Where(kind, item), "learning_rate override ", item.learning_rate(),
        " must be finite and >= 0 (0 = the variable's own)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ResolveItem(const ShardStore& store, const TensorItem& item,
                         const FrameReader& frame, RequestKind kind,
                         ResolvedItem* out) {
  if (absl::Status s = ResolveTarget(store, item, kind, out); !s.ok()) {
    return s;
  }
  if (!WireDtype_IsValid(item.dtype())) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(kind, item), "dtype ", item.dtype(),
                     " is not a WireDtype (0 FLOAT32, 1 BFLOAT16, 2 FLOAT16)"));
  }
  out->dtype = item.dtype();
  // The variable's kind fixes how the wire addresses it: a range of a
  // dense shard's floats, or rows by id.
  out->by_range = out->variable->layout->kind() == DENSE;
  if (item.assign() && (kind == RequestKind::kPull || !out->by_range)) {
    return absl::InvalidArgumentError(absl::StrCat(
        Where(kind, item),
        "assign: values replace a dense variable's in a "
        "push; this is ",
        kind == RequestKind::kPull
            ? std::string("a pull")
            : absl::StrCat("a ",
                           VariableKind_Name(out->variable->layout->kind()))));
  }
  out->assign = item.assign();
  absl::Status addressed = out->by_range ? ResolveRange(item, kind, out)
                                         : ResolveIds(item, frame, kind, out);
  if (!addressed.ok() || kind == RequestKind::kPull) return addressed;
  return ResolveGradient(item, frame, kind, out);
}

}  // namespace psrt
