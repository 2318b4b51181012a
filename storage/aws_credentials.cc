#include "storage/aws_credentials.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "storage/http_client.h"
#include "storage/s3_xml.h"

namespace psrt {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

// What an endpoint answered, for an error message that goes to logs: an
// AWS error's code and message, never the body itself (it may hold
// secrets: an answer that is not what was asked for is not trusted).
std::string DescribeAnswer(absl::string_view body) {
  const std::string code = XmlFirst(body, "Code");
  if (!code.empty()) {
    std::string message = XmlFirst(body, "Message");
    if (message.size() > 160) message = message.substr(0, 160) + "...";
    return absl::StrCat(code, message.empty() ? "" : ": ", message);
  }
  return absl::StrCat("an answer of ", body.size(), " bytes, not shown");
}

// Parses the temporary credentials JSON both endpoints return.
absl::StatusOr<AwsCredentials> ParseTemporary(absl::string_view json,
                                              absl::string_view source) {
  AwsCredentials c;
  c.source = std::string(source);
  auto key = JsonStringField(json, "AccessKeyId");
  auto secret = JsonStringField(json, "SecretAccessKey");
  if (!key.ok() || !secret.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, " answered without AccessKeyId/SecretAccessKey (",
                     DescribeAnswer(json), ")"));
  }
  c.access_key_id = *key;
  c.secret_access_key = *secret;
  if (auto token = JsonStringField(json, "Token"); token.ok()) {
    c.session_token = *token;
  }
  if (auto expiration = JsonStringField(json, "Expiration"); expiration.ok()) {
    std::string error;
    if (!absl::ParseTime(absl::RFC3339_full, *expiration, &c.expiration,
                         &error)) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": cannot parse Expiration '", *expiration, "': ", error));
    }
  }
  return c;
}

// The whole of a small file with surrounding whitespace removed (a token
// file), or NOT_FOUND naming it.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path,
                                          absl::string_view variable) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat(variable, "=", path, ": cannot read the file"));
  }
  std::stringstream text;
  text << in.rdbuf();
  return std::string(absl::StripAsciiWhitespace(text.str()));
}

// STS's regional endpoint for the configured region (AWS_REGION or
// AWS_DEFAULT_REGION), the global one without a region;
// AWS_ENDPOINT_URL_STS overrides both (as in the AWS SDKs).
std::string StsEndpoint() {
  std::string endpoint = Env("AWS_ENDPOINT_URL_STS");
  if (!endpoint.empty()) {
    while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
    return endpoint;
  }
  std::string region = Env("AWS_REGION");
  if (region.empty()) region = Env("AWS_DEFAULT_REGION");
  if (region.empty()) return "https://sts.amazonaws.com";
  return absl::StrCat("https://sts.", region, ".amazonaws.com",
                      absl::StartsWith(region, "cn-") ? ".cn" : "");
}

absl::StatusOr<HttpResponse> Fetch(HttpRequest request,
                                   absl::string_view source) {
  request.timeout_secs = 5;
  request.connect_timeout_secs = 2;
  if (absl::StartsWith(request.url, "https://")) {
    request.ca_file = AwsCaBundleFromEnvironmentOrConfig();
  }
  auto response = PerformHttp(request);
  if (!response.ok()) {
    return absl::UnavailableError(
        absl::StrCat(source, ": ", response.status().message()));
  }
  if (response->status != 200) {
    return absl::PermissionDeniedError(
        absl::StrCat(source, ": HTTP ", response->status, " from ", request.url,
                     " (", DescribeAnswer(response->body), ")"));
  }
  return response;
}

}  // namespace

