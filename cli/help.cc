#include "cli/help.h"

#include <cstdlib>
#include <cstring>

#include "gflags/gflags.h"

namespace psrt {

void HandleHelpFlag(int argc, char** argv, const char* flags_from) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 ||
        std::strcmp(argv[i], "-help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      gflags::ShowUsageWithFlagsRestrict(argv[0], flags_from);
      std::exit(0);
    }
  }
}

}  // namespace psrt
