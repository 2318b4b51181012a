// --help for psrt's binaries: the usage message and the binary's own flags
// only (gflags' --help would list every flag of every linked library first).
#ifndef PSRT_CLI_HELP_H_
#define PSRT_CLI_HELP_H_

namespace psrt {

// If argv holds --help, -help or -h: prints the usage message and the flags
// defined in source files whose path contains `flags_from` (e.g.
// "ps_server/"), then exits 0. Call before gflags::ParseCommandLineFlags.
void HandleHelpFlag(int argc, char** argv, const char* flags_from);

}  // namespace psrt

#endif  // PSRT_CLI_HELP_H_
