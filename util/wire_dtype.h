// Float values in 16 bits on the wire (ps_worker --wire_dtype, the
// WireDtype of proto/ps.proto): bfloat16 keeps float32's 8-bit exponent
// (its range) and 8 bits of precision; float16 has 11 bits of precision but
// only magnitudes up to 65504, and below 6.1e-5 it loses precision
// (subnormals) down to 6e-8, under which values become 0. Servers keep
// float32 parameters and optimizer slots whatever travels.
#ifndef PSRT_UTIL_WIRE_DTYPE_H_
#define PSRT_UTIL_WIRE_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/frame_reader.h"
#include "proto/ps.pb.h"

namespace psrt {

// Round to nearest, ties to even. NaN stays NaN and +-Inf stays +-Inf;
// finite values beyond bfloat16's largest (3.39e38) become +-Inf.
void EncodeBfloat16(const float* in, size_t n, uint16_t* out);
void DecodeBfloat16(const uint16_t* in, size_t n, float* out);

// Round to nearest, ties to even. Finite magnitudes above 65504, the
// largest float16, are clamped to +-65504 (not turned into Inf, which the
// servers would refuse as a gradient); returns how many were. NaN and
// +-Inf are kept.
int64_t EncodeFloat16(const float* in, size_t n, uint16_t* out);
void DecodeFloat16(const uint16_t* in, size_t n, float* out);

// The one place that dispatches on a WireDtype, for the clients and the
// servers alike.

// Bytes of one value of `dtype` on the wire: 4 or 2.
size_t WireValueBytes(WireDtype dtype);

// `n` float32 values in 16-bit `dtype` at `out` (2n bytes; float16
// clamped as above). REQUIRES: dtype is BFLOAT16 or FLOAT16.
void NarrowValues(WireDtype dtype, const float* in, size_t n, void* out);

// A payload of 16-bit `dtype` values widened to float32: *widened holds
// them and *values becomes a view of them. False (nothing changed) if
// dtype is not a 16-bit type or the payload has an odd size.
bool WidenValues(WireDtype dtype, PayloadView* values,
                 std::unique_ptr<float[]>* widened);

// The value of a --wire_dtype flag (fp32, bf16 or fp16); an error naming
// the flag otherwise.
absl::StatusOr<WireDtype> ParseWireDtypeFlag(absl::string_view value);

}  // namespace psrt

#endif  // PSRT_UTIL_WIRE_DTYPE_H_
