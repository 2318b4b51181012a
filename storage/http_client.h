// One HTTP request over libcurl: what S3 and the AWS credential endpoints
// need (any method, a body from memory, response headers and body), with
// optional AWS SigV4 signing done by libcurl.
#ifndef PSRT_STORAGE_HTTP_CLIENT_H_
#define PSRT_STORAGE_HTTP_CLIENT_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace psrt {

struct HttpRequest {
  std::string method = "GET";
  std::string url;
  std::vector<std::pair<std::string, std::string>> headers;
  absl::string_view body;  // not owned; must outlive the call
  // "aws:amz:<region>:s3" to have libcurl sign with SigV4 using
  // user:password = access key:secret key. Empty: unsigned.
  std::string aws_sigv4;
  std::string user_password;
  int timeout_secs = 60;
  int connect_timeout_secs = 10;
  // PEM file of the CAs to trust for https (AWS_CA_BUNDLE); empty: the
  // system's.
  std::string ca_file;
  // false: a connection of its own, closed after the request (no pooling).
  bool reuse_connection = true;
  // A 2xx answer's body goes here instead of HttpResponse::body (cleared
  // first, its capacity kept: a reader reusing one buffer allocates once),
  // with room for `expected_body_bytes` reserved. Other answers' bodies
  // (errors) stay in HttpResponse::body.
  std::string* body_into = nullptr;
  int64_t expected_body_bytes = 0;
};

struct HttpResponse {
  long status = 0;
  std::string body;
  // Lower-cased names.
  absl::flat_hash_map<std::string, std::string> headers;
};

// Performs the request. A transport failure (cannot connect, timeout, reset)
// is UNAVAILABLE naming the URL and libcurl's reason; a TLS certificate no
// trusted CA signed, or a CA bundle that cannot be read, is
// FAILED_PRECONDITION saying what to set; any HTTP status is a response.
absl::StatusOr<HttpResponse> PerformHttp(const HttpRequest& request);

// Percent-encodes as SigV4 canonical requests do: unreserved characters
// (A-Z a-z 0-9 - _ . ~) are kept, '/' too when `keep_slash`.
std::string UriEncode(absl::string_view s, bool keep_slash);

}  // namespace psrt

#endif  // PSRT_STORAGE_HTTP_CLIENT_H_
