// The PS status page (/statusz) in a real headless Chromium against a live
// 2-PS cluster: the page loads and renders (a screenshot is taken), and the
// numbers in its DOM are the cluster's: variables and their shards, the
// bytes per PS of the balance chart, request counts, the checkpoint just
// taken and the worker that pushed.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/ci.h"
#include "tests/local_cluster.h"

namespace psrt {
namespace {

std::string Chromium() {
  for (const char* path : {"/usr/bin/chromium", "/usr/bin/chromium-browser"}) {
    if (std::ifstream(path).good()) return path;
  }
  return "";
}

// Runs headless Chromium with `args` on `url`; its stdout.
std::string RunChromium(const std::string& binary, const std::string& args,
                        const std::string& url, const std::string& home) {
  const std::string command = absl::StrCat(
      "HOME='", home, "' timeout 120 '", binary,
      "' --headless --no-sandbox --disable-gpu --disable-dev-shm-usage "
      "--no-first-run --user-data-dir='",
      home, "/profile' ", args, " '", url, "' 2>/dev/null");
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), p)) > 0) out.append(buffer, n);
  pclose(p);
  return out;
}

// The text of the element with id `id` in `dom`: what follows id="..."> up
// to the next '<'.
std::string TextOf(const std::string& dom, const std::string& id) {
  const std::string needle = absl::StrCat("id=\"", id, "\"");
  size_t at = dom.find(needle);
  if (at == std::string::npos) return "<missing " + id + ">";
  at = dom.find('>', at);
  return dom.substr(at + 1, dom.find('<', at) - at - 1);
}

// The value of attribute `attribute` of the element with id `id`.
std::string AttributeOf(const std::string& dom, const std::string& id,
                        const std::string& attribute) {
  const size_t element = dom.find(absl::StrCat("id=\"", id, "\""));
  if (element == std::string::npos) return "<missing " + id + ">";
  const size_t start = dom.rfind('<', element);
  const size_t end = dom.find('>', element);
  const std::string tag = dom.substr(start, end - start);
  const size_t at = tag.find(absl::StrCat(attribute, "=\""));
  if (at == std::string::npos) return "<no " + attribute + ">";
  const size_t value = at + attribute.size() + 2;
  return tag.substr(value, tag.find('"', value) - value);
}

TEST(StatusPageTest, ChromiumShowsTheClustersNumbers) {
  const std::string chromium = Chromium();
  if (chromium.empty()) {
    PSRT_SKIP_UNLESS_CI("Chromium is not installed (apt-get install chromium)");
  }
  const std::string root = FreshTestDir("statusz_ckpt");
  auto cluster = LocalCluster::Start(
      {.num_ps = 2,
       .extra_flags = {absl::StrCat("--checkpoint_uri=", root),
                       "--checkpoint_on_shutdown=false"}});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ClientOptions options = (*cluster)->MakeClientOptions();
  options.worker_index = 0;
  auto client = Client::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();
  VariableSpec dense;  // 3,000 floats + momentum in 3 shards: 2 on PS 0
  dense.set_name("w");
  dense.set_kind(DENSE);
  dense.add_shape(3000);
  dense.mutable_partition()->set_num_shards(3);
  dense.mutable_optimizer()->set_kind(OptimizerSpec::MOMENTUM);
  dense.mutable_optimizer()->set_learning_rate(0.1f);
  ASSERT_EQ((*client)->CreateVariables({dense}), absl::OkStatus());
  std::vector<float> grad(3000, 1.0f);
  StepOptions step;
  for (int i = 0; i < 5; ++i) {
    step.step = i;
    ASSERT_TRUE((*client)->Push({PushOp::Dense("w", grad.data())}, step).ok());
  }
  auto saved = (*client)->Checkpoint();
  ASSERT_TRUE(saved.ok()) << saved.status();

  const std::string home = FreshTestDir("chromium_home");
  const std::string url = absl::StrCat(
      "http://127.0.0.1:", (*cluster)->metrics_port(0), "/statusz");
  const std::string dom = RunChromium(chromium, "--dump-dom", url, home);
  ASSERT_TRUE(absl::StrContains(dom, "psrt parameter server")) << dom;
  EXPECT_EQ(TextOf(dom, "ps-task"), "0");
  EXPECT_EQ(TextOf(dom, "num-ps"), "2");
  EXPECT_EQ(TextOf(dom, "var-0-name"), "w");
  EXPECT_EQ(TextOf(dom, "var-0-shards"), "2 / 3");
  EXPECT_EQ(TextOf(dom, "var-0-rows"), "2000");
  // Shards of 1,000 floats and 1,000 momentum floats: 8,000 bytes each.
  EXPECT_EQ(AttributeOf(dom, "var-0-bytes", "data-bytes"), "16000");
  EXPECT_EQ(AttributeOf(dom, "bar-0", "data-bytes"), "16000");
  EXPECT_EQ(AttributeOf(dom, "bar-1", "data-bytes"), "8000");
  EXPECT_EQ(TextOf(dom, "balance-ratio"), "2.000");
  EXPECT_EQ(TextOf(dom, "push-requests"), "5");
  EXPECT_EQ(TextOf(dom, "worker-0-step"), "4");
  const std::string name = saved->uri().substr(saved->uri().rfind('/') + 1);
  EXPECT_EQ(TextOf(dom, "ckpt-0-name"), name);
  // PS 0's two shard files: their 16,000 bytes of rows plus headers.
  int64_t checkpoint_bytes = 0;
  ASSERT_TRUE(absl::SimpleAtoi(AttributeOf(dom, "ckpt-0-bytes", "data-bytes"),
                               &checkpoint_bytes))
      << dom;
  EXPECT_GT(checkpoint_bytes, 16000);
  EXPECT_LT(checkpoint_bytes, 17000);

  // It renders: a screenshot of the page is a PNG of some size.
  const char* outputs = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  const std::string png =
      absl::StrCat(outputs != nullptr ? outputs : home.c_str(), "/statusz.png");
  RunChromium(chromium,
              absl::StrCat("--screenshot=", png, " --window-size=1000,900"),
              url, home);
  std::ifstream in(png, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)),
                          std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 10000u) << "no screenshot at " << png;
  EXPECT_EQ(bytes.substr(1, 3), "PNG");
}

}  // namespace
}  // namespace psrt
