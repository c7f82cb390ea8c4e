/*
 * heap.c — tidies the C heap between the benchmark's timed runs (see bench_support.h).
 */
#include "bench_support.h"

#include <malloc.h>

void bench_consolidate_heap(void) {
    /* malloc_trim first runs malloc_consolidate on every arena, merging the chunks
     * parked in the fast bins into the free lists; then it returns whole free pages to
     * the kernel. The merge is what is wanted here; the page release is a side effect
     * (the next run faults those pages back in), but glibc has no public call that
     * merges every arena without it (mallopt merges the main arena only, and sets
     * a parameter while doing it). */
    (void)malloc_trim(0);
}

size_t bench_allocation_size(const void *block) {
    return malloc_usable_size((void *)block);
}
