#include "tests/local_cluster.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "dataplane/shm_regions.h"
#include "util/spawn.h"

namespace psrt {

int PickUnusedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return 0;
  }
  close(fd);
  return ntohs(addr.sin_port);
}

namespace {

// Clusters started by this test process so far: each one's PS logs get
// their own names, so a later cluster never overwrites an earlier one's.
std::atomic<int> clusters_started{0};

// The last `max_bytes` of the file at `path` ("" if it cannot be read).
std::string FileTail(const std::string& path, size_t max_bytes) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string all = text.str();
  return all.size() <= max_bytes ? all : all.substr(all.size() - max_bytes);
}

// WaitForExit, then what a process killed with SIGKILL left in /dev/shm.
int ReapProcess(pid_t pid, absl::Time deadline) {
  const int exit_code = WaitForExit(pid, deadline);
  dataplane::RemoveStaleShmRegions(pid);
  return exit_code;
}

}  // namespace

std::string LocalCluster::log(int ps) const {
  return FileTail(logs_[ps], std::string::npos);
}

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Start(
    Options options) {
  // A port picked free can be taken by another process before the PS binds
  // it (tests run in parallel); such a start is retried on fresh ports.
  constexpr int kAttempts = 3;
  absl::Status last;
  for (int attempt = 1; attempt <= kAttempts; ++attempt) {
    std::unique_ptr<LocalCluster> cluster(new LocalCluster());
    cluster->options_ = options;
    cluster->PickAddresses();
    absl::Status s = cluster->LaunchAll();
    if (s.ok()) s = cluster->WaitUntilServing(-1, kStartTimeout);
    if (s.ok()) return cluster;
    last = s;
    if (!cluster->LostPortRace()) break;
  }
  return last;
}

void LocalCluster::PickAddresses() {
  const int sequence = clusters_started.fetch_add(1);
  const char* dir = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  // The kernel may hand a port just closed out again: no two of this
  // cluster's ports may be the same (a PS's metrics port was once another
  // PS's gRPC port).
  absl::flat_hash_set<int> taken;
  auto distinct_port = [&taken] {
    int port;
    do {
      port = PickUnusedPort();
    } while (!taken.insert(port).second);
    return port;
  };
  for (int i = 0; i < options_.num_ps; ++i) {
    spec_.ps.push_back(absl::StrCat(PsHost(i), ":", distinct_port()));
    metrics_ports_.push_back(distinct_port());
    logs_.push_back(absl::StrCat(dir ? dir : "/tmp", "/ps_", i, "_", getpid(),
                                 "_", sequence, ".log"));
  }
  for (int i = 0; i < std::max(1, options_.num_workers); ++i) {
    spec_.workers.push_back(absl::StrCat(options_.host, ":", distinct_port()));
  }
  pids_.assign(options_.num_ps, -1);
}

absl::Status LocalCluster::LaunchAll() {
  for (int i = 0; i < options_.num_ps; ++i) {
    if (absl::Status s = Launch(i); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status LocalCluster::WaitUntilServing(int only_ps,
                                            absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (int i = 0; i < options_.num_ps; ++i) {
    if (only_ps >= 0 && i != only_ps) continue;
    ClientOptions client_options = MakeClientOptions();
    client_options.ps_addresses = {spec_.ps[i]};
    auto client = Client::Connect(client_options);
    if (!client.ok()) return client.status();
    while (true) {
      // Short probes, so a PS that died is reported at once, not after the
      // whole timeout.
      const absl::Status healthy =
          (*client)->WaitForServers(absl::Milliseconds(500));
      if (healthy.ok()) break;
      int status = 0;
      if (pids_[i] > 0 && waitpid(pids_[i], &status, WNOHANG) == pids_[i]) {
        pids_[i] = -1;
        return absl::UnavailableError(absl::StrCat(
            "PS ", i, " (", spec_.ps[i], ") exited during start with ",
            WIFEXITED(status) ? absl::StrCat("code ", WEXITSTATUS(status))
                              : absl::StrCat("signal ", WTERMSIG(status)),
            "; end of ", logs_[i], ":\n", FileTail(logs_[i], 3000)));
      }
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            "PS ", i, " (", spec_.ps[i], ", pid ", pids_[i],
            ") still running but not serving after ",
            absl::FormatDuration(timeout), ": ", healthy.message(), "; end of ",
            logs_[i], ":\n", FileTail(logs_[i], 3000)));
      }
    }
  }
  return absl::OkStatus();
}

bool LocalCluster::LostPortRace() const {
  for (const std::string& log : logs_) {
    const std::string tail = FileTail(log, 3000);
    if (tail.find("cannot listen on") != std::string::npos ||
        tail.find("cannot serve metrics on") != std::string::npos ||
        tail.find("Address already in use") != std::string::npos) {
      return true;
    }
  }
  return false;
}

