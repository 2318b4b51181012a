#!/usr/bin/env python3
"""Prints the C++ sources clang's thread-safety analysis can find anything in.

A finding needs a capability in the translation unit: a mutex or condition
variable named there, or an annotation (ABSL_GUARDED_BY, ..._LOCKS_REQUIRED,
...) on something it reaches. So a source is listed when it, or a psrt header
it includes (directly or through other psrt headers), names one of them; a
source whose whole include closure names none cannot produce a finding, and
checking it would only parse it. Absl's own headers are not followed: a
source can reach absl::Mutex or a lock only by naming it, which is matched.

    tools/lint/thread_safety_sources.py FILE.cc...   prints those of FILE.cc...
                                                     that need the analysis
"""
import os
import re
import sys

CAPABILITY = re.compile(
    r"ABSL_(PT_)?GUARDED_BY|LOCKS_REQUIRED|LOCKS_EXCLUDED|ABSL_ACQUIRE|"
    r"ABSL_RELEASE|ABSL_TRY_ACQUIRE|ABSL_NO_THREAD_SAFETY|ABSL_ASSERT_|"
    r"ABSL_SCOPED_LOCKABLE|ABSL_LOCKABLE|ABSL_RETURN_CAPABILITY|"
    r"absl::Mutex|MutexLock|absl::CondVar|absl::Condition|std::mutex|"
    r"std::shared_mutex|std::condition_variable"
)
PROJECT_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def needs_analysis(path, memo, visiting):
    """True if `path` or a psrt header it includes names a capability."""
    if path in memo:
        return memo[path]
    if path in visiting or not os.path.isfile(path):
        return False
    visiting.add(path)
    with open(path, errors="replace") as f:
        text = f.read()
    found = bool(CAPABILITY.search(text)) or any(
        needs_analysis(header, memo, visiting) for header in PROJECT_INCLUDE.findall(text)
    )
    visiting.discard(path)
    memo[path] = found
    return found


def main(argv):
    memo = {}
    for path in argv[1:]:
        if needs_analysis(path, memo, set()):
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
