#include "ps_server/metrics/metrics.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "ps_server/metrics/metrics_http_server.h"

namespace psrt {
namespace {

// Connections waiting in the kernel's accept queue of the IPv4 socket
// listening on `port` (/proc/net/tcp's rx_queue of a LISTEN socket); -1 if
// there is no such socket.
int AcceptBacklog(int port) {
  std::ifstream tcp("/proc/net/tcp");
  std::string line;
  std::getline(tcp, line);  // the header
  while (std::getline(tcp, line)) {
    unsigned local_port = 0, state = 0, tx = 0, rx = 0;
    if (std::sscanf(line.c_str(), " %*d: %*8x:%4x %*8x:%*4x %2x %8x:%8x",
                    &local_port, &state, &tx, &rx) == 4 &&
        static_cast<int>(local_port) == port && state == 0x0A) {
      return static_cast<int>(rx);
    }
  }
  return -1;
}

TEST(MetricsTest, RendersPrometheusText) {
  MetricsRegistry registry;
  registry.GetCounter("psrt_requests_total", "RPCs", {{"method", "Pull"}})
      ->Increment(3);
  registry.GetCounter("psrt_requests_total", "RPCs", {{"method", "Push"}})
      ->Increment();
  registry.AddGauge("psrt_parameter_bytes", "bytes", {}, [] { return 1024.0; });
  double cpu = 1.5;
  registry.AddCounterFunction("process_cpu_seconds_total", "cpu", {},
                              [&cpu] { return cpu; });
  prometheus::Histogram* h =
      registry.GetHistogram("psrt_request_duration_seconds", "latency",
                            {{"method", "Pull"}}, {0.001, 0.01});
  h->Observe(0.0005);
  h->Observe(0.005);
  h->Observe(5);
  const std::string text = registry.Render();
  auto has = [&text](const std::string& line) {
    return text.find(line) != std::string::npos;
  };
  EXPECT_TRUE(has("# TYPE psrt_requests_total counter\n")) << text;
  EXPECT_TRUE(has("psrt_requests_total{method=\"Pull\"} 3\n")) << text;
  EXPECT_TRUE(has("# TYPE psrt_parameter_bytes gauge\n")) << text;
  EXPECT_TRUE(has("psrt_parameter_bytes 1024\n")) << text;
  EXPECT_TRUE(has("# TYPE process_cpu_seconds_total counter\n")) << text;
  EXPECT_TRUE(has("process_cpu_seconds_total 1.5\n")) << text;
  EXPECT_TRUE(has(
      "psrt_request_duration_seconds_bucket{method=\"Pull\",le=\"0.001\"} 1\n"))
      << text;
  EXPECT_TRUE(has(
      "psrt_request_duration_seconds_bucket{method=\"Pull\",le=\"0.01\"} 2\n"));
  EXPECT_TRUE(has(
      "psrt_request_duration_seconds_bucket{method=\"Pull\",le=\"+Inf\"} 3\n"));
  EXPECT_TRUE(has("psrt_request_duration_seconds_count{method=\"Pull\"} 3\n"));
  EXPECT_TRUE(
      has("psrt_request_duration_seconds_sum{method=\"Pull\"} 5.0055\n"))
      << text;
  // Computed when scraped.
  cpu = 2.25;
  EXPECT_NE(registry.Render().find("process_cpu_seconds_total 2.25\n"),
            std::string::npos);
  // Same name and labels: the same counter.
  EXPECT_EQ(
      registry.GetCounter("psrt_requests_total", "RPCs", {{"method", "Pull"}})
          ->Value(),
      3);
  // Families in name order, so scrapes diff cleanly.
  EXPECT_LT(text.find("# TYPE process_cpu"), text.find("# TYPE psrt_param"));
  EXPECT_LT(text.find("# TYPE psrt_param"), text.find("# TYPE psrt_requests"));
}

TEST(MetricsTest, FamiliesWhoseSeriesAreKnownOnlyWhenScraped) {
  MetricsRegistry registry;
  MetricsRegistry::Samples now;
  registry.AddComputedFamily("psrt_variable_rows", "rows",
                             prometheus::MetricType::Gauge,
                             [&now] { return now; });
  // No series yet: no family (no empty TYPE line).
  EXPECT_EQ(registry.Render().find("psrt_variable_rows"), std::string::npos);
  now = {{{{"variable", "user"}}, 12}, {{{"variable", "item"}}, 3.5}};
  const std::string text = registry.Render();
  EXPECT_NE(text.find("# TYPE psrt_variable_rows gauge\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("psrt_variable_rows{variable=\"user\"} 12\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("psrt_variable_rows{variable=\"item\"} 3.5\n"),
            std::string::npos)
      << text;
}

// The process series Prometheus' own clients export, with this process'
// values, and the build info.
TEST(MetricsTest, ProcessMetricsDescribeThisProcess) {
  const double before = absl::ToUnixMicros(absl::Now()) / 1e6;
  MetricsRegistry registry;
  AddProcessMetrics(&registry, "metrics_test");
  // Some CPU time to see.
  volatile double sink = 0;
  for (int i = 0; i < 50000000; ++i) sink = sink + i * 1e-9;
  const std::string text = registry.Render();
  auto value = [&text](const std::string& series) {
    const size_t at = text.find("\n" + series + " ");
    if (at == std::string::npos) return -1.0;
    return std::strtod(text.c_str() + at + series.size() + 2, nullptr);
  };
  // Started before this test ran (the test binary's start), not long ago.
  // (Whole boot seconds plus clock ticks: up to 1 s off.)
  EXPECT_LE(value("process_start_time_seconds"), before + 1.5) << text;
  EXPECT_GT(value("process_start_time_seconds"), before - 600) << text;
  EXPECT_GT(value("process_cpu_seconds_total"), 0.01) << text;
  EXPECT_LT(value("process_cpu_seconds_total"), 600) << text;
  // This process holds at least the 1 MiB below, and far less than 24 GiB.
  std::vector<char> touched(1 << 20, 1);
  const double rss = value("process_resident_memory_bytes");
  EXPECT_GT(rss, 1 << 20) << text;
  EXPECT_LT(rss, 24.0 * (1 << 30)) << text;
  EXPECT_GE(value("process_virtual_memory_bytes"), rss) << text;
  // stdin, stdout, stderr at least; one more open file shows.
  const double fds = value("process_open_fds");
  EXPECT_GE(fds, 3) << text;
  FILE* f = fopen("/proc/self/stat", "r");
  ASSERT_NE(f, nullptr);
  // One render read (two would differ where a figure such as the CPU
  // seconds grew a digit between them, moving the series).
  const std::string with_file = registry.Render();
  const size_t at = with_file.find("\nprocess_open_fds ");
  ASSERT_NE(at, std::string::npos) << with_file;
  const double fds_with_file =
      std::strtod(with_file.c_str() + at + 18, nullptr);
  fclose(f);
  EXPECT_EQ(fds_with_file, fds + 1) << text;
  EXPECT_GE(value("process_max_fds"), fds) << text;
  EXPECT_NE(text.find(absl::StrCat(
                "psrt_build_info{component=\"metrics_test\",grpc_version=\"",
                grpc::Version(), "\",version=\"", kPsrtVersion, "\"} 1\n")),
            std::string::npos)
      << text;
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
  registry.GetCounter("psrt_up", "test")->Increment(7);
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
  registry.GetCounter("psrt_up", "test")->Increment(1);
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
  // The idle connections take the threads first: every one accepted off
  // the listening socket's queue before the scrape connects.
  for (const absl::Time end = absl::Now() + absl::Seconds(10);
       AcceptBacklog((*server)->port()) != 0 && absl::Now() < end;) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ(AcceptBacklog((*server)->port()), 0);
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
