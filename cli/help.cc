#include "cli/help.h"

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "gflags/gflags.h"

namespace psrt {

void HandleHelpFlag(int argc, char** argv, const char* flags_from) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 ||
        std::strcmp(argv[i], "-help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::cout << argv[0] << ": " << gflags::ProgramUsage() << "\n\n";
      std::vector<gflags::CommandLineFlagInfo> flags;
      gflags::GetAllFlags(&flags);
      // The binary's own flags, then the shared TLS/auth flags if linked.
      for (const char* from : {flags_from, "cli/security_flags"}) {
        std::string current_file;
        for (const auto& f : flags) {
          if (f.filename.find(from) == std::string::npos) continue;
          if (f.filename != current_file) {
            current_file = f.filename;
            std::cout << "\n  Flags from " << f.filename << ":\n";
          }
          std::cout << gflags::DescribeOneFlag(f);
        }
      }
      std::exit(0);
    }
  }
}

}  // namespace psrt
