#include "dataplane/libfabric.h"

#include <dlfcn.h>
#include <signal.h>

#include <array>
#include <string>
#include <type_traits>

#include "absl/strings/str_cat.h"

namespace psrt::dataplane {
namespace {

// Every signal a library's constructor is known to take (libinfinipath:
// all of these), and SIGFPE for good measure.
constexpr std::array<int, 7> kKeptSignals = {SIGINT, SIGTERM, SIGSEGV, SIGBUS,
                                             SIGILL, SIGABRT, SIGFPE};

// The symbol versions a link against libfabric 1.17's headers binds (the
// structs those headers lay out): what `objdump -T` lists as each
// function's default version there. A newer libfabric keeps them.
struct Symbol {
  const char* name;
  const char* version;
};
constexpr Symbol kGetinfo = {"fi_getinfo", "FABRIC_1.3"};
constexpr Symbol kFreeinfo = {"fi_freeinfo", "FABRIC_1.3"};
constexpr Symbol kDupinfo = {"fi_dupinfo", "FABRIC_1.3"};
constexpr Symbol kFabric = {"fi_fabric", "FABRIC_1.1"};
constexpr Symbol kStrerror = {"fi_strerror", "FABRIC_1.0"};

absl::StatusOr<LibFabric> Load() {
  std::array<struct sigaction, kKeptSignals.size()> before;
  for (size_t i = 0; i < kKeptSignals.size(); ++i) {
    sigaction(kKeptSignals[i], nullptr, &before[i]);
  }
  void* handle = dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
  for (size_t i = 0; i < kKeptSignals.size(); ++i) {
    sigaction(kKeptSignals[i], &before[i], nullptr);
  }
  if (handle == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("libfabric is not installed (", dlerror(),
                     "); install Debian's libfabric1, or use "
                     "--data_plane=grpc"));
  }
  LibFabric loaded;
  std::string missing;
  auto bind = [&](const Symbol& symbol, auto* slot) {
    void* address = dlvsym(handle, symbol.name, symbol.version);
    if (address == nullptr) {
      absl::StrAppend(&missing, missing.empty() ? "" : ", ", symbol.name, "@",
                      symbol.version);
    }
    *slot = reinterpret_cast<std::remove_pointer_t<decltype(slot)>>(address);
  };
  bind(kGetinfo, &loaded.getinfo);
  bind(kFreeinfo, &loaded.freeinfo);
  bind(kDupinfo, &loaded.dupinfo);
  bind(kFabric, &loaded.fabric);
  bind(kStrerror, &loaded.strerror);
  if (!missing.empty()) {
    // Kept loaded: its constructors ran, and unloading a library with
    // providers' threads is not safe.
    return absl::UnavailableError(
        absl::StrCat("libfabric.so.1 lacks ", missing,
                     " (older than 1.17?); use --data_plane=grpc"));
  }
  return loaded;
}

// Loaded once, on first use (a thread-safe static).
const absl::StatusOr<LibFabric>& Library() {
  static const absl::StatusOr<LibFabric>* const library =
      new absl::StatusOr<LibFabric>(Load());
  return *library;
}

}  // namespace

absl::StatusOr<const LibFabric*> LoadLibFabric() {
  const absl::StatusOr<LibFabric>& library = Library();
  if (!library.ok()) return library.status();
  return &*library;
}

const LibFabric& Fabric() { return *Library(); }

}  // namespace psrt::dataplane
