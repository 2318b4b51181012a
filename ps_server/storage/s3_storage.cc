#include "ps_server/storage/s3_storage.h"

#include <openssl/evp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "ps_server/storage/aws_credentials.h"
#include "ps_server/storage/http_client.h"

namespace psrt {
namespace {

constexpr int64_t kMinPartBytes = 5 << 20;
constexpr int64_t kMaxParts = 10000;

std::string XmlUnescape(absl::string_view s) {
  return absl::StrReplaceAll(s, {{"&lt;", "<"},
                                 {"&gt;", ">"},
                                 {"&quot;", "\""},
                                 {"&apos;", "'"},
                                 {"&#34;", "\""},
                                 {"&amp;", "&"}});
}

// Text of every <tag>...</tag> in xml, in order.
std::vector<std::string> XmlAll(absl::string_view xml, absl::string_view tag) {
  std::vector<std::string> out;
  const std::string open = absl::StrCat("<", tag, ">");
  const std::string close = absl::StrCat("</", tag, ">");
  size_t pos = 0;
  while ((pos = xml.find(open, pos)) != absl::string_view::npos) {
    pos += open.size();
    const size_t end = xml.find(close, pos);
    if (end == absl::string_view::npos) break;
    out.push_back(XmlUnescape(xml.substr(pos, end - pos)));
    pos = end + close.size();
  }
  return out;
}

std::string XmlFirst(absl::string_view xml, absl::string_view tag) {
  std::vector<std::string> all = XmlAll(xml, tag);
  return all.empty() ? "" : all[0];
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

class S3Storage final : public Storage {
 public:
  S3Storage(std::string bucket, std::string prefix, const S3Options& options)
      : bucket_(std::move(bucket)),
        prefix_(std::move(prefix)),
        options_(options) {
    while (!prefix_.empty() && prefix_.back() == '/') prefix_.pop_back();
    if (options_.region.empty()) options_.region = Env("AWS_REGION");
    if (options_.region.empty()) options_.region = Env("AWS_DEFAULT_REGION");
    if (options_.region.empty()) options_.region = "us-east-1";
    while (!options_.endpoint.empty() && options_.endpoint.back() == '/') {
      options_.endpoint.pop_back();
    }
    options_.part_bytes = std::max(options_.part_bytes, kMinPartBytes);
    options_.upload_threads = std::max(options_.upload_threads, 1);
    options_.max_attempts = std::max(options_.max_attempts, 1);
  }

  absl::Status Write(absl::string_view key, absl::string_view data) override {
    const std::string object = ObjectKey(key);
    if (static_cast<int64_t>(data.size()) <= options_.part_bytes) {
      auto r = Send("PUT", object, "", {}, data);
      if (!r.ok()) return r.status();
      return Check(*r, "PUT", object);
    }
    return MultipartWrite(object, data);
  }

  absl::StatusOr<std::string> Read(absl::string_view key) override {
    const std::string object = ObjectKey(key);
    auto r = Send("GET", object, "", {}, "");
    if (!r.ok()) return r.status();
    if (absl::Status s = Check(*r, "GET", object); !s.ok()) return s;
    return std::move(r->body);
  }

  absl::StatusOr<std::vector<StorageObject>> List(
      absl::string_view prefix) override {
    std::vector<StorageObject> out;
    const std::string full_prefix = ObjectKey(prefix);
    std::string token;
    do {
      // Parameters in canonical (sorted) order, values encoded: libcurl
      // signs the query string as given.
      std::string query;
      if (!token.empty()) {
        query =
            absl::StrCat("continuation-token=", UriEncode(token, false), "&");
      }
      absl::StrAppend(&query,
                      "list-type=2&prefix=", UriEncode(full_prefix, false));
      auto r = Send("GET", "", query, {}, "");
      if (!r.ok()) return r.status();
      if (absl::Status s = Check(*r, "LIST", full_prefix); !s.ok()) return s;
      const std::vector<std::string> contents = XmlAll(r->body, "Contents");
      for (const std::string& c : contents) {
        StorageObject object;
        object.key = XmlFirst(c, "Key");
        if (!absl::SimpleAtoi(XmlFirst(c, "Size"), &object.bytes)) {
          object.bytes = -1;
        }
        if (!prefix_.empty())
          object.key = object.key.substr(prefix_.size() + 1);
        out.push_back(std::move(object));
      }
      token = XmlFirst(r->body, "IsTruncated") == "true"
                  ? XmlFirst(r->body, "NextContinuationToken")
                  : "";
    } while (!token.empty());
    std::sort(out.begin(), out.end(),
              [](const StorageObject& a, const StorageObject& b) {
                return a.key < b.key;
              });
    return out;
  }

  absl::Status Delete(absl::string_view key) override {
    const std::string object = ObjectKey(key);
    auto r = Send("DELETE", object, "", {}, "");
    if (!r.ok()) return r.status();
    if (r->status == 404) return absl::OkStatus();
    return Check(*r, "DELETE", object);
  }

  std::string Describe(absl::string_view key) const override {
    std::string uri = absl::StrCat("s3://", bucket_);
    const std::string object = ObjectKey(key);
    if (!object.empty()) absl::StrAppend(&uri, "/", object);
    return uri;
  }

 private:
  std::string ObjectKey(absl::string_view key) const {
    if (prefix_.empty()) return std::string(key);
    if (key.empty()) return prefix_ + "/";
    return absl::StrCat(prefix_, "/", key);
  }

  std::string Url(const std::string& object, const std::string& query) const {
    std::string url;
    if (options_.endpoint.empty()) {
      url = absl::StrCat("https://", bucket_, ".s3.", options_.region,
                         ".amazonaws.com/", UriEncode(object, true));
    } else {
      url = absl::StrCat(options_.endpoint, "/", bucket_, "/",
                         UriEncode(object, true));
    }
    if (!query.empty()) absl::StrAppend(&url, "?", query);
    return url;
  }

  // One signed request, retried on network errors, 5xx and throttling.
  absl::StatusOr<HttpResponse> Send(
      const std::string& method, const std::string& object,
      const std::string& query,
      std::vector<std::pair<std::string, std::string>> headers,
      absl::string_view body) {
    auto credentials = credentials_.Get();
    if (!credentials.ok()) return credentials.status();
    HttpRequest request;
    request.method = method;
    request.url = Url(object, query);
    request.body = body;
    request.headers = std::move(headers);
    request.headers.push_back({"x-amz-content-sha256", Sha256Hex(body)});
    if (!credentials->session_token.empty()) {
      request.headers.push_back(
          {"x-amz-security-token", credentials->session_token});
    }
    request.aws_sigv4 = absl::StrCat("aws:amz:", options_.region, ":s3");
    request.user_password = absl::StrCat(credentials->access_key_id, ":",
                                         credentials->secret_access_key);
    request.timeout_secs = options_.request_timeout_secs;
    request.connect_timeout_secs = options_.connect_timeout_secs;
    absl::StatusOr<HttpResponse> response;
    thread_local std::mt19937_64 rng(std::random_device{}());
    for (int attempt = 1;; ++attempt) {
      response = PerformHttp(request);
      const bool retry =
          !response.ok() || response->status >= 500 || response->status == 429;
      if (!retry || attempt >= options_.max_attempts) break;
      const int64_t base_ms = int64_t{options_.retry_base_ms} << (attempt - 1);
      const int64_t sleep_ms =
          base_ms / 2 + static_cast<int64_t>(rng() % (base_ms / 2 + 1));
      LOG(WARNING) << method << " s3://" << bucket_ << "/" << object
                   << " attempt " << attempt << "/" << options_.max_attempts
                   << " failed ("
                   << (response.ok() ? absl::StrCat("HTTP ", response->status)
                                     : std::string(response.status().message()))
                   << "); retrying in " << sleep_ms << " ms";
      absl::SleepFor(absl::Milliseconds(sleep_ms));
    }
    if (!response.ok()) {
      return absl::UnavailableError(
          absl::StrCat("S3 request failed after ", options_.max_attempts,
                       " attempts: ", response.status().message()));
    }
    return response;
  }

  // Maps an S3 error answer to a status naming the object and S3's code.
  absl::Status Check(const HttpResponse& r, absl::string_view what,
                     absl::string_view object) const {
    if (r.status >= 200 && r.status < 300) return absl::OkStatus();
    const std::string code = XmlFirst(r.body, "Code");
    const std::string message = XmlFirst(r.body, "Message");
    const std::string where = absl::StrCat(
        what, " s3://", bucket_, "/", object,
        options_.endpoint.empty() ? ""
                                  : absl::StrCat(" at ", options_.endpoint));
    const std::string text =
        absl::StrCat(where, ": HTTP ", r.status, code.empty() ? "" : " ", code,
                     message.empty() ? "" : ": ", message);
    if (code == "NoSuchBucket") {
      return absl::NotFoundError(
          absl::StrCat("bucket '", bucket_, "' does not exist (", text, ")"));
    }
    switch (r.status) {
      case 404:
        return absl::NotFoundError(text);
      case 401:
      case 403:
        return absl::PermissionDeniedError(text);
      case 400:
        return absl::InvalidArgumentError(text);
      default:
        return r.status >= 500 ? absl::UnavailableError(text)
                               : absl::InternalError(text);
    }
  }

  absl::Status MultipartWrite(const std::string& object,
                              absl::string_view data) {
    const int64_t size = static_cast<int64_t>(data.size());
    int64_t part_bytes = options_.part_bytes;
    if ((size + part_bytes - 1) / part_bytes > kMaxParts) {
      part_bytes = (size + kMaxParts - 1) / kMaxParts;
    }
    const int parts = static_cast<int>((size + part_bytes - 1) / part_bytes);
    auto created = Send("POST", object, "uploads=", {}, "");
    if (!created.ok()) return created.status();
    if (absl::Status s = Check(*created, "CreateMultipartUpload", object);
        !s.ok()) {
      return s;
    }
    const std::string upload_id = XmlFirst(created->body, "UploadId");
    if (upload_id.empty()) {
      return absl::InternalError(absl::StrCat("CreateMultipartUpload of ",
                                              Describe(""), " ", object,
                                              " answered without an UploadId"));
    }
    const std::string id_query =
        absl::StrCat("uploadId=", UriEncode(upload_id, false));
    std::vector<std::string> etags(parts);
    std::atomic<int> next{0};
    absl::Mutex mu;
    absl::Status failure;
    auto upload = [&] {
      for (int i; (i = next.fetch_add(1)) < parts;) {
        {
          absl::MutexLock lock(&mu);
          if (!failure.ok()) return;
        }
        const int64_t begin = int64_t{i} * part_bytes;
        const absl::string_view part =
            data.substr(begin, std::min(part_bytes, size - begin));
        auto r =
            Send("PUT", object,
                 absl::StrCat("partNumber=", i + 1, "&", id_query), {}, part);
        absl::Status s =
            r.ok() ? Check(*r, absl::StrCat("UploadPart ", i + 1), object)
                   : r.status();
        if (s.ok()) {
          auto etag = r->headers.find("etag");
          if (etag == r->headers.end()) {
            s = absl::InternalError(absl::StrCat("UploadPart ", i + 1, " of ",
                                                 object, " returned no ETag"));
          } else {
            etags[i] = etag->second;
          }
        }
        if (!s.ok()) {
          absl::MutexLock lock(&mu);
          if (failure.ok()) failure = s;
          return;
        }
      }
    };
    std::vector<std::thread> threads;
    const int n = std::min(options_.upload_threads, parts);
    for (int t = 0; t < n; ++t) threads.emplace_back(upload);
    for (std::thread& t : threads) t.join();
    if (failure.ok()) {
      std::string xml = "<CompleteMultipartUpload>";
      for (int i = 0; i < parts; ++i) {
        absl::StrAppend(&xml, "<Part><PartNumber>", i + 1,
                        "</PartNumber><ETag>", etags[i], "</ETag></Part>");
      }
      absl::StrAppend(&xml, "</CompleteMultipartUpload>");
      auto r = Send("POST", object, id_query,
                    {{"Content-Type", "application/xml"}}, xml);
      failure =
          r.ok() ? Check(*r, "CompleteMultipartUpload", object) : r.status();
      // S3 can answer 200 with an error document.
      if (failure.ok() && r->body.find("<Error>") != std::string::npos) {
        failure = absl::InternalError(absl::StrCat(
            "CompleteMultipartUpload of ", object, " failed: ",
            XmlFirst(r->body, "Code"), " ", XmlFirst(r->body, "Message")));
      }
    }
    if (!failure.ok()) {
      auto r = Send("DELETE", object, id_query, {}, "");
      if (!r.ok() || r->status >= 300) {
        LOG(WARNING) << "AbortMultipartUpload of s3://" << bucket_ << "/"
                     << object << " failed ("
                     << (r.ok() ? absl::StrCat("HTTP ", r->status)
                                : std::string(r.status().message()))
                     << "); the store may keep the parts until its lifecycle "
                        "rule removes them";
      }
      return failure;
    }
    return absl::OkStatus();
  }

  const std::string bucket_;
  std::string prefix_;
  S3Options options_;
  AwsCredentialsProvider credentials_;
};

}  // namespace

std::string Sha256Hex(absl::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(data.data(), data.size(), digest, &length, EVP_sha256(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < length; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 15]);
  }
  return out;
}

std::unique_ptr<Storage> NewS3Storage(std::string bucket, std::string prefix,
                                      const S3Options& options) {
  return std::make_unique<S3Storage>(std::move(bucket), std::move(prefix),
                                     options);
}

}  // namespace psrt
