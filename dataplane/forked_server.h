// A data-plane server in a child process, for tests and benchmarks: the
// shape a PS and its clients have (two processes), which shm needs (two of
// its endpoints in one process crashed here, 3 runs in 40). The child hands
// its fabric address and `challenges` challenges back over a pipe (the
// part the gRPC handshake plays in a PS) and serves until killed.
#ifndef PSRT_DATAPLANE_FORKED_SERVER_H_
#define PSRT_DATAPLANE_FORKED_SERVER_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dataplane/connection_gate.h"
#include "dataplane/data_plane_server.h"

namespace psrt::dataplane {

class ForkedServer {
 public:
  // UNAVAILABLE with the child's reason when its server cannot start.
  static absl::StatusOr<std::unique_ptr<ForkedServer>> Start(
      const DataPlaneServerOptions& options, const CallHandler& handler,
      int challenges);
  ~ForkedServer();  // kills and reaps the child

  const std::string& address() const { return address_; }
  // The challenges handed out, in order; each opens one connection.
  const std::vector<Challenge>& challenges() const { return challenges_; }
  pid_t pid() const { return pid_; }

 private:
  ForkedServer() = default;
  pid_t pid_ = -1;
  std::string address_;
  std::vector<Challenge> challenges_;
};

}  // namespace psrt::dataplane

#endif  // PSRT_DATAPLANE_FORKED_SERVER_H_
