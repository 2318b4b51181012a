#include "dataplane/forked_server.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "dataplane/shm_regions.h"

namespace psrt::dataplane {
namespace {

void WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w <= 0) _exit(3);
    p += w;
    n -= static_cast<size_t>(w);
  }
}

bool ReadAll(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

void WriteString(int fd, const std::string& s) {
  const uint32_t n = static_cast<uint32_t>(s.size());
  WriteAll(fd, &n, 4);
  WriteAll(fd, s.data(), n);
}

bool ReadString(int fd, std::string* s) {
  uint32_t n = 0;
  if (!ReadAll(fd, &n, 4) || n > (1 << 20)) return false;
  s->resize(n);
  return ReadAll(fd, s->data(), n);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ForkedServer>> ForkedServer::Start(
    const DataPlaneServerOptions& options, const CallHandler& handler,
    int challenges) {
  int fds[2];
  if (pipe(fds) != 0) return absl::InternalError("pipe() failed");
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork() failed");
  if (pid == 0) {
    close(fds[0]);
    auto server = DataPlaneServer::Start(options, handler);
    if (!server.ok()) {
      WriteString(fds[1], "");
      WriteString(fds[1], std::string(server.status().message()));
      _exit(1);
    }
    WriteString(fds[1], (*server)->address());
    for (int i = 0; i < challenges; ++i) {
      const Challenge c = (*server)->IssueChallenge();
      WriteAll(fds[1], &c.connection_id, 4);
      WriteString(fds[1], c.nonce);
    }
    close(fds[1]);
    while (true) pause();
  }
  close(fds[1]);
  std::unique_ptr<ForkedServer> forked(new ForkedServer());
  forked->pid_ = pid;  // killed by the destructor on every path out
  std::string why;
  if (!ReadString(fds[0], &forked->address_) || forked->address_.empty()) {
    ReadString(fds[0], &why);
    close(fds[0]);
    return absl::UnavailableError(absl::StrCat(
        "data-plane server (", options.fabric.provider, "): ", why));
  }
  for (int i = 0; i < challenges; ++i) {
    Challenge c;
    if (!ReadAll(fds[0], &c.connection_id, 4) ||
        !ReadString(fds[0], &c.nonce)) {
      close(fds[0]);
      return absl::InternalError("the server's pipe closed early");
    }
    forked->challenges_.push_back(c);
  }
  close(fds[0]);
  return forked;
}

namespace {}  // namespace

ForkedServer::~ForkedServer() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    RemoveStaleShmRegions(pid_);
  }
}

}  // namespace psrt::dataplane