absl::StatusOr<std::string> JsonStringField(absl::string_view json,
                                            absl::string_view field) {
  const std::string quoted = absl::StrCat("\"", field, "\"");
  size_t pos = json.find(quoted);
  if (pos == absl::string_view::npos) {
    return absl::NotFoundError(absl::StrCat("no field ", field));
  }
  pos = json.find(':', pos + quoted.size());
  if (pos == absl::string_view::npos) return absl::NotFoundError("no ':'");
  pos = json.find('"', pos);
  if (pos == absl::string_view::npos)
    return absl::NotFoundError("not a string");
  std::string value;
  for (++pos; pos < json.size() && json[pos] != '"'; ++pos) {
    if (json[pos] == '\\' && pos + 1 < json.size()) ++pos;
    value.push_back(json[pos]);
  }
  return value;
}

std::string ContainerCredentialsHost() {
  const std::string host = Env("PSRT_AWS_CONTAINER_CREDENTIALS_HOST");
  return host.empty() ? "http://169.254.170.2" : host;
}

absl::StatusOr<AwsCredentials> CredentialsFromEnvironment() {
  AwsCredentials c;
  c.access_key_id = Env("AWS_ACCESS_KEY_ID");
  c.secret_access_key = Env("AWS_SECRET_ACCESS_KEY");
  c.session_token = Env("AWS_SESSION_TOKEN");
  c.source = "environment (AWS_ACCESS_KEY_ID)";
  if (c.access_key_id.empty() && c.secret_access_key.empty()) {
    return absl::NotFoundError("AWS_ACCESS_KEY_ID is not set");
  }
  if (c.access_key_id.empty() || c.secret_access_key.empty()) {
    return absl::InvalidArgumentError(
        "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must both be set");
  }
  return c;
}

absl::StatusOr<AwsCredentials> CredentialsFromWebIdentity() {
  const std::string token_file = Env("AWS_WEB_IDENTITY_TOKEN_FILE");
  const std::string role_arn = Env("AWS_ROLE_ARN");
  if (token_file.empty() && role_arn.empty()) {
    return absl::NotFoundError(
        "AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN are not set");
  }
  if (token_file.empty() || role_arn.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "web identity needs both AWS_WEB_IDENTITY_TOKEN_FILE and "
        "AWS_ROLE_ARN; ",
        token_file.empty() ? "AWS_WEB_IDENTITY_TOKEN_FILE" : "AWS_ROLE_ARN",
        " is not set"));
  }
  // Read on every refresh: EKS rotates the projected token file.
  auto token = ReadTokenFile(token_file, "AWS_WEB_IDENTITY_TOKEN_FILE");
  if (!token.ok()) return absl::InvalidArgumentError(token.status().message());
  std::string session = Env("AWS_ROLE_SESSION_NAME");
  if (session.empty()) {
    session = absl::StrCat("psrt-", absl::ToUnixMillis(absl::Now()));
  }
  const std::string body = absl::StrCat(
      "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn=",
      UriEncode(role_arn, false),
      "&RoleSessionName=", UriEncode(session, false),
      "&WebIdentityToken=", UriEncode(*token, false));
  HttpRequest request;
  request.method = "POST";
  request.url = StsEndpoint() + "/";
  request.headers.push_back(
      {"Content-Type", "application/x-www-form-urlencoded"});
  request.body = body;
  const std::string source =
      absl::StrCat("web identity (STS AssumeRoleWithWebIdentity at ",
                   request.url, " as ", role_arn, ")");
  auto response = Fetch(request, source);
  if (!response.ok()) return response.status();
  AwsCredentials c;
  c.source = source;
  c.access_key_id = XmlFirst(response->body, "AccessKeyId");
  c.secret_access_key = XmlFirst(response->body, "SecretAccessKey");
  c.session_token = XmlFirst(response->body, "SessionToken");
  if (c.access_key_id.empty() || c.secret_access_key.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, " answered without credentials (",
                     DescribeAnswer(response->body), ")"));
  }
  const std::string expiration = XmlFirst(response->body, "Expiration");
  std::string error;
  if (!expiration.empty() &&
      !absl::ParseTime(absl::RFC3339_full, expiration, &c.expiration, &error)) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": cannot parse Expiration '", expiration, "': ", error));
  }
  return c;
}

