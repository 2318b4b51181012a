#include "storage/s3_storage.h"

#include <openssl/evp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <deque>
#include <future>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "storage/aws_credentials.h"
#include "storage/http_client.h"
#include "storage/s3_xml.h"

namespace psrt {
namespace {

constexpr int64_t kMinPartBytes = 5 << 20;

class S3Storage final : public Storage {
 public:
  S3Storage(std::string bucket, std::string prefix, const S3Options& options)
      : bucket_(std::move(bucket)),
        prefix_(std::move(prefix)),
        options_(options) {
    while (!prefix_.empty() && prefix_.back() == '/') prefix_.pop_back();
    if (options_.region.empty()) {
      options_.region = AwsRegionFromEnvironmentOrConfig();
    }
    if (options_.region.empty()) options_.region = "us-east-1";
    if (options_.ca_bundle.empty()) {
      options_.ca_bundle = AwsCaBundleFromEnvironmentOrConfig();
    }
    while (!options_.endpoint.empty() && options_.endpoint.back() == '/') {
      options_.endpoint.pop_back();
    }
    options_.part_bytes = std::max(options_.part_bytes, kMinPartBytes);
    options_.upload_threads = std::max(options_.upload_threads, 1);
    options_.max_attempts = std::max(options_.max_attempts, 1);
  }

  absl::StatusOr<std::unique_ptr<StorageWriter>> NewWriter(
      absl::string_view key) override {
    if (absl::Status s = CheckStorageKey(key); !s.ok()) return s;
    return std::unique_ptr<StorageWriter>(new Writer(this, ObjectKey(key)));
  }

  absl::StatusOr<std::string> Read(absl::string_view key) override {
    if (absl::Status s = CheckStorageKey(key); !s.ok()) return s;
    const std::string object = ObjectKey(key);
    auto r = Send("GET", object, "", {}, "");
    if (!r.ok()) return r.status();
    if (absl::Status s = Check(*r, "GET", object); !s.ok()) return s;
    return std::move(r->body);
  }

  absl::StatusOr<std::unique_ptr<StorageReader>> NewReader(
      absl::string_view key) override {
    if (absl::Status s = CheckStorageKey(key); !s.ok()) return s;
    return std::unique_ptr<StorageReader>(
        new RangeReader(this, ObjectKey(key)));
  }
  // Ranged GETs of 2 MiB spent a third of a restore's time on request
  // round trips (docs/benchmarks.md, "Restoring a checkpoint").
  int64_t preferred_read_bytes() const override { return 8 << 20; }

  absl::StatusOr<std::vector<StorageObject>> List(
      absl::string_view prefix) override {
    if (absl::Status s = CheckStorageKey(prefix, /*prefix=*/true); !s.ok()) {
      return s;
    }
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
      std::string next;
      if (absl::Status s = ParseListPage(
              r->body, full_prefix, prefix_.empty() ? 0 : prefix_.size() + 1,
              token, &out, &next);
          !s.ok()) {
        return absl::Status(s.code(),
                            absl::StrCat("s3://", bucket_, ": ", s.message()));
      }
      token = std::move(next);
    } while (!token.empty());
    std::sort(out.begin(), out.end(),
              [](const StorageObject& a, const StorageObject& b) {
                return a.key < b.key;
              });
    return out;
  }