absl::Status LocalCluster::Launch(int ps,
                                  const std::vector<std::string>& more_flags) {
  std::vector<std::string> args = {
      options_.binary,
      absl::StrCat("--cluster=", ClusterSpecToJson(spec_)),
      absl::StrCat("--task_index=", ps),
      absl::StrCat("--bind_address=", PsHost(ps)),
      absl::StrCat("--metrics_port=", metrics_ports_[ps]),
      "--metrics_bind_address=127.0.0.1",
      "--shutdown_grace_secs=2",
  };
  args.insert(args.end(), options_.extra_flags.begin(),
              options_.extra_flags.end());
  args.insert(args.end(), more_flags.begin(), more_flags.end());
  SpawnOptions output;
  output.output_file = logs_[ps];  // appended: a restart keeps the first run
  auto pid = SpawnProcess(args, output);
  if (!pid.ok()) return pid.status();
  pids_[ps] = *pid;
  return absl::OkStatus();
}

std::string LocalCluster::PsHost(int ps) const {
  return options_.one_host_per_ps ? absl::StrCat("127.0.0.", ps + 1)
                                  : options_.host;
}

ClientOptions LocalCluster::MakeClientOptions() const {
  ClientOptions options;
  options.security = options_.client_security;
  options.ps_addresses = spec_.ps;
  options.call_timeout = absl::Seconds(30);
  return options;
}

int LocalCluster::Kill(int ps, int signal) {
  if (pids_[ps] <= 0) return -1;
  kill(pids_[ps], signal);
  int status = 0;
  waitpid(pids_[ps], &status, 0);
  dataplane::RemoveStaleShmRegions(pids_[ps]);
  pids_[ps] = -1;
  return status;
}

absl::Status LocalCluster::Restart(int ps,
                                   std::vector<std::string> more_flags) {
  if (absl::Status s = Launch(ps, more_flags); !s.ok()) return s;
  return WaitUntilServing(ps, kStartTimeout);
}

LocalCluster::~LocalCluster() {
  for (pid_t pid : pids_) {
    if (pid > 0) kill(pid, SIGTERM);
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  for (pid_t& pid : pids_) {
    if (pid > 0) ReapProcess(pid, deadline);  // SIGKILL after the deadline
    pid = -1;
  }
}

std::vector<LocalCluster::WorkerRun> LocalCluster::RunWorkers(
    const std::string& binary, const std::vector<std::string>& args,
    const std::vector<int>& indices, absl::Duration timeout,
    const std::string& log_prefix) {
  std::vector<std::string> tf_configs;
  for (int index : indices) {
    ClusterSpec spec = spec_;
    spec.has_task = true;
    spec.task = {"worker", index};
    tf_configs.push_back(ClusterSpecToJson(spec));
  }
  return RunPrograms(binary, args, tf_configs, timeout, log_prefix);
}

std::vector<LocalCluster::WorkerRun> RunPrograms(
    const std::string& binary, const std::vector<std::string>& args,
    const std::vector<std::string>& tf_configs, absl::Duration timeout,
    const std::string& log_prefix) {
  std::vector<pid_t> pids;
  std::vector<std::string> logs;
  const char* dir = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  for (size_t p = 0; p < tf_configs.size(); ++p) {
    logs.push_back(log_prefix.empty()
                       ? absl::StrCat(dir ? dir : "/tmp", "/run_", p, "_",
                                      getpid(), "_",
                                      absl::ToUnixMicros(absl::Now()), ".log")
                       : absl::StrCat(log_prefix, p, ".log"));
    std::vector<std::string> argv = {binary};
    argv.insert(argv.end(), args.begin(), args.end());
    SpawnOptions options;
    options.output_file = logs.back();
    options.truncate_output = true;
    options.environment = {
        {"TF_CONFIG", tf_configs[p].empty()
                          ? std::nullopt
                          : std::optional<std::string>(tf_configs[p])}};
    auto spawned = SpawnProcess(argv, options);
    if (!spawned.ok()) {
      // Reported as a run that exited 127 (as a shell reports it), its
      // output the reason.
      std::ofstream(logs.back()) << spawned.status().message() << "\n";
    }
    pids.push_back(spawned.ok() ? *spawned : -1);
  }
  std::vector<LocalCluster::WorkerRun> runs(pids.size());
  const absl::Time deadline = absl::Now() + timeout;
  for (size_t i = 0; i < pids.size(); ++i) {
    runs[i].exit_code = pids[i] < 0 ? 127 : ReapProcess(pids[i], deadline);
    std::ifstream in(logs[i]);
    std::stringstream text;
    text << in.rdbuf();
    runs[i].output = text.str();
  }
  return runs;
}

std::string FreshTestDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(base ? base : "/tmp", "/", name);
  std::system(
      absl::StrCat("rm -rf '", dir, "' && mkdir -p '", dir, "'").c_str());
  return dir;
}

absl::StatusOr<std::string> FetchMetrics(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("connect to metrics port ", port));
  }
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
  if (write(fd, request.data(), request.size()) !=
      static_cast<ssize_t>(request.size())) {
    close(fd);
    return absl::UnavailableError("write to metrics port");
  }
  std::string response;
  char buffer[65536];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof(buffer))) > 0) response.append(buffer, n);
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  if (response.rfind("HTTP/1.", 0) != 0 || body == std::string::npos) {
    return absl::InternalError("malformed HTTP response from /metrics");
  }
  return response.substr(body + 4);
}

double MetricValue(const std::string& text, const std::string& sample) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(sample + " ", 0) == 0) {
      double v;
      if (absl::SimpleAtod(line.substr(sample.size() + 1), &v)) return v;
    }
  }
  return -1;
}

}  // namespace psrt
