#include "tools/ps_bench/iperf3_check.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "util/spawn.h"

namespace psrt {
namespace {

int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

// Runs `args` (looked up in PATH) with stdout captured and stderr
// discarded; returns what it printed and its exit status (-1: it could
// not start or was killed).
std::pair<std::string, int> RunCapturing(const std::vector<std::string>& args) {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return {"", -1};
  SpawnOptions options;
  options.search_path = true;
  options.stdout_fd = pipe_fds[1];
  options.output_file = "/dev/null";
  auto pid = SpawnProcess(args, options);
  close(pipe_fds[1]);
  if (!pid.ok()) {
    close(pipe_fds[0]);
    return {"", -1};
  }
  std::string out;
  char buffer[4096];
  for (ssize_t n; (n = read(pipe_fds[0], buffer, sizeof(buffer))) > 0;) {
    out.append(buffer, static_cast<size_t>(n));
  }
  close(pipe_fds[0]);
  const int code = WaitForExit(*pid, absl::InfiniteFuture());
  return {out, code < 128 ? code : -1};
}

}  // namespace

absl::StatusOr<double> ParseIperf3Json(absl::string_view json) {
  const size_t sum = json.find("\"sum_received\"");
  if (sum == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        "iperf3 report has no end.sum_received (did the test run?)");
  }
  const size_t key = json.find("\"bits_per_second\"", sum);
  const size_t colon = json.find(':', key);
  if (key == absl::string_view::npos || colon == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        "iperf3 report: sum_received has no bits_per_second");
  }
  const std::string rest(json.substr(colon + 1, 64));
  char* end = nullptr;
  const double bits = std::strtod(rest.c_str(), &end);
  if (end == rest.c_str() || !std::isfinite(bits) || bits <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("iperf3 report: bad bits_per_second '", rest, "'"));
  }
  return bits / 8 / 1e9;
}

absl::StatusOr<double> MeasureIperf3(const std::string& iperf3_binary,
                                     absl::Duration duration,
                                     size_t write_bytes) {
  const int port = FreeLoopbackPort();
  if (port < 0) return absl::UnavailableError("iperf3: no free loopback port");
  const std::string port_text = absl::StrCat(port);
  // The server serves one test and exits (-1).
  SpawnOptions quiet;
  quiet.search_path = true;
  quiet.output_file = "/dev/null";
  auto spawned = SpawnProcess(
      {iperf3_binary, "-s", "-1", "-B", "127.0.0.1", "-p", port_text}, quiet);
  if (!spawned.ok()) {
    return absl::NotFoundError(absl::StrCat(
        spawned.status().message(),
        " (install it: apt-get install iperf3; or --iperf3= to skip)"));
  }
  const pid_t server = *spawned;
  const std::string seconds = absl::StrCat(
      std::max<int64_t>(1, std::llround(absl::ToDoubleSeconds(duration))));
  absl::StatusOr<double> result =
      absl::UnavailableError("iperf3: the client never reached the server");
  // The server needs a moment to listen; the client fails fast until then.
  for (int attempt = 0; attempt < 30; ++attempt) {
    int status = 0;
    if (waitpid(server, &status, WNOHANG) == server) {
      return absl::UnavailableError(absl::StrCat(
          "'", iperf3_binary, " -s -p ", port_text,
          "' exited before its client reached it (",
          WIFEXITED(status) ? absl::StrCat("code ", WEXITSTATUS(status))
                            : absl::StrCat("signal ", WTERMSIG(status)),
          ")"));
    }
    auto [out, code] =
        RunCapturing({iperf3_binary, "-c", "127.0.0.1", "-p", port_text, "-t",
                      seconds, "-l", absl::StrCat(write_bytes), "--json"});
    if (code == 0) {
      result = ParseIperf3Json(out);
      break;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  kill(server, SIGTERM);
  waitpid(server, nullptr, 0);
  return result;
}

}  // namespace psrt
