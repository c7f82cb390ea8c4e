/*
 * instructions.c — marks the benchmark's timed regions for callgrind
 * (scripts/instructions.sh): each region is counted on its own and dumped under its
 * case and system, so that instructions per task can be read beside the timings. Where
 * valgrind's headers are missing, or outside valgrind, the marks cost a few
 * instructions and do nothing.
 */
#include "bench_support.h"

#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define BENCH_HAVE_CALLGRIND 1
#endif
#endif

void bench_instructions_begin(void) {
#ifdef BENCH_HAVE_CALLGRIND
    CALLGRIND_START_INSTRUMENTATION;
    CALLGRIND_ZERO_STATS;
#endif
}

void bench_instructions_end(const char *label) {
#ifdef BENCH_HAVE_CALLGRIND
    CALLGRIND_DUMP_STATS_AT(label);
    CALLGRIND_STOP_INSTRUMENTATION;
#else
    (void)label;
#endif
}
