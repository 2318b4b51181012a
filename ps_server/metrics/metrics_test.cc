#include "ps_server/metrics/metrics.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <vector>

#include "gtest/gtest.h"
#include "ps_server/metrics/metrics_http_server.h"

namespace psrt {
namespace {

TEST(MetricsTest, RendersPrometheusText) {
  MetricsRegistry registry;
  registry.GetCounter("psrt_requests_total", "RPCs", {{"method", "Pull"}})
      ->Add(3);
  registry.GetCounter("psrt_requests_total", "RPCs", {{"method", "Push"}})
      ->Add();
  registry.AddGauge("psrt_parameter_bytes", "bytes", {}, [] { return 1024.0; });
  Histogram* h = registry.GetHistogram("psrt_request_seconds", "latency",
                                       {{"method", "Pull"}}, {0.001, 0.01});
  h->Observe(0.0005);
  h->Observe(0.005);
  h->Observe(5);
  const std::string text = registry.Render();
  EXPECT_NE(text.find("# TYPE psrt_requests_total counter\n"),
            std::string::npos);
  EXPECT_NE(text.find("psrt_requests_total{method=\"Pull\"} 3\n"),
            std::string::npos);
  EXPECT_NE(text.find("psrt_parameter_bytes 1024\n"), std::string::npos);
  EXPECT_NE(
      text.find(
          "psrt_request_seconds_bucket{method=\"Pull\",le=\"0.001\"} 1\n"),
      std::string::npos)
      << text;
  EXPECT_NE(
      text.find("psrt_request_seconds_bucket{method=\"Pull\",le=\"0.01\"} 2\n"),
      std::string::npos);
  EXPECT_NE(
      text.find("psrt_request_seconds_bucket{method=\"Pull\",le=\"+Inf\"} 3\n"),
      std::string::npos);
  EXPECT_NE(text.find("psrt_request_seconds_count{method=\"Pull\"} 3\n"),
            std::string::npos);
  // Same name and labels: the same counter.
  EXPECT_EQ(
      registry.GetCounter("psrt_requests_total", "RPCs", {{"method", "Pull"}})
          ->value(),
      3);
}

size_t Append(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

// GET http://127.0.0.1:port/metrics within 10 s (a scraper's usual
// timeout): the curl result, the body and the HTTP code.
CURLcode Scrape(int port, std::string* body, long* code) {
  CURL* curl = curl_easy_init();
  const std::string url =
      "http://127.0.0.1:" + std::to_string(port) + "/metrics";
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &Append);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, body);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 10000L);
  const CURLcode result = curl_easy_perform(curl);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, code);
  curl_easy_cleanup(curl);
  return result;
}

TEST(MetricsHttpServerTest, ServesTheRegistryOverHttp) {
  MetricsRegistry registry;
  registry.GetCounter("psrt_up", "test")->Add(7);
  auto server = MetricsHttpServer::Start("127.0.0.1:0", &registry);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  std::string body;
  long code = 0;
  ASSERT_EQ(Scrape((*server)->port(), &body, &code), CURLE_OK);
  EXPECT_EQ(code, 200);
  EXPECT_NE(body.find("psrt_up 7"), std::string::npos) << body;

  // A port already taken is a clear error.
  auto clash = MetricsHttpServer::Start(
      "127.0.0.1:" + std::to_string((*server)->port()), &registry);
  EXPECT_EQ(clash.status().code(), absl::StatusCode::kUnavailable);
}

// Idle connections that never send a request (half-open scans, stuck
// clients) hold civetweb threads until the request timeout. With 2 threads
// and 30 s, two of them blocked a scrape for 30 s; now 16 delay it by about
// one request timeout.
TEST(MetricsHttpServerTest, IdleConnectionsDoNotStarveTheScraper) {
  MetricsRegistry registry;
  registry.GetCounter("psrt_up", "test")->Add(1);
  auto server = MetricsHttpServer::Start("127.0.0.1:0", &registry);
  ASSERT_TRUE(server.ok()) << server.status();
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons((*server)->port());
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  std::vector<int> idle;
  for (int i = 0; i < 2 * MetricsHttpServer::kThreads; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    if (i % 2) (void)!write(fd, "GET /metr", 9);  // a request never finished
    idle.push_back(fd);
  }
  usleep(100 * 1000);  // the idle connections take the threads first
  // Prometheus' default scrape_timeout is 10 s; the old server answered
  // after 30 s.
  std::string body;
  long code = 0;
  const CURLcode result = Scrape((*server)->port(), &body, &code);
  for (int fd : idle) close(fd);
  ASSERT_EQ(result, CURLE_OK) << curl_easy_strerror(result);
  EXPECT_NE(body.find("psrt_up 1"), std::string::npos) << body;
}

}  // namespace
}  // namespace psrt