  absl::Status Delete(absl::string_view key) override {
    if (absl::Status s = CheckStorageKey(key); !s.ok()) return s;
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

  // One signed request, retried on network errors, 5xx and throttling; a
  // 2xx body into `body_into` if given (HttpRequest::body_into).
  absl::StatusOr<HttpResponse> Send(
      const std::string& method, const std::string& object,
      const std::string& query,
      std::vector<std::pair<std::string, std::string>> headers,
      absl::string_view body, std::string* body_into = nullptr,
      int64_t expected_body_bytes = 0) {
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
    request.ca_file = options_.ca_bundle;
    request.reuse_connection = options_.reuse_connections;
    request.body_into = body_into;
    request.expected_body_bytes = expected_body_bytes;
    absl::StatusOr<HttpResponse> response;
    thread_local std::mt19937_64 rng(std::random_device{}());
    for (int attempt = 1;; ++attempt) {
      response = PerformHttp(request);
      // (A certificate the CA bundle does not vouch for is no network
      // error: FAILED_PRECONDITION, not retried.)
      const bool retry =
          (!response.ok() && absl::IsUnavailable(response.status())) ||
          (response.ok() &&
           (response->status >= 500 || response->status == 429));
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
    if (!response.ok() && absl::IsUnavailable(response.status())) {
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
    // A bucket in another region: S3 says which in a header (301
    // PermanentRedirect, 400 on HEAD) or in the error's <Region>
    // (AuthorizationHeaderMalformed).
    std::string region = XmlFirst(r.body, "Region");
    if (auto it = r.headers.find("x-amz-bucket-region");
        it != r.headers.end()) {
      region = it->second;
    }
    if (!region.empty() && region != options_.region) {
      return absl::FailedPreconditionError(
          absl::StrCat("bucket '", bucket_, "' is in region ", region, ", not ",
                       options_.region, ": set --s3_region=", region,
                       " (or AWS_REGION=", region, ") (", text, ")"));
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

  // Ranges of one object, each a GET with a Range header (retried as
  // every request is); 416 (range past the end) reads as nothing.
  class RangeReader final : public StorageReader {
   public:
    RangeReader(S3Storage* storage, std::string object)
        : storage_(storage), object_(std::move(object)) {}

    absl::Status ReadAt(int64_t offset, int64_t length,
                        std::string* out) override {
      if (offset < 0 || length < 0) {
        return absl::InvalidArgumentError("negative read range");
      }
      out->clear();
      if (length == 0) return absl::OkStatus();
      // Straight into *out, reserved: a stream reusing its buffer copies
      // and allocates nothing per range.
      auto r = storage_->Send(
          "GET", object_, "",
          {{"Range", absl::StrCat("bytes=", offset, "-", offset + length - 1)}},
          "", out, length);
      if (!r.ok()) return r.status();
      if (r->status == 416) return absl::OkStatus();
      if (absl::Status s = storage_->Check(*r, "GET", object_); !s.ok()) {
        return s;
      }
      if (r->status == 200) {
        // A server that ignores Range sends the whole object.
        const int64_t size = static_cast<int64_t>(out->size());
        const int64_t begin = std::min(offset, size);
        *out = out->substr(begin, std::min(length, size - begin));
        return absl::OkStatus();
      }
      if (static_cast<int64_t>(out->size()) > length) {
        return absl::DataLossError(absl::StrCat(
            "GET s3://", storage_->bucket_, "/", object_, " of ", length,
            " bytes at ", offset, " returned ", out->size()));
      }
      return absl::OkStatus();
    }

   private:
    S3Storage* const storage_;
    const std::string object_;
  };

  // Streams an object: a single PUT if it fits one part, else a multipart
  // upload whose parts go up while later ones are still being appended
  // (at most upload_threads at once). Part sizes start at part_bytes and
  // double every 1,000 parts, so 10,000 parts cover any size.
  class Writer final : public StorageWriter {
   public:
    Writer(S3Storage* s3, std::string object)
        : s3_(s3), object_(std::move(object)) {}
    ~Writer() override {
      if (!closed_) Abort();
    }

    absl::Status Append(absl::string_view data) override {
      if (closed_) return absl::FailedPreconditionError("writer is closed");
      while (!data.empty()) {
        const size_t room = PartBytes() - buffer_.size();
        const size_t n = std::min(room, data.size());
        buffer_.append(data.data(), n);
        data.remove_prefix(n);
        if (buffer_.size() == PartBytes()) {
          if (absl::Status s = SendPart(); !s.ok()) return s;
        }
      }
      return absl::OkStatus();
    }

    absl::Status Close() override {
      if (closed_) return absl::FailedPreconditionError("writer is closed");
      if (upload_id_.empty()) {
        auto r = s3_->Send("PUT", object_, "", {}, buffer_);
        absl::Status s = r.ok() ? s3_->Check(*r, "PUT", object_) : r.status();
        if (s.ok()) closed_ = true;
        return s;
      }
      if (!buffer_.empty()) {
        if (absl::Status s = SendPart(); !s.ok()) return s;
      }
      if (absl::Status s = WaitParts(0); !s.ok()) return s;
      std::string xml = "<CompleteMultipartUpload>";
      for (size_t i = 0; i < etags_.size(); ++i) {
        absl::StrAppend(&xml, "<Part><PartNumber>", i + 1,
                        "</PartNumber><ETag>", etags_[i], "</ETag></Part>");
      }
      absl::StrAppend(&xml, "</CompleteMultipartUpload>");
      auto r = s3_->Send("POST", object_, IdQuery(),
                         {{"Content-Type", "application/xml"}}, xml);
      absl::Status s = r.ok()
                           ? s3_->Check(*r, "CompleteMultipartUpload", object_)
                           : r.status();
      // S3 can answer 200 with an error document.
      if (s.ok() && r->body.find("<Error>") != std::string::npos) {
        s = absl::InternalError(
            absl::StrCat("CompleteMultipartUpload of s3://", s3_->bucket_, "/",
                         object_, " failed: ", XmlFirst(r->body, "Code"), " ",
                         XmlFirst(r->body, "Message")));
      }
      if (s.ok()) closed_ = true;
      return s;
    }

   private:
    size_t PartBytes() const {
      const int doublings =
          std::min<int>(static_cast<int>(etags_.size()) / 1000, 10);
      return static_cast<size_t>(s3_->options_.part_bytes) << doublings;
    }
    std::string IdQuery() const {
      return absl::StrCat("uploadId=", UriEncode(upload_id_, false));
    }

    absl::Status SendPart() {
      if (upload_id_.empty()) {
        auto created = s3_->Send("POST", object_, "uploads=", {}, "");
        if (!created.ok()) return created.status();
        if (absl::Status s =
                s3_->Check(*created, "CreateMultipartUpload", object_);
            !s.ok()) {
          return s;
        }
        upload_id_ = XmlFirst(created->body, "UploadId");
        if (upload_id_.empty()) {
          return absl::InternalError(
              absl::StrCat("CreateMultipartUpload of s3://", s3_->bucket_, "/",
                           object_, " answered without an UploadId"));
        }
      }
      if (absl::Status s = WaitParts(s3_->options_.upload_threads - 1);
          !s.ok()) {
        return s;
      }
      const int number = static_cast<int>(etags_.size()) + 1;
      etags_.emplace_back();
      auto part = std::make_shared<std::string>(std::move(buffer_));
      buffer_.clear();
      std::string* etag = &etags_.back();
      in_flight_.push_back(std::async(std::launch::async, [this, part, number,
                                                           etag] {
        auto r = s3_->Send("PUT", object_,
                           absl::StrCat("partNumber=", number, "&", IdQuery()),
                           {}, *part);
        absl::Status s =
            r.ok()
                ? s3_->Check(*r, absl::StrCat("UploadPart ", number), object_)
                : r.status();
        if (!s.ok()) return s;
        auto it = r->headers.find("etag");
        if (it == r->headers.end()) {
          return absl::InternalError(absl::StrCat(
              "UploadPart ", number, " of ", object_, " returned no ETag"));
        }
        *etag = it->second;
        return absl::OkStatus();
      }));
      return absl::OkStatus();
    }

    // Waits until at most `max` parts are in flight; the first failure.
    absl::Status WaitParts(int max) {
      absl::Status first;
      while (static_cast<int>(in_flight_.size()) > std::max(max, 0)) {
        absl::Status s = in_flight_.front().get();
        in_flight_.pop_front();
        if (!s.ok() && first.ok()) first = s;
      }
      return first;
    }

    void Abort() {
      (void)WaitParts(0);
      if (upload_id_.empty()) return;
      auto r = s3_->Send("DELETE", object_, IdQuery(), {}, "");
      if (!r.ok() || r->status >= 300) {
        LOG(WARNING) << "AbortMultipartUpload of s3://" << s3_->bucket_ << "/"
                     << object_ << " failed ("
                     << (r.ok() ? absl::StrCat("HTTP ", r->status)
                                : std::string(r.status().message()))
                     << "); the store may keep the parts until its lifecycle "
                        "rule removes them";
      }
    }

    S3Storage* const s3_;
    const std::string object_;
    std::string buffer_;
    std::string upload_id_;
    std::deque<std::string> etags_;  // stable addresses as parts are added
    std::deque<std::future<absl::Status>> in_flight_;
    bool closed_ = false;
  };

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
