// Where checkpoints live: one interface over local disk / shared file
// systems (file://, plain paths) and S3 (s3://bucket/prefix).
//
// Keys are '/'-separated paths relative to the storage root. A write is
// atomic for readers: they see the previous object or the whole new one,
// never a part (files: temp name + fsync + rename; S3: PUT and multipart
// uploads only appear when complete).
#ifndef PSRT_STORAGE_STORAGE_H_
#define PSRT_STORAGE_STORAGE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace psrt {

struct StorageObject {
  std::string key;  // relative to the root
  int64_t bytes = 0;
};

// Streams one object. Nothing is visible under the key until Close()
// succeeds; destroying a writer without Close() abandons the object (the
// temporary file is removed, a multipart upload aborted).
class StorageWriter {
 public:
  virtual ~StorageWriter() = default;
  virtual absl::Status Append(absl::string_view data) = 0;
  virtual absl::Status Close() = 0;
};

// Reads byte ranges of one object, so a large object (a shard file) can be
// streamed through a small buffer instead of held whole.
class StorageReader {
 public:
  virtual ~StorageReader() = default;
  // Bytes [offset, offset + length) of the object into *out (replacing its
  // contents); fewer where the object ends before offset + length, none
  // from an offset at or past its end.
  virtual absl::Status ReadAt(int64_t offset, int64_t length,
                              std::string* out) = 0;
};

class Storage {
 public:
  virtual ~Storage() = default;

  // A writer for object `key`, replacing any previous one when closed.
  virtual absl::StatusOr<std::unique_ptr<StorageWriter>> NewWriter(
      absl::string_view key) = 0;
  // Writes `data` as object `key` (NewWriter, Append, Close).
  virtual absl::Status Write(absl::string_view key, absl::string_view data);
  // The whole object. NOT_FOUND (naming it) if absent.
  virtual absl::StatusOr<std::string> Read(absl::string_view key) = 0;
  // A reader of object `key`'s byte ranges; NOT_FOUND (naming it) if absent
  // (S3: at the first read). Files read with pread, S3 with ranged GETs;
  // the default reads the whole object once and serves ranges from memory.
  virtual absl::StatusOr<std::unique_ptr<StorageReader>> NewReader(
      absl::string_view key);
  // How many bytes a stream should read at once: a range small enough to
  // stay in cache while it is checked and copied (2 MiB), larger where
  // each read is a request round trip (S3: 8 MiB).
  virtual int64_t preferred_read_bytes() const { return 2 << 20; }
  // Every object whose key starts with `prefix`, sorted by key.
  virtual absl::StatusOr<std::vector<StorageObject>> List(
      absl::string_view prefix) = 0;
  // Removes the object; absent objects are not an error.
  virtual absl::Status Delete(absl::string_view key) = 0;

  // The storage root as a URI, for messages (file:///..., s3://b/p).
  virtual std::string Describe(absl::string_view key = "") const = 0;
};

struct S3Options {
  // http(s)://host:port of an S3-compatible store (path-style requests);
  // empty: AWS, https://<bucket>.s3.<region>.amazonaws.com.
  std::string endpoint;
  // Region to sign for; empty: $AWS_REGION, $AWS_DEFAULT_REGION, the
  // AWS_PROFILE profile's region in ~/.aws/config, us-east-1. A bucket in
  // another region is FAILED_PRECONDITION naming the region to set.
  std::string region;
  // Objects larger than this go up as multipart uploads of this part size
  // (at least 5 MiB; grown where 10,000 parts would not suffice).
  int64_t part_bytes = 16 << 20;
  // Parts of one object uploaded at once.
  int upload_threads = 8;
  // Attempts per request for 5xx answers, throttling and network errors,
  // with exponential backoff starting at `retry_base_ms`.
  int max_attempts = 6;
  int retry_base_ms = 100;
  // Whole-request timeout and connect timeout.
  int request_timeout_secs = 600;
  int connect_timeout_secs = 10;
  // PEM file of the CAs to trust for an https endpoint (a private CA's
  // MinIO, a proxy); empty: $AWS_CA_BUNDLE, the AWS_PROFILE profile's
  // ca_bundle in ~/.aws/config, else the system's CAs.
  std::string ca_bundle;
  // Requests share one pool of open (TLS) connections per process; false:
  // a new connection and handshake per request, for proxies that mishandle
  // keep-alive (and to measure what the pool is worth).
  bool reuse_connections = true;
};

// Opens the storage a URI names: a plain path or file:///abs/path (local
// disk, EFS, NFS) or s3://bucket[/prefix]. INVALID_ARGUMENT for anything
// else. Nothing is contacted or created yet.
absl::StatusOr<std::unique_ptr<Storage>> OpenStorage(
    absl::string_view uri, const S3Options& s3_options = S3Options());

// How a process opens storage by URI: OpenStorage with the S3 options it
// was configured with, built once (StorageOpenerFor) and handed to whatever
// reads or writes checkpoints; tests hand in MemoryStorageOpener instead
// (storage/memory_storage.h).
using StorageOpener =
    std::function<absl::StatusOr<std::unique_ptr<Storage>>(absl::string_view)>;
StorageOpener StorageOpenerFor(const S3Options& s3_options);

// OK if `key` stays inside the storage root: '/'-separated components,
// none empty, "." or "..", no leading '/', no control characters. With
// `prefix`, the last component may be empty or partial (List("ckpt-"),
// List("name/")). Every Storage checks its keys with it, so no caller can
// reach outside the root whatever a request or a manifest says.
absl::Status CheckStorageKey(absl::string_view key, bool prefix = false);

}  // namespace psrt

#endif  // PSRT_STORAGE_STORAGE_H_
