// Storage on Amazon S3 or an S3-compatible store, over libcurl with AWS
// Signature V4 (signed by libcurl; the payload SHA-256 computed here).
// Objects above S3Options::part_bytes go up as multipart uploads with parts
// in parallel (no 5 GB single-PUT limit); a failed multipart upload is
// aborted. 5xx answers, throttling and network errors are retried with
// exponential backoff; other errors name the bucket, key and S3's code.
#ifndef PSRT_STORAGE_S3_STORAGE_H_
#define PSRT_STORAGE_S3_STORAGE_H_

#include <memory>
#include <string>

#include "storage/storage.h"

namespace psrt {

std::unique_ptr<Storage> NewS3Storage(std::string bucket, std::string prefix,
                                      const S3Options& options);

// Hex SHA-256 of data (the x-amz-content-sha256 header).
std::string Sha256Hex(absl::string_view data);

}  // namespace psrt

#endif  // PSRT_STORAGE_S3_STORAGE_H_