absl::StatusOr<absl::flat_hash_map<std::string, std::string>> ReadIniSection(
    const std::string& path, absl::string_view section) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, " does not exist"));
  absl::flat_hash_map<std::string, std::string> values;
  std::string line, current;
  while (std::getline(in, line)) {
    absl::string_view l = absl::StripAsciiWhitespace(line);
    if (l.empty() || l[0] == '#' || l[0] == ';') continue;
    if (l.front() == '[' && l.back() == ']') {
      current =
          std::string(absl::StripAsciiWhitespace(l.substr(1, l.size() - 2)));
      continue;
    }
    if (current != section) continue;
    std::pair<std::string, std::string> kv =
        absl::StrSplit(l, absl::MaxSplits('=', 1));
    values[std::string(absl::StripAsciiWhitespace(kv.first))] =
        std::string(absl::StripAsciiWhitespace(kv.second));
  }
  return values;
}

namespace {

std::string AwsFile(const char* variable, const char* name) {
  const std::string path = Env(variable);
  if (!path.empty()) return path;
  const std::string home = Env("HOME");
  return home.empty() ? "" : absl::StrCat(home, "/.aws/", name);
}

std::string Profile() {
  const std::string profile = Env("AWS_PROFILE");
  return profile.empty() ? "default" : profile;
}

// The profile's section of ~/.aws/config: "[default]" or "[profile NAME]".
absl::StatusOr<absl::flat_hash_map<std::string, std::string>>
ConfigFileProfile() {
  const std::string path = AwsFile("AWS_CONFIG_FILE", "config");
  if (path.empty()) return absl::NotFoundError("HOME is not set");
  const std::string profile = Profile();
  return ReadIniSection(
      path, profile == "default" ? profile : absl::StrCat("profile ", profile));
}

}  // namespace

absl::StatusOr<AwsCredentials> CredentialsFromSharedFile() {
  const std::string profile = Profile();
  // The credentials file first, then the config file, which may hold keys
  // too (as `aws configure` can write them).
  std::vector<std::string> looked;
  for (const bool config : {false, true}) {
    const std::string path =
        config ? AwsFile("AWS_CONFIG_FILE", "config")
               : AwsFile("AWS_SHARED_CREDENTIALS_FILE", "credentials");
    if (path.empty()) return absl::NotFoundError("HOME is not set");
    auto values = config ? ConfigFileProfile() : ReadIniSection(path, profile);
    if (!values.ok()) {
      looked.push_back(std::string(values.status().message()));
      continue;
    }
    AwsCredentials c;
    c.source = absl::StrCat(path, " [", profile, "]");
    c.access_key_id = (*values)["aws_access_key_id"];
    c.secret_access_key = (*values)["aws_secret_access_key"];
    c.session_token = (*values)["aws_session_token"];
    if (!c.access_key_id.empty() && !c.secret_access_key.empty()) return c;
    looked.push_back(absl::StrCat(
        path, " has no aws_access_key_id/aws_secret_access_key in profile ",
        profile));
  }
  return absl::NotFoundError(absl::StrJoin(looked, "; "));
}

std::string AwsRegionFromEnvironmentOrConfig() {
  for (const char* variable : {"AWS_REGION", "AWS_DEFAULT_REGION"}) {
    const std::string region = Env(variable);
    if (!region.empty()) return region;
  }
  auto profile = ConfigFileProfile();
  if (profile.ok()) return (*profile)["region"];
  return "";
}

std::string AwsCaBundleFromEnvironmentOrConfig() {
  const std::string bundle = Env("AWS_CA_BUNDLE");
  if (!bundle.empty()) return bundle;
  auto profile = ConfigFileProfile();
  if (profile.ok()) return (*profile)["ca_bundle"];
  return "";
}

