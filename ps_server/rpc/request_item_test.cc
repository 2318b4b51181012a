// FirstNonFiniteMaxAbs over gradients as gRPC hands them over (slices cut at
// any byte): the first NaN/Inf and the largest magnitude are found across
// the cuts.
#include "ps_server/rpc/request_item.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace psrt {
namespace {

// A payload of `values` cut every `cut` bytes, starting `skew` bytes into
// a buffer (so that no cut but the first need be float-aligned).
struct SlicedPayload {
  SlicedPayload(const std::vector<float>& values, size_t cut, size_t skew)
      : bytes(skew + values.size() * sizeof(float)) {
    std::memcpy(bytes.data() + skew, values.data(),
                values.size() * sizeof(float));
    const size_t size = values.size() * sizeof(float);
    for (size_t at = 0; at < size; at += cut) {
      chunks.emplace_back(bytes.data() + skew + at, std::min(cut, size - at));
    }
    view = PayloadView(chunks.data(), chunks.size(), size);
  }
  std::vector<char> bytes;
  std::vector<absl::string_view> chunks;
  PayloadView view;
};

TEST(FirstNonFiniteMaxAbsTest, FindsTheLargestMagnitudeAcrossOddCuts) {
  std::vector<float> values(10000);
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = (i % 2 ? -1.0f : 1.0f) * static_cast<float>(i % 977) * 0.5f;
  }
  values[4321] = -9000.5f;  // at bytes 17284..17287: cut by 3 and 4099
  for (size_t cut : {4099u, 16384u, 3u}) {
    for (size_t skew : {0u, 1u, 2u}) {
      SlicedPayload payload(values, cut, skew);
      float max_abs = 0;
      EXPECT_EQ(FirstNonFiniteMaxAbs(payload.view, &max_abs), values.size());
      EXPECT_EQ(max_abs, 9000.5f) << cut << " " << skew;
    }
  }
}

TEST(FirstNonFiniteMaxAbsTest, TheFirstNonFiniteValueIsFoundAcrossCuts) {
  std::vector<float> values(5000, 0.25f);
  values[1025] = std::numeric_limits<float>::infinity();  // straddles a cut
  values[3000] = std::nanf("");
  SlicedPayload payload(values, 4101, 3);
  float max_abs = 0;
  EXPECT_EQ(FirstNonFiniteMaxAbs(payload.view, &max_abs), 1025u);
  values[1025] = 1;
  SlicedPayload later(values, 4101, 3);
  EXPECT_EQ(FirstNonFiniteMaxAbs(later.view, &max_abs), 3000u);
}

}  // namespace
}  // namespace psrt
