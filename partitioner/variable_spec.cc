#include "partitioner/variable_spec.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace psrt {
namespace {

constexpr size_t kMaxNameLength = 256;
// 4 MiB of float32 per row (16 MiB with Adam's two slots).
constexpr int64_t kMaxRowWidth = int64_t{1} << 20;

absl::Status Invalid(const VariableSpec& spec, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("variable '", spec.name(), "': ", what));
}

bool Finite(float v) { return std::isfinite(v); }

}  // namespace

int NumOptimizerSlots(OptimizerSpec::Kind kind) {
  switch (kind) {
    case OptimizerSpec::SGD:
      return 0;
    case OptimizerSpec::MOMENTUM:
    case OptimizerSpec::ADAGRAD:
      return 1;
    case OptimizerSpec::ADAM:
    case OptimizerSpec::FTRL:
      return 2;
    default:
      return 0;
  }
}

int64_t NumRows(const VariableSpec& spec) {
  return spec.shape_size() == 0 ? 1 : spec.shape(0);
}

int64_t RowWidth(const VariableSpec& spec) {
  int64_t width = 1;
  for (int i = 1; i < spec.shape_size(); ++i) width *= spec.shape(i);
  return width;
}

namespace {

// AdmissionSpec: HASH_EMBEDDING only; min_count in [0, 255]; the sketch
// width 0 (default) or in [64, 1 << 28], rounded up to a power of two.
absl::Status NormalizeAdmission(VariableSpec* spec) {
  if (!spec->has_admission()) return absl::OkStatus();
  AdmissionSpec* a = spec->mutable_admission();
  if (spec->kind() != HASH_EMBEDDING) {
    return Invalid(*spec,
                   "admission applies to HASH_EMBEDDING variables only (a "
                   "known vocabulary has every row already)");
  }
  if (a->min_count() < 0 || a->min_count() > 255) {
    return Invalid(*spec, absl::StrCat("admission.min_count = ", a->min_count(),
                                       " must be in [0, 255]"));
  }
  if (a->min_count() <= 1) {  // no admission: one spelling of it
    spec->clear_admission();
    return absl::OkStatus();
  }
  constexpr int64_t kMaxWidth = int64_t{1} << 28;
  if (a->sketch_width() == 0) a->set_sketch_width(int64_t{1} << 20);
  if (a->sketch_width() < 64 || a->sketch_width() > kMaxWidth) {
    return Invalid(*spec,
                   absl::StrCat("admission.sketch_width = ", a->sketch_width(),
                                " must be in [64, 2^28] (0: 2^20)"));
  }
  int64_t width = 64;
  while (width < a->sketch_width()) width <<= 1;
  a->set_sketch_width(width);
  if (!AdmissionSpec::Unadmitted_IsValid(a->unadmitted_value())) {
    return Invalid(*spec, absl::StrCat("unknown admission.unadmitted_value ",
                                       a->unadmitted_value()));
  }
  return absl::OkStatus();
}

// StorageSpec: SSD on hash embeddings only, a path that names one
// directory (it comes from the wire: nothing outside --ssd_tier_dir).
absl::Status NormalizeStorage(VariableSpec* spec) {
  if (!spec->has_storage()) return absl::OkStatus();
  const StorageSpec& storage = spec->storage();
  if (storage.tier() != StorageSpec::MEMORY &&
      storage.tier() != StorageSpec::SSD) {
    return Invalid(*spec,
                   absl::StrCat("unknown storage.tier ", storage.tier()));
  }
  if (storage.tier() == StorageSpec::MEMORY) {
    if (!storage.path().empty()) {
      return Invalid(*spec, "storage.path applies to the SSD tier only");
    }
    spec->clear_storage();  // memory: one spelling of it
    return absl::OkStatus();
  }
  if (spec->kind() != HASH_EMBEDDING) {
    return Invalid(*spec,
                   "storage.tier = SSD applies to HASH_EMBEDDING variables "
                   "only (other variables are preallocated in memory)");
  }
  const std::string& path = storage.path();
  const bool name_ok =
      path.size() <= 128 && path != "." && path != ".." &&
      std::all_of(path.begin(), path.end(), [](char c) {
        return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' ||
               c == '_' || c == '-';
      });
  if (!name_ok) {
    return Invalid(*spec,
                   absl::StrCat("storage.path '", absl::CHexEscape(path),
                                "' must be one directory name of at most 128 "
                                "letters, digits, '.', '_' or '-' (it is "
                                "created under ps_server --ssd_tier_dir)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status NormalizeVariableSpec(VariableSpec* spec) {
  const std::string& name = spec->name();
  if (name.empty()) {
    return absl::InvalidArgumentError("variable name must not be empty");
  }
  if (name.size() > kMaxNameLength) {
    return Invalid(*spec, absl::StrCat("name longer than ", kMaxNameLength));
  }
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' ||
          c == '.' || c == '/' || c == ':')) {
      return Invalid(*spec, "name may hold only letters, digits and _ - . / :");
    }
  }
  // Shapes: every dim positive (capacity of a hash embedding may be 0), and
  // the element count must fit comfortably in 64 bits.
  double elements = 1;
  for (int i = 0; i < spec->shape_size(); ++i) {
    const bool capacity = spec->kind() == HASH_EMBEDDING && i == 0;
    if (spec->shape(i) < (capacity ? 0 : 1)) {
      return Invalid(*spec, absl::StrCat("shape[", i, "] = ", spec->shape(i),
                                         " must be positive"));
    }
    elements *= std::max<int64_t>(spec->shape(i), 1);
  }
  if (elements > 1e15) return Invalid(*spec, "more than 1e15 elements");
  // A row is read, written and sent whole: its width bounds every buffer
  // a pull or push of one id needs (with a capacity of 0, the element
  // count above does not).
  if ((spec->kind() == EMBEDDING || spec->kind() == HASH_EMBEDDING) &&
      spec->shape_size() == 2 && spec->shape(1) > kMaxRowWidth) {
    return Invalid(*spec, absl::StrCat("row width shape[1] = ", spec->shape(1),
                                       " is above ", kMaxRowWidth, " floats"));
  }
  switch (spec->kind()) {
    case DENSE:
      if (spec->partition().routing() != PartitionSpec::DIV) {
        return Invalid(*spec,
                       "DENSE variables are split by row ranges; "
                       "routing must be DIV");
      }
      break;
    case EMBEDDING:
      if (spec->shape_size() != 2) {
        return Invalid(*spec, "EMBEDDING shape must be [vocab, dim]");
      }
      if (spec->partition().routing() == PartitionSpec::HASH) {
        return Invalid(*spec,
                       "EMBEDDING routing must be DIV or MOD; use "
                       "HASH_EMBEDDING for hashed ids");
      }
      break;
    case HASH_EMBEDDING:
      if (spec->shape_size() != 2) {
        return Invalid(*spec,
                       "HASH_EMBEDDING shape must be [capacity, dim] "
                       "(capacity 0 = unbounded)");
      }
      spec->mutable_partition()->set_routing(PartitionSpec::HASH);
      if (spec->partition().max_shard_bytes() > 0 && spec->shape(0) == 0) {
        return Invalid(*spec,
                       "max_shard_bytes needs a bounded capacity "
                       "(shape[0]); use num_shards instead");
      }
      break;
    default:
      return Invalid(*spec, "kind must be DENSE, EMBEDDING or HASH_EMBEDDING");
  }
  if (absl::Status s = NormalizeAdmission(spec); !s.ok()) return s;
  if (spec->has_eviction()) {
    if (spec->kind() != HASH_EMBEDDING) {
      return Invalid(*spec,
                     "eviction applies to HASH_EMBEDDING variables only (a "
                     "known vocabulary keeps every row)");
    }
    if (spec->eviction().ttl_steps() < 0) {
      return Invalid(*spec, absl::StrCat("eviction.ttl_steps = ",
                                         spec->eviction().ttl_steps(),
                                         " must not be negative"));
    }
    const int64_t max_rows = spec->eviction().max_rows();
    if (max_rows < 0) {
      return Invalid(*spec, absl::StrCat("eviction.max_rows = ", max_rows,
                                         " must not be negative"));
    }
    if (max_rows > 0 && spec->shape(0) > 0 && max_rows > spec->shape(0)) {
      return Invalid(
          *spec, absl::StrCat("eviction.max_rows = ", max_rows,
                              " is above shape[0] = ", spec->shape(0),
                              ", the table's hard capacity: use shape[0] = 0 "
                              "(unbounded) or a max_rows within it"));
    }
    if (spec->eviction().ttl_steps() == 0 && max_rows == 0) {
      spec->clear_eviction();
    }
  }
  if (absl::Status s = NormalizeStorage(spec); !s.ok()) return s;
  const PartitionSpec& p = spec->partition();
  if (p.num_shards() < 0 || p.max_shard_bytes() < 0) {
    return Invalid(*spec,
                   "num_shards and max_shard_bytes must not be negative");
  }
  if (p.num_shards() > 0 && p.max_shard_bytes() > 0) {
    return Invalid(*spec, "set num_shards or max_shard_bytes, not both");
  }
  if (p.num_shards() > 65536) return Invalid(*spec, "more than 65536 shards");

  const InitializerSpec& init = spec->initializer();
  if (!Finite(init.value()) || !Finite(init.min()) || !Finite(init.max()) ||
      !Finite(init.mean()) || !Finite(init.stddev())) {
    return Invalid(*spec, "initializer parameters must be finite");
  }
  switch (init.kind()) {
    case InitializerSpec::ZEROS:
    case InitializerSpec::CONSTANT:
      break;
    case InitializerSpec::UNIFORM:
      if (!(init.min() < init.max())) {
        return Invalid(*spec, absl::StrCat("uniform initializer needs min < "
                                           "max, got [",
                                           init.min(), ", ", init.max(), ")"));
      }
      break;
    case InitializerSpec::NORMAL:
    case InitializerSpec::TRUNCATED_NORMAL:
      if (!(init.stddev() > 0)) {
        return Invalid(*spec, "normal initializer needs stddev > 0");
      }
      break;
    default:
      return Invalid(*spec, "unknown initializer kind");
  }

  OptimizerSpec* opt = spec->mutable_optimizer();
  const float lr = opt->learning_rate();
  if (!(lr > 0) || !Finite(lr)) {
    return Invalid(*spec, absl::StrCat("optimizer learning_rate must be > 0, "
                                       "got ",
                                       lr));
  }
  switch (opt->kind()) {
    case OptimizerSpec::SGD:
      break;
    case OptimizerSpec::MOMENTUM:
      if (opt->momentum() == 0) opt->set_momentum(0.9f);
      if (!(opt->momentum() > 0 && opt->momentum() < 1)) {
        return Invalid(*spec, "momentum must be in (0, 1)");
      }
      break;
    case OptimizerSpec::ADAGRAD:
    case OptimizerSpec::FTRL:
      if (opt->initial_accumulator_value() == 0) {
        opt->set_initial_accumulator_value(0.1f);
      }
      if (!(opt->initial_accumulator_value() > 0)) {
        return Invalid(*spec, "initial_accumulator_value must be > 0");
      }
      if (opt->l1() < 0 || opt->l2() < 0 || opt->beta() < 0) {
        return Invalid(*spec, "l1, l2 and beta must not be negative");
      }
      break;
    case OptimizerSpec::ADAM:
      if (opt->beta1() == 0) opt->set_beta1(0.9f);
      if (opt->beta2() == 0) opt->set_beta2(0.999f);
      if (opt->epsilon() == 0) opt->set_epsilon(1e-7f);
      if (!(opt->beta1() > 0 && opt->beta1() < 1 && opt->beta2() > 0 &&
            opt->beta2() < 1 && opt->epsilon() > 0)) {
        return Invalid(*spec,
                       "adam needs 0 < beta1, beta2 < 1 and epsilon > 0");
      }
      break;
    default:
      return Invalid(*spec, "unknown optimizer kind");
  }
  return absl::OkStatus();
}

std::string DescribeSpec(const VariableSpec& spec) {
  std::string out =
      absl::StrCat(spec.name(), ": ", VariableKind_Name(spec.kind()), " [",
                   absl::StrJoin(spec.shape(), ", "), "]");
  const PartitionSpec& p = spec.partition();
  if (p.num_shards() > 0) absl::StrAppend(&out, " shards=", p.num_shards());
  if (p.max_shard_bytes() > 0) {
    absl::StrAppend(&out, " max_shard_bytes=", p.max_shard_bytes());
  }
  if (spec.kind() != DENSE) {
    absl::StrAppend(&out, " ", PartitionSpec::Routing_Name(p.routing()));
  }
  absl::StrAppend(&out, " ", PartitionSpec::Placement_Name(p.placement()), " ",
                  InitializerSpec::Kind_Name(spec.initializer().kind()),
                  "(seed=", spec.initializer().seed(), ") ",
                  OptimizerSpec::Kind_Name(spec.optimizer().kind()),
                  "(lr=", spec.optimizer().learning_rate(), ")");
  if (spec.has_admission()) {
    absl::StrAppend(&out, " admission(min_count=", spec.admission().min_count(),
                    ")");
  }
  if (spec.has_eviction()) {
    std::vector<std::string> parts;
    if (spec.eviction().ttl_steps() > 0) {
      parts.push_back(absl::StrCat("ttl_steps=", spec.eviction().ttl_steps()));
    }
    if (spec.eviction().max_rows() > 0) {
      parts.push_back(absl::StrCat("max_rows=", spec.eviction().max_rows()));
    }
    absl::StrAppend(&out, " eviction(", absl::StrJoin(parts, ", "), ")");
  }
  return out;
}

bool SameSpec(const VariableSpec& a, const VariableSpec& b) {
  return a.SerializeAsString() == b.SerializeAsString();
}

}  // namespace psrt