absl::StatusOr<AwsCredentials> CredentialsFromContainer() {
  HttpRequest request;
  const std::string relative = Env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
  const std::string full = Env("AWS_CONTAINER_CREDENTIALS_FULL_URI");
  if (!relative.empty()) {
    request.url = ContainerCredentialsHost() + relative;
  } else if (!full.empty()) {
    request.url = full;
  } else {
    return absl::NotFoundError(
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI/FULL_URI are not set");
  }
  std::string token = Env("AWS_CONTAINER_AUTHORIZATION_TOKEN");
  // EKS Pod Identity hands the token as a file (rotated: read each time).
  const std::string token_file = Env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
  if (token.empty() && !token_file.empty()) {
    auto from_file =
        ReadTokenFile(token_file, "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
    if (!from_file.ok()) {
      return absl::InvalidArgumentError(from_file.status().message());
    }
    token = *from_file;
  }
  if (!token.empty()) request.headers.push_back({"Authorization", token});
  const std::string source =
      absl::StrCat("container credentials ", request.url);
  auto response = Fetch(request, source);
  if (!response.ok()) return response.status();
  return ParseTemporary(response->body, source);
}

absl::StatusOr<AwsCredentials> CredentialsFromInstanceMetadata() {
  if (absl::EqualsIgnoreCase(Env("AWS_EC2_METADATA_DISABLED"), "true")) {
    return absl::NotFoundError("AWS_EC2_METADATA_DISABLED=true");
  }
  std::string base = Env("AWS_EC2_METADATA_SERVICE_ENDPOINT");
  if (base.empty()) base = "http://169.254.169.254";
  while (!base.empty() && base.back() == '/') base.pop_back();
  const std::string source = absl::StrCat("instance metadata (IMDSv2) ", base);
  HttpRequest token_request;
  token_request.method = "PUT";
  token_request.url = base + "/latest/api/token";
  token_request.headers.push_back(
      {"X-aws-ec2-metadata-token-ttl-seconds", "21600"});
  auto token = Fetch(token_request, source);
  if (!token.ok()) return token.status();
  HttpRequest role_request;
  role_request.url = base + "/latest/meta-data/iam/security-credentials/";
  role_request.headers.push_back({"X-aws-ec2-metadata-token", token->body});
  auto role = Fetch(role_request, source);
  if (!role.ok()) return role.status();
  const std::string role_name(absl::StripAsciiWhitespace(
      absl::string_view(role->body).substr(0, role->body.find('\n'))));
  if (role_name.empty()) {
    return absl::NotFoundError(absl::StrCat(source, ": no IAM role attached"));
  }
  HttpRequest credentials_request = role_request;
  credentials_request.url += role_name;
  auto credentials = Fetch(credentials_request, source);
  if (!credentials.ok()) return credentials.status();
  return ParseTemporary(credentials->body,
                        absl::StrCat(source, " role ", role_name));
}

absl::StatusOr<AwsCredentials> AwsCredentialsProvider::Get() {
  absl::MutexLock lock(&mu_);
  if (cached_ && credentials_.expiration - absl::Minutes(5) > absl::Now()) {
    return credentials_;
  }
  std::vector<std::string> tried;
  for (auto* source : {&CredentialsFromEnvironment, &CredentialsFromWebIdentity,
                       &CredentialsFromSharedFile, &CredentialsFromContainer,
                       &CredentialsFromInstanceMetadata}) {
    auto c = source();
    if (c.ok()) {
      LOG(INFO) << "AWS credentials from " << c->source;
      credentials_ = *std::move(c);
      cached_ = true;
      return credentials_;
    }
    if (!absl::IsNotFound(c.status()) &&
        source != &CredentialsFromInstanceMetadata) {
      return c.status();  // configured but broken: say so, do not fall back
    }
    tried.push_back(std::string(c.status().message()));
  }
  return absl::UnauthenticatedError(absl::StrCat(
      "no AWS credentials found; tried: ", absl::StrJoin(tried, "; ")));
}

}  // namespace psrt
