// The TCP baseline's receiver loads every cache line it is sent, and ps_bench
// reads iperf3's receiver rate from its JSON report.
#include "tools/ps_bench/tcp_baseline.h"

#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tools/ps_bench/iperf3_check.h"

namespace psrt {
namespace {

TEST(TouchEveryCacheLineTest, LoadsTheFirstWordOfEveryLineAndTheLastByte) {
  // 3 lines and 10 more bytes, at an odd offset (unaligned loads).
  std::vector<char> buffer(1 + 3 * 64 + 10, 0);
  char* data = buffer.data() + 1;
  const uint64_t words[4] = {1, 1ull << 40, 7, 100};
  for (int line = 0; line < 4; ++line) {
    std::memcpy(data + 64 * line, &words[line], 8);
  }
  data[3 * 64 + 9] = 5;  // the last byte
  EXPECT_EQ(TouchEveryCacheLine(data, 3 * 64 + 10),
            1 + (1ull << 40) + 7 + 100 + 5);
  // Bytes past a line's first word are not loaded, the last one always is.
  data[8] = 99;
  EXPECT_EQ(TouchEveryCacheLine(data, 3 * 64 + 10),
            1 + (1ull << 40) + 7 + 100 + 5);
  EXPECT_EQ(TouchEveryCacheLine(data, 9), 1u + 99u);
  EXPECT_EQ(TouchEveryCacheLine(data, 0), 0u);
  // A tail shorter than a word: only the last byte.
  EXPECT_EQ(TouchEveryCacheLine(data + 64, 3), 0u);
}

TEST(ParseIperf3JsonTest, ReadsTheReceiverRate) {
  // The shape of iperf3 3.12's --json "end" object (tabs as it prints them).
  const std::string report =
      "{\"end\": {\n\t\"sum_sent\":\t{\n\t\t\"bits_per_second\":\t9e9\n\t},\n"
      "\t\"sum_received\":\t{\n\t\t\"start\":\t0,\n\t\t\"bytes\":\t6633553920,"
      "\n\t\t\"bits_per_second\":\t26530886053.800247,\n\t\t\"sender\":\t"
      "true\n\t}}}";
  auto gbytes = ParseIperf3Json(report);
  ASSERT_TRUE(gbytes.ok()) << gbytes.status();
  EXPECT_NEAR(*gbytes, 26530886053.800247 / 8 / 1e9, 1e-9);
}

TEST(ParseIperf3JsonTest, RefusesReportsWithoutARate) {
  EXPECT_FALSE(ParseIperf3Json("{\"error\": \"unable to connect\"}").ok());
  EXPECT_FALSE(
      ParseIperf3Json("{\"sum_received\": {\"bits_per_second\": \"fast\"}}")
          .ok());
  EXPECT_FALSE(
      ParseIperf3Json("{\"sum_received\": {\"bits_per_second\": -5}}").ok());
}

TEST(MeasureIperf3Test, AMissingBinaryIsNotFound) {
  auto r = MeasureIperf3("/nonexistent/iperf3", absl::Seconds(1), 1 << 20);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << r.status();
  EXPECT_NE(r.status().message().find("apt-get install iperf3"),
            std::string::npos);
}

}  // namespace
}  // namespace psrt
