#include "storage/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"

namespace psrt {
namespace {

// libcurl's global state, and one connection pool for the process: every
// request's easy handle joins a share of connections, TLS sessions and DNS
// answers, so requests to the same host reuse an open (TLS) connection
// instead of a new TCP connect and handshake each. The share locks per data
// kind; easy handles themselves are per request and per thread.
class ConnectionPool {
 public:
  ConnectionPool() {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    share_ = curl_share_init();
    curl_share_setopt(share_, CURLSHOPT_LOCKFUNC, &ConnectionPool::Lock);
    curl_share_setopt(share_, CURLSHOPT_UNLOCKFUNC, &ConnectionPool::Unlock);
    curl_share_setopt(share_, CURLSHOPT_USERDATA, this);
    for (curl_lock_data data :
         {CURL_LOCK_DATA_CONNECT, CURL_LOCK_DATA_SSL_SESSION,
          CURL_LOCK_DATA_DNS}) {
      curl_share_setopt(share_, CURLSHOPT_SHARE, data);
    }
  }
  CURLSH* share() const { return share_; }

 private:
  static void Lock(CURL*, curl_lock_data data, curl_lock_access,
                   void* self) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    static_cast<ConnectionPool*>(self)->mutexes_[Slot(data)].Lock();
  }
  static void Unlock(CURL*, curl_lock_data data,
                     void* self) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    static_cast<ConnectionPool*>(self)->mutexes_[Slot(data)].Unlock();
  }
  static size_t Slot(curl_lock_data data) {
    return std::min<size_t>(static_cast<size_t>(data), kSlots - 1);
  }

  static constexpr size_t kSlots = CURL_LOCK_DATA_LAST + 1;
  absl::Mutex mutexes_[kSlots];
  CURLSH* share_ = nullptr;  // lives as long as the process
};

struct Upload {
  absl::string_view data;
  size_t offset = 0;
};

size_t ReadBody(char* buffer, size_t size, size_t count, void* user) {
  auto* upload = static_cast<Upload*>(user);
  const size_t n = std::min(size * count, upload->data.size() - upload->offset);
  std::memcpy(buffer, upload->data.data() + upload->offset, n);
  upload->offset += n;
  return n;
}

size_t WriteBody(char* data, size_t size, size_t count, void* user) {
  static_cast<std::string*>(user)->append(data, size * count);
  return size * count;
}

size_t WriteHeader(char* data, size_t size, size_t count, void* user) {
  absl::string_view line(data, size * count);
  const size_t colon = line.find(':');
  if (colon != absl::string_view::npos) {
    auto* headers =
        static_cast<absl::flat_hash_map<std::string, std::string>*>(user);
    (*headers)[absl::AsciiStrToLower(line.substr(0, colon))] =
        std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
  }
  return size * count;
}

}  // namespace

absl::StatusOr<HttpResponse> PerformHttp(const HttpRequest& request) {
  static ConnectionPool* const pool = new ConnectionPool();
  CURL* curl = curl_easy_init();
  if (curl == nullptr) return absl::InternalError("curl_easy_init failed");
  HttpResponse response;
  Upload upload{request.body, 0};
  curl_slist* headers = nullptr;
  for (const auto& [name, value] : request.headers) {
    headers =
        curl_slist_append(headers, absl::StrCat(name, ": ", value).c_str());
  }
  // libcurl adds these unless told not to; S3 needs neither.
  headers = curl_slist_append(headers, "Expect:");
  headers = curl_slist_append(headers, "Accept:");
  const bool has_content_type = std::any_of(
      request.headers.begin(), request.headers.end(), [](const auto& h) {
        return absl::EqualsIgnoreCase(h.first, "content-type");
      });
  if (!has_content_type) headers = curl_slist_append(headers, "Content-Type:");
  char error[CURL_ERROR_SIZE] = {0};
  if (request.reuse_connection) {
    curl_easy_setopt(curl, CURLOPT_SHARE, pool->share());
  } else {
    curl_easy_setopt(curl, CURLOPT_FRESH_CONNECT, 1L);
    curl_easy_setopt(curl, CURLOPT_FORBID_REUSE, 1L);
  }
  if (!request.ca_file.empty()) {
    curl_easy_setopt(curl, CURLOPT_CAINFO, request.ca_file.c_str());
  }
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(curl, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT,
                   static_cast<long>(request.timeout_secs));
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT,
                   static_cast<long>(request.connect_timeout_secs));
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, WriteBody);
  std::string* body =
      request.body_into != nullptr ? request.body_into : &response.body;
  body->clear();
  if (request.expected_body_bytes > 0) {
    body->reserve(static_cast<size_t>(request.expected_body_bytes));
  }
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, body);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, WriteHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &response.headers);
  if (request.method == "PUT" || request.method == "POST") {
    // Upload from memory with a known length (no chunked encoding).
    curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(curl, CURLOPT_READFUNCTION, ReadBody);
    curl_easy_setopt(curl, CURLOPT_READDATA, &upload);
    curl_easy_setopt(curl, CURLOPT_INFILESIZE_LARGE,
                     static_cast<curl_off_t>(request.body.size()));
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, request.method.c_str());
  } else if (request.method == "HEAD") {
    curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  } else if (request.method != "GET") {
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, request.method.c_str());
  }
  if (!request.aws_sigv4.empty()) {
    curl_easy_setopt(curl, CURLOPT_AWS_SIGV4, request.aws_sigv4.c_str());
    curl_easy_setopt(curl, CURLOPT_USERPWD, request.user_password.c_str());
  }
  const CURLcode code = curl_easy_perform(curl);
  if (code == CURLE_OK) {
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
  }
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  if (body != &response.body &&
      (code != CURLE_OK || response.status < 200 || response.status >= 300)) {
    response.body = std::move(*body);
    body->clear();
  }
  if (code != CURLE_OK) {
    std::string hint;
    if (code == CURLE_SSL_CACERT_BADFILE) {
      hint = absl::StrCat(" (cannot read the CA bundle '", request.ca_file,
                          "' named by AWS_CA_BUNDLE, the profile's ca_bundle "
                          "or --s3_ca_bundle)");
    } else if (code == CURLE_PEER_FAILED_VERIFICATION) {
      hint = request.ca_file.empty()
                 ? " (the endpoint's certificate is not signed by a CA this "
                   "system trusts: set AWS_CA_BUNDLE or --s3_ca_bundle to a "
                   "PEM file of the CA that signed it)"
                 : absl::StrCat(
                       " (the endpoint's certificate is not signed "
                       "by a CA in '",
                       request.ca_file, "')");
    }
    const std::string message = absl::StrCat(
        request.method, " ", request.url,
        " failed: ", error[0] != 0 ? error : curl_easy_strerror(code), hint);
    // Retrying cannot fix a certificate no trusted CA signed.
    return hint.empty() ? absl::UnavailableError(message)
                        : absl::FailedPreconditionError(message);
  }
  return response;
}

std::string UriEncode(absl::string_view s, bool keep_slash) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' ||
        c == '~' || (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppendFormat(&out, "%%%02X", c);
    }
  }
  return out;
}

}  // namespace psrt
