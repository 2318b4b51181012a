// S3Storage against a loopback server that answers as S3 does for a bucket
// in another region than the one the request was signed for: the error
// names the bucket's region and the flag to set.
#include <civetweb.h>

#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "storage/storage.h"

namespace psrt {
namespace {

// Answers every request with `status`, an x-amz-bucket-region header if
// `header_region` is set, and `body`.
class WrongRegionServer {
 public:
  WrongRegionServer(int status, std::string header_region, std::string body)
      : status_(status),
        header_region_(std::move(header_region)),
        body_(std::move(body)) {
    mg_init_library(0);
    const char* options[] = {"listening_ports", "127.0.0.1:0", "num_threads",
                             "2", nullptr};
    mg_callbacks callbacks{};
    context_ = mg_start(&callbacks, this, options);
    mg_set_request_handler(context_, "/", &WrongRegionServer::Handle, this);
    mg_server_port ports[2];
    mg_get_server_ports(context_, 2, ports);
    port_ = ports[0].port;
  }
  ~WrongRegionServer() { mg_stop(context_); }
  std::string endpoint() const {
    return absl::StrCat("http://127.0.0.1:", port_);
  }

 private:
  static int Handle(mg_connection* conn, void* self_ptr) {
    auto* self = static_cast<WrongRegionServer*>(self_ptr);
    const std::string header =
        self->header_region_.empty()
            ? ""
            : absl::StrCat("x-amz-bucket-region: ", self->header_region_,
                           "\r\n");
    mg_printf(conn,
              "HTTP/1.1 %d X\r\n%sContent-Length: %zu\r\nConnection: "
              "close\r\n\r\n",
              self->status_, header.c_str(), self->body_.size());
    mg_write(conn, self->body_.data(), self->body_.size());
    return 1;
  }

  const int status_;
  const std::string header_region_, body_;
  mg_context* context_ = nullptr;
  int port_ = 0;
};

class S3RegionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("AWS_ACCESS_KEY_ID", "AKIATEST", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "secret", 1);
  }

  absl::Status ReadFrom(const std::string& endpoint) {
    S3Options options;
    options.endpoint = endpoint;
    options.region = "us-east-1";
    options.max_attempts = 1;
    auto storage = OpenStorage("s3://training-bucket/run1", options);
    EXPECT_TRUE(storage.ok()) << storage.status();
    return (*storage)->Read("MANIFEST.json").status();
  }
};

TEST_F(S3RegionTest, ARedirectNamesTheBucketsRegion) {
  WrongRegionServer server(
      301, "eu-west-1",
      "<Error><Code>PermanentRedirect</Code><Message>The bucket you are "
      "attempting to access must be addressed using the specified "
      "endpoint.</Message></Error>");
  const absl::Status s = ReadFrom(server.endpoint());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(
      absl::StrContains(s.message(),
                        "bucket 'training-bucket' is in region eu-west-1, not "
                        "us-east-1: set --s3_region=eu-west-1"))
      << s;
}

TEST_F(S3RegionTest, AMalformedAuthorizationNamesTheExpectedRegion) {
  WrongRegionServer server(
      400, "",
      "<Error><Code>AuthorizationHeaderMalformed</Code><Message>the region "
      "'us-east-1' is wrong; expecting 'ap-southeast-2'</Message><Region>"
      "ap-southeast-2</Region></Error>");
  const absl::Status s = ReadFrom(server.endpoint());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "set --s3_region=ap-southeast-2"))
      << s;
}

TEST_F(S3RegionTest, OtherErrorsAreNotTakenForARegionMismatch) {
  WrongRegionServer server(
      403, "",
      "<Error><Code>AccessDenied</Code><Message>Access Denied</Message>"
      "</Error>");
  const absl::Status s = ReadFrom(server.endpoint());
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_FALSE(absl::StrContains(s.message(), "region")) << s;
}

}  // namespace
}  // namespace psrt
