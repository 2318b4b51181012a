#include "util/crc32c.h"

#include <string>

#include "gtest/gtest.h"

namespace psrt {
namespace {

TEST(Crc32cTest, KnownValues) {
  // RFC 3720 (iSCSI) B.4 test vectors.
  std::string zeros(32, '\0');
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8a9136aau);
  std::string ones(32, '\xff');
  EXPECT_EQ(Crc32c(ones.data(), ones.size()), 0x62a8ab43u);
  std::string ascending(32, '\0');
  for (int i = 0; i < 32; ++i) ascending[i] = static_cast<char>(i);
  EXPECT_EQ(Crc32c(ascending.data(), ascending.size()), 0x46dd794eu);
  EXPECT_EQ(Crc32c("123456789", 9), 0xe3069283u);
}

TEST(Crc32cTest, ExtendEqualsWhole) {
  std::string data;
  for (int i = 0; i < 1000; ++i) data.push_back(static_cast<char>(i * 7 + 3));
  const uint32_t whole = Crc32c(data.data(), data.size());
  for (size_t cut : {0, 1, 7, 8, 9, 500, 999, 1000}) {
    EXPECT_EQ(Crc32cExtend(Crc32c(data.data(), cut), data.data() + cut,
                           data.size() - cut),
              whole)
        << cut;
  }
}

TEST(Crc32cTest, CombineEqualsWhole) {
  std::string data;
  for (int i = 0; i < 70000; ++i) {
    data.push_back(static_cast<char>((i * 131) ^ (i >> 5)));
  }
  for (size_t size : {1, 9, 1000, 70000}) {
    const std::string whole = data.substr(0, size);
    const uint32_t expected = Crc32c(whole.data(), whole.size());
    for (size_t cut : {size_t{0}, size_t{1}, size / 3, size - 1, size}) {
      const uint32_t a = Crc32c(whole.data(), cut);
      const uint32_t b = Crc32c(whole.data() + cut, size - cut);
      EXPECT_EQ(Crc32cCombine(a, b, size - cut), expected)
          << "size " << size << " cut " << cut;
    }
  }
  // Three regions combined left to right, as a shard file is checked.
  const uint32_t ab = Crc32cCombine(Crc32c(data.data(), 10),
                                    Crc32c(data.data() + 10, 5000), 5000);
  EXPECT_EQ(Crc32cCombine(ab, Crc32c(data.data() + 5010, 60000), 60000),
            Crc32c(data.data(), 65010));
}

}  // namespace
}  // namespace psrt
