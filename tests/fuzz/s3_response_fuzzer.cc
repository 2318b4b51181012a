// What an S3 endpoint (or anyone answering in its place) returns: a
// ListObjectsV2 page, error bodies, and the credential JSON of the
// container and instance metadata endpoints.
#include <cstdint>
#include <string>
#include <vector>

#include "storage/aws_credentials.h"
#include "storage/s3_xml.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<psrt::StorageObject> objects;
  std::string next;
  (void)psrt::ParseListPage(text, "run1/ckpt-", 5, "token", &objects, &next);
  (void)psrt::ParseListPage(text, "", 0, "", &objects, &next);
  (void)psrt::XmlFirst(text, "Code");
  (void)psrt::XmlFirst(text, "UploadId");
  for (const char* field :
       {"AccessKeyId", "SecretAccessKey", "Token", "Expiration"}) {
    (void)psrt::JsonStringField(text, field);
  }
  return 0;
}
