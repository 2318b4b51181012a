#include "ps_server/metrics/status_page.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

// Names come from clients: markup in them is shown, never interpreted.
TEST(StatusPageTest, EscapesWhatClientsNamedAndCarriesTheNumbers) {
  StatusPageData d;
  d.ps_task = 1;
  d.num_ps = 2;
  d.global_step = 77;
  d.variables.push_back(
      {"<script>alert('x')</script>&", "DENSE", 2, 1, 100, 400});
  d.variables.push_back(
      {"ids", "HASH_EMBEDDING", 2, 2, 500, 9000, 3, 500, 2000, 100, 0, 42});
  d.variables.push_back(
      {"fresh", "HASH_EMBEDDING", 2, 2, 900, 9000, 0, 0, 0, 0, 1000, 7});
  d.bytes_per_ps = {400, 800};
  d.push_requests = 9;
  d.recent_rates = {1, 2.5, 3, 4, 5e6, 6e6};
  d.recent_seconds = 60;
  d.checkpoints.push_back({"ckpt-1-2\"><b>", 1234, 0.5, absl::UnixEpoch()});
  d.workers.push_back({3, 41, 0.2});
  const std::string html = RenderStatusPage(d);
  EXPECT_FALSE(absl::StrContains(html, "<script>")) << html;
  EXPECT_FALSE(absl::StrContains(html, "\"><b>")) << html;
  EXPECT_TRUE(absl::StrContains(
      html, "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;"));
  EXPECT_TRUE(absl::StrContains(html, "<span id=\"ps-task\">1</span>"));
  EXPECT_TRUE(absl::StrContains(html, "<span id=\"global-step\">77</span>"));
  EXPECT_TRUE(absl::StrContains(html, "id=\"var-0-shards\">1 / 2<"));
  EXPECT_TRUE(
      absl::StrContains(html, "min_count 3: <span id=\"var-1-admitted\">500<"))
      << html;
  EXPECT_TRUE(absl::StrContains(html, "id=\"var-1-unadmitted\">2000<"));
  EXPECT_TRUE(absl::StrContains(
      html, "; ttl 100 steps: <span id=\"var-1-evicted\">42<"));
  EXPECT_FALSE(absl::StrContains(html, "var-0-admitted"));
  EXPECT_TRUE(
      absl::StrContains(html, ">max 1000 rows: <span id=\"var-2-evicted\">7<"))
      << html;
  EXPECT_TRUE(absl::StrContains(html, "id=\"push-requests\">9<"));
  EXPECT_TRUE(absl::StrContains(html, "id=\"push-rate\">2.5<"));
  EXPECT_TRUE(absl::StrContains(html, "id=\"recent-seconds\">60<"));
  EXPECT_TRUE(absl::StrContains(html, "id=\"worker-3-step\">41<"));
  // The bars: this PS's is half the height of the other's.
  EXPECT_TRUE(absl::StrContains(html, "id=\"bar-0\" x=\"12\" y=\"60\""));
  EXPECT_TRUE(absl::StrContains(html, "id=\"bar-1\" x=\"64\" y=\"0\""));
  EXPECT_TRUE(absl::StrContains(html, "id=\"balance-ratio\">2.000<"));
}

TEST(StatusPageTest, ShowsReplicasOnlyWithThem) {
  StatusPageData d;
  d.ps_task = 2;
  d.num_ps = 3;
  EXPECT_FALSE(absl::StrContains(RenderStatusPage(d), "Replicas"));
  d.replicas = 2;
  d.primary_shards = 6;
  d.backup_shards = 3;
  d.failed_ps = {1};
  d.lease = "held";
  const std::string html = RenderStatusPage(d);
  EXPECT_TRUE(absl::StrContains(html, "<span id=\"replicas\">2</span>"));
  EXPECT_TRUE(absl::StrContains(html, "id=\"primary-shards\">6<"));
  EXPECT_TRUE(absl::StrContains(html, "id=\"backup-shards\">3<"));
  EXPECT_TRUE(absl::StrContains(html, "id=\"failed-ps\">1<"));
  EXPECT_TRUE(absl::StrContains(html, "id=\"lease\">held<"));
  EXPECT_FALSE(absl::StrContains(html, "id=\"replaced\""));
  d.replaced = true;
  EXPECT_TRUE(absl::StrContains(RenderStatusPage(d), "id=\"replaced\""));
}

}  // namespace
}  // namespace psrt
