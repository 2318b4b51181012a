// Whether this translation unit is built with AddressSanitizer, under
// either compiler: gcc defines __SANITIZE_ADDRESS__, clang 14 (which
// builds the ASan pass, .bazelrc) answers __has_feature. Tests use it to
// scale work that ASan slows and to skip resident-memory bounds that its
// quarantine (freed memory held on purpose) would break.
#ifndef PSRT_UTIL_SANITIZERS_H_
#define PSRT_UTIL_SANITIZERS_H_

#if defined(__SANITIZE_ADDRESS__)
#define PSRT_ADDRESS_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PSRT_ADDRESS_SANITIZER 1
#endif
#endif

#endif  // PSRT_UTIL_SANITIZERS_H_
