// AWS credentials, found the way the AWS SDKs look for them:
//   1. AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (/ AWS_SESSION_TOKEN);
//   2. web identity, as EKS IAM roles for service accounts provide it:
//      AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN (+ AWS_ROLE_SESSION_NAME)
//      exchanged at STS (AssumeRoleWithWebIdentity, unsigned) in AWS_REGION
//      (or AWS_DEFAULT_REGION; the global endpoint without one;
//      AWS_ENDPOINT_URL_STS overrides), the token file read at each refresh;
//   3. the shared credentials file (AWS_SHARED_CREDENTIALS_FILE or
//      ~/.aws/credentials), profile AWS_PROFILE or "default", then the
//      config file (AWS_CONFIG_FILE or ~/.aws/config, "[profile NAME]");
//   4. the container endpoint that ECS, SageMaker training jobs and EKS Pod
//      Identity provide (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI on
//      http://169.254.170.2, or AWS_CONTAINER_CREDENTIALS_FULL_URI, with
//      AWS_CONTAINER_AUTHORIZATION_TOKEN or the contents of
//      AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE when set);
//   5. the EC2 instance metadata service, IMDSv2 (a PUT for a session token,
//      then the role's credentials), at AWS_EC2_METADATA_SERVICE_ENDPOINT or
//      http://169.254.169.254; off when AWS_EC2_METADATA_DISABLED=true.
// Temporary credentials (2, 4, 5) are refreshed 5 minutes before they
// expire. A source that is configured but fails is an error naming it,
// not a silent fall-through to the next.
#ifndef PSRT_STORAGE_AWS_CREDENTIALS_H_
#define PSRT_STORAGE_AWS_CREDENTIALS_H_

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace psrt {

struct AwsCredentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // empty for long-term keys
  absl::Time expiration = absl::InfiniteFuture();
  std::string source;  // where they came from, for logs
};

// The base of the container credential endpoint; overridable with
// PSRT_AWS_CONTAINER_CREDENTIALS_HOST (for tests on loopback).
std::string ContainerCredentialsHost();

class AwsCredentialsProvider {
 public:
  // Cached credentials, fetched again when close to expiry. Errors name
  // every place that was tried.
  absl::StatusOr<AwsCredentials> Get() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Mutex mu_;
  bool cached_ ABSL_GUARDED_BY(mu_) = false;
  AwsCredentials credentials_ ABSL_GUARDED_BY(mu_);
};

// Each source on its own (NOT_FOUND when it is not configured).
absl::StatusOr<AwsCredentials> CredentialsFromEnvironment();
absl::StatusOr<AwsCredentials> CredentialsFromWebIdentity();
absl::StatusOr<AwsCredentials> CredentialsFromSharedFile();
absl::StatusOr<AwsCredentials> CredentialsFromContainer();
absl::StatusOr<AwsCredentials> CredentialsFromInstanceMetadata();

// The region to sign for when none is given: AWS_REGION, AWS_DEFAULT_REGION,
// else the AWS_PROFILE profile's `region` in the config file ("" if none).
std::string AwsRegionFromEnvironmentOrConfig();

// The CA bundle to trust for AWS endpoints, as the AWS CLI and SDKs take
// it: AWS_CA_BUNDLE, else the AWS_PROFILE profile's `ca_bundle` in the
// config file ("" if neither: the system's CAs).
std::string AwsCaBundleFromEnvironmentOrConfig();

// The key = value pairs of section `section` of an INI file (the AWS
// credentials and config files); NOT_FOUND if the file does not exist.
absl::StatusOr<absl::flat_hash_map<std::string, std::string>> ReadIniSection(
    const std::string& path, absl::string_view section);

// The string value of `field` in a flat JSON object (the credential
// endpoints' answers); NOT_FOUND if absent.
absl::StatusOr<std::string> JsonStringField(absl::string_view json,
                                            absl::string_view field);

}  // namespace psrt

#endif  // PSRT_STORAGE_AWS_CREDENTIALS_H_
