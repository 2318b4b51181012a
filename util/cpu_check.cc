// Builds for x86-64-v3 (the default, .bazelrc: AVX2 and FMA, which the
// worker's matrix products need to run at speed) refuse, with a message,
// to start on a CPU without those instructions, instead of dying of
// SIGILL somewhere later. Linked into every binary (alwayslink); runs
// before other static initializers, and is itself compiled for the
// baseline x86-64 so that it can run anywhere.
#include <unistd.h>

#include <cstring>

namespace psrt {
namespace {

#if defined(__x86_64__) && defined(__AVX2__)
__attribute__((constructor(101), target("arch=x86-64"))) void
RequireBuildCpuFeatures() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("f16c")) {
    return;
  }
  static const char kMessage[] =
      "psrt: this binary was built for x86-64-v3 (AVX2, FMA, BMI2, F16C), "
      "which this CPU lacks; build with `bazel build --config=portable ...` "
      "(baseline x86-64, slower model math)\n";
  if (write(STDERR_FILENO, kMessage, std::strlen(kMessage)) < 0) {
    // Nothing better to do: the exit status says it.
  }
  _exit(1);
}
#endif

}  // namespace
}  // namespace psrt
