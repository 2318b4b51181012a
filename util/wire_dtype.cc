#include "util/wire_dtype.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "Eigen/Core"
#include "absl/strings/str_cat.h"

namespace psrt {

void EncodeBfloat16(const float* in, size_t n, uint16_t* out) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &in[i], sizeof(bits));
    // Adding 0x7fff plus the lowest kept bit rounds to nearest, ties to
    // even; a carry into the exponent is the correct rounding up (to Inf
    // past the largest value). A NaN's payload could carry into Inf, so
    // NaN is mapped to a quiet NaN instead.
    const uint32_t rounded = bits + 0x7fffu + ((bits >> 16) & 1u);
    const bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
    out[i] = nan ? static_cast<uint16_t>((bits >> 16) | 0x0040u)
                 : static_cast<uint16_t>(rounded >> 16);
  }
}

void DecodeBfloat16(const uint16_t* in, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t bits = static_cast<uint32_t>(in[i]) << 16;
    std::memcpy(&out[i], &bits, sizeof(bits));
  }
}

int64_t EncodeFloat16(const float* in, size_t n, uint16_t* out) {
  constexpr float kLargest = 65504.0f;
  int64_t clamped = 0;
  for (size_t i = 0; i < n; ++i) {
    float v = in[i];
    if (std::isfinite(v) && std::fabs(v) > kLargest) {
      v = std::copysign(kLargest, v);
      ++clamped;
    }
    out[i] = Eigen::numext::bit_cast<uint16_t>(Eigen::half(v));
  }
  return clamped;
}

void DecodeFloat16(const uint16_t* in, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) {
    out[i] = static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(in[i]));
  }
}

size_t WireValueBytes(WireDtype dtype) {
  return dtype == FLOAT32 ? sizeof(float) : sizeof(uint16_t);
}

void NarrowValues(WireDtype dtype, const float* in, size_t n, void* out) {
  uint16_t* wire = static_cast<uint16_t*>(out);
  if (dtype == BFLOAT16) {
    EncodeBfloat16(in, n, wire);
  } else {
    EncodeFloat16(in, n, wire);
  }
}

bool WidenValues(WireDtype dtype, PayloadView* values,
                 std::unique_ptr<float[]>* widened) {
  if ((dtype != BFLOAT16 && dtype != FLOAT16) || values->size() % 2 != 0) {
    return false;
  }
  // Copied out first: the payload's slices need not hold whole values.
  const size_t n = values->size() / 2;
  std::vector<uint16_t> wire(n);
  values->CopyTo(wire.data());
  widened->reset(new float[n]);
  if (dtype == BFLOAT16) {
    DecodeBfloat16(wire.data(), n, widened->get());
  } else {
    DecodeFloat16(wire.data(), n, widened->get());
  }
  *values = PayloadView::Contiguous(widened->get(), n * sizeof(float));
  return true;
}

absl::StatusOr<WireDtype> ParseWireDtypeFlag(absl::string_view value) {
  if (value == "fp32") return FLOAT32;
  if (value == "bf16") return BFLOAT16;
  if (value == "fp16") return FLOAT16;
  return absl::InvalidArgumentError(
      absl::StrCat("--wire_dtype=", value, ": expected fp32, bf16 or fp16"));
}

}  // namespace psrt
