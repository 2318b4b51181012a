// Builds for x86-64-v3 (the default, .bazelrc: AVX2 and FMA, which the
// worker's matrix products need to run at speed) refuse, with a message,
// to start on a CPU without those instructions, instead of dying of
// SIGILL somewhere later. Linked into every binary (alwayslink); runs
// before other static initializers, and is itself compiled for the
// baseline x86-64 so that it can run anywhere.
#include <cpuid.h>
#include <unistd.h>

#include <cstring>

namespace psrt {
namespace {

#if defined(__x86_64__) && defined(__AVX2__)
// BMI2 and F16C from CPUID itself: clang 14's __builtin_cpu_supports does
// not know them (the ASan pass is built by clang).
__attribute__((target("arch=x86-64"))) bool HasBmi2AndF16c() {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || (ecx & bit_F16C) == 0) {
    return false;
  }
  return __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) &&
         (ebx & bit_BMI2) != 0;
}

__attribute__((constructor(101), target("arch=x86-64"))) void
RequireBuildCpuFeatures() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      HasBmi2AndF16c()) {
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
