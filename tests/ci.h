// CI runs with every dependency installed (CI=true, passed through by
// .bazelrc): a test that can only skip elsewhere -- a missing package, no
// network namespaces -- fails there instead of passing as skipped.
#ifndef PSRT_TESTS_CI_H_
#define PSRT_TESTS_CI_H_

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace psrt {

inline bool InCi() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string(ci) == "true";
}

}  // namespace psrt

// Skips the test with `message`, or fails it in CI.
#define PSRT_SKIP_UNLESS_CI(message)                      \
  do {                                                    \
    if (::psrt::InCi()) {                                 \
      FAIL() << "CI must run this test, but " << message; \
    } else {                                              \
      GTEST_SKIP() << message;                            \
    }                                                     \
  } while (0)

#endif  // PSRT_TESTS_CI_H_
