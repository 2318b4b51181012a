// PerformHttp against a loopback keep-alive server that counts the TCP
// connections it accepts: requests to one host reuse pooled connections
// (across threads too) instead of connecting once per request.
#include "storage/http_client.h"

#include <civetweb.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

class CountingServer {
 public:
  CountingServer() {
    mg_init_library(0);
    const char* options[] = {
        "listening_ports",   "127.0.0.1:0", "num_threads", "8",
        "enable_keep_alive", "yes",         nullptr};
    mg_callbacks callbacks{};
    callbacks.init_connection = [](const mg_connection* conn,
                                   void** data) -> int {
      auto* self =
          static_cast<CountingServer*>(mg_get_user_data(mg_get_context(conn)));
      ++self->connections_;
      return 0;
    };
    context_ = mg_start(&callbacks, this, options);
    mg_set_request_handler(
        context_, "/",
        [](mg_connection* conn, void*) -> int {
          const std::string body = "pong";
          mg_printf(conn, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n",
                    body.size());
          mg_write(conn, body.data(), body.size());
          return 200;
        },
        nullptr);
    mg_server_port ports[2];
    mg_get_server_ports(context_, 2, ports);
    port_ = ports[0].port;
  }
  ~CountingServer() { mg_stop(context_); }
  std::string url() const {
    return absl::StrCat("http://127.0.0.1:", port_, "/ping");
  }
  int connections() const { return connections_.load(); }

 private:
  mg_context* context_ = nullptr;
  int port_ = 0;
  std::atomic<int> connections_{0};
};

TEST(HttpClientTest, RequestsReusePooledConnections) {
  CountingServer server;
  HttpRequest request;
  request.url = server.url();
  for (int i = 0; i < 50; ++i) {
    auto response = PerformHttp(request);
    ASSERT_TRUE(response.ok()) << response.status();
    ASSERT_EQ(response->status, 200);
    ASSERT_EQ(response->body, "pong");
  }
  // One connection for 50 sequential requests (was 50: one per request).
  EXPECT_EQ(server.connections(), 1);

  // 4 threads x 25 requests share the pool: at most one connection per
  // request in flight at once.
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 25; ++i) {
        auto response = PerformHttp(request);
        if (response.ok() && response->status == 200) ++ok;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 100);
  EXPECT_LE(server.connections(), 1 + 4) << "connections for 150 requests";
}

}  // namespace
}  // namespace psrt
