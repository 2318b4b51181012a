#include "security/cluster_members.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "glog/logging.h"

namespace psrt {
namespace {

// "host" of "host:port" or "[v6]:port".
std::string HostOf(const std::string& host_port) {
  if (absl::StartsWith(host_port, "[")) {
    const size_t close = host_port.find(']');
    return close == std::string::npos ? host_port
                                      : host_port.substr(1, close - 1);
  }
  const size_t colon = host_port.rfind(':');
  return colon == std::string::npos ? host_port : host_port.substr(0, colon);
}

std::vector<std::string> HostsOf(const std::vector<std::string>& host_ports) {
  std::vector<std::string> hosts;
  for (const std::string& hp : host_ports) hosts.push_back(HostOf(hp));
  return hosts;
}

std::string Unmapped(std::string ip) {
  absl::string_view v = ip;
  if (absl::ConsumePrefix(&v, "::ffff:") && v.find(':') == v.npos &&
      v.find('.') != v.npos) {
    return std::string(v);
  }
  return ip;
}

}  // namespace

ClusterMembers::ClusterMembers(std::vector<std::string> host_ports,
                               absl::Duration refresh)
    : hosts_(HostsOf(host_ports)), refresh_(refresh) {
  absl::MutexLock lock(&mu_);
  Resolve();
}

std::string ClusterMembers::PeerIp(const std::string& peer) {
  absl::string_view rest = peer;
  if (absl::ConsumePrefix(&rest, "ipv4:")) {
    const size_t colon = rest.rfind(':');
    return std::string(rest.substr(0, colon));
  }
  if (absl::ConsumePrefix(&rest, "ipv6:")) {
    // "[addr]:port", with '%' scope ids URL-encoded by gRPC.
    if (!absl::ConsumePrefix(&rest, "[")) return "";
    const size_t close = rest.find(']');
    if (close == rest.npos) return "";
    return Unmapped(std::string(rest.substr(0, close)));
  }
  return "";
}

void ClusterMembers::Resolve() {
  resolved_at_ = absl::Now();
  for (const std::string& host : hosts_) {
    addrinfo hints = {};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) {
      LOG(WARNING) << "cluster member '" << host << "' does not resolve now";
      continue;
    }
    for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
      char text[INET6_ADDRSTRLEN] = {};
      const void* addr =
          a->ai_family == AF_INET
              ? static_cast<const void*>(
                    &reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr)
              : static_cast<const void*>(
                    &reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr);
      if (inet_ntop(a->ai_family, addr, text, sizeof(text)) != nullptr) {
        ips_.insert(Unmapped(text));
      }
    }
    freeaddrinfo(found);
  }
}

absl::Status ClusterMembers::Check(const std::string& peer,
                                   const char* method) {
  const std::string ip = PeerIp(peer);
  absl::MutexLock lock(&mu_);
  if (!ip.empty() && ips_.contains(ip)) return absl::OkStatus();
  if (!ip.empty() && absl::Now() - resolved_at_ >= refresh_) {
    Resolve();
    if (ips_.contains(ip)) return absl::OkStatus();
  }
  return absl::PermissionDeniedError(
      absl::StrCat(method,
                   " is served only to the cluster's own hosts (its PS and "
                   "workers); caller ",
                   peer, " is not one of them"));
}

}  // namespace psrt
