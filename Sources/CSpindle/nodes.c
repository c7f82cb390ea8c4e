/*
 * nodes.c — memory for task nodes: a per-thread cache that nodes freed on other threads
 * come back to.
 *
 * A task node is allocated by the thread that submits it and freed by the worker that
 * runs it. With malloc that is the worst case for the allocator: the submitter's
 * per-thread cache is always empty (its nodes are freed elsewhere), the worker's fills
 * and overflows into the shared arena, and the submitter's next malloc goes there too,
 * under the arena's lock, often after a consolidation or a trim that hands pages back
 * to the kernel only to fault them in again. So nodes are recycled here instead, the
 * way mimalloc recycles blocks freed by other threads (Leijen, Zorn and de Moura,
 * "Mimalloc: Free List Sharding in Action", APLAS 2019): each node remembers the heap
 * of the thread that allocated it, and goes back to that heap when it is freed.
 *
 * Layout: [header: owner heap, link | node]. `spindle_task_alloc` returns the node,
 * 16 bytes past the start of the block, at malloc's alignment. Nodes of up to
 * SPINDLE_TASK_CACHED_BYTES are cached; larger ones are plain malloc blocks whose
 * header says so (owner NULL).
 *
 * A cached block is carved from a slab of its heap's, never from malloc one by one: a
 * cache of blocks malloc'ed between the program's own allocations would pin one block
 * in every stretch of the heap a burst of submissions went through, and once the
 * program freed its own objects around them the free memory would be left in tens of
 * thousands of fragments, each reused cold and in turn. Slabs keep the cache in a few
 * contiguous regions and let the rest of the heap merge.
 *
 * Invariants
 *   N1  A heap's `local` list and its counts are touched only by the thread that owns
 *       the heap.
 *   N2  `remote` is a stack that any thread pushes a chain onto (a release CAS) and
 *       that only the owner empties, all at once (an acquire exchange). Nothing is ever
 *       popped singly, so there is no ABA: a push's CAS compares against a head it
 *       only links behind. The owner's acquire pairs with the pushers' releases, so a
 *       node's last use on the freeing thread happens before its reuse.
 *   N3  A heap and its slabs are never freed. When its thread exits it is abandoned:
 *       it keeps its cached nodes, and joins a list from which the next thread that
 *       needs a heap adopts it, with whatever was freed back to it in the meantime. So
 *       the number of heaps is the largest number of threads that were ever alive at
 *       once, and a node's owner pointer is always valid.
 *   N4  A thread that frees another heap's nodes gathers them in a batch for that heap
 *       and pushes the batch with one CAS: when it reaches NODE_BATCH, when a node of
 *       another heap comes along, when the thread parks as a worker, and when it exits.
 *       A batch is at most NODE_BATCH - 1 nodes held back from their owner.
 *   N5  A heap carves at most NODE_CACHE_MAX blocks from its slabs, so it has at most
 *       that many nodes, out, cached or on their way back. Past the bound it hands out
 *       plain blocks (owner NULL), which go back to malloc wherever they are freed: a
 *       burst of a million submissions costs mallocs for what the cache cannot hold,
 *       and the frees of the excess fall on the workers, not on the submitter. A chain
 *       is counted by its pushers (`remote_count`), not by walking it, so the local
 *       count may be off by the pushes in flight.
 *   N6  A cached node's header has its owner's low bit set; freeing a node whose bit is
 *       set traps, naming the double free, before it can corrupt a list.
 *   N7  A heap's slabs grow with what it has carved: the first holds SLAB_FIRST_BLOCKS,
 *       each later one as many blocks as all before it, up to SLAB_MAX_BLOCKS, and the
 *       last stops at the bound (N5). A heap holds its first slab, or at most twice the
 *       blocks it has carved, so a thread that submits a few tasks keeps a few
 *       kilobytes, however many threads do so.
 *
 * Model: Tests/Models/nodes.pml checks N2-N4 over every interleaving of a heap's owner,
 * two threads freeing its nodes in batches and the thread that adopts the heap when the
 * owner exits: no node held twice, none lost (scripts/model-check.sh).
 *
 * Under AddressSanitizer a cached node's payload is poisoned, so a use after free is
 * reported until the node is handed out again.
 *
 * Rejected: a global lock-free free list (every submit and every run on one contended
 * line, and ABA on pop); a cache on the worker that frees (the submitter, who
 * allocates, would still go to malloc every time); giving slabs back to malloc (a slab
 * can go only when all its nodes have, which needs a count per slab on the free path;
 * a heap's slabs are bounded instead, and kept for the thread that adopts it).
 */
#include "internal.h"

#include <stdint.h>
#include <stdlib.h>

#if defined(__SANITIZE_ADDRESS__)
#define SPINDLE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SPINDLE_ASAN 1
#endif
#endif
#ifdef SPINDLE_ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/* Chain length a freeing thread gathers for one owner before pushing it (N4). */
#define NODE_BATCH 32
/* Blocks a heap carves from its slabs (N5): 1 MiB of 64-byte blocks. A thread that
 * submits in bursts runs ahead of the workers by as many nodes as the burst's backlog;
 * a cache smaller than the backlog sends the difference through malloc and free on
 * every burst. The memory is what the burst needed anyway. */
#define NODE_CACHE_MAX 16384
/* Blocks per slab (N7): 2 KiB first, doubling to 64 KiB, below malloc's mmap
 * threshold. */
#define SLAB_FIRST_BLOCKS 32
#define SLAB_MAX_BLOCKS 1024

typedef struct node_heap node_heap;

typedef struct node_header {
    /* The allocating heap; NULL for a plain malloc block. Low bit set while cached (N6).
     * Written only by whoever holds the node: its user, or the list it is on. */
    uintptr_t owner;
    struct node_header *next; /* list link while cached or batched */
} node_header;

_Static_assert(sizeof(node_header) == 16, "the node keeps malloc's 16-byte alignment");
#define BLOCK_BYTES (sizeof(node_header) + SPINDLE_TASK_CACHED_BYTES)
#define CACHED_BIT ((uintptr_t)1)

struct node_heap {
    /* Pushed by other threads, emptied by the owner (N2). Own line: the owner's local
     * list below is not disturbed by the pushes. */
    SPINDLE_ALIGNED _Atomic(node_header *) remote;
    /* How many nodes the pushes onto `remote` carried: a count for N5 that spares the
     * owner a walk of the chain, whose nodes sit in the freeing threads' caches. Added
     * after each push and taken after each take, so it may count a push early or late;
     * the local count never goes below 0 (N5 is a bound, not a census). */
    _Atomic uint32_t remote_count;
    /* Owner only (N1). */
    SPINDLE_ALIGNED node_header *local;
    uint32_t nlocal;
    /* The slab being carved: its next block and its end; and the blocks carved so far,
     * from every slab (N5). */
    char *slab_next, *slab_end;
    uint32_t carved;
    /* Bytes of slab taken from malloc, for the tests of N7. */
    size_t slab_bytes;
    /* This thread's batch of another heap's nodes (N4). */
    node_heap *batch_owner;
    node_header *batch_first, *batch_last;
    uint32_t nbatch;
    /* The abandoned list's link, under abandoned_lock. */
    node_heap *next_abandoned;
};

static _Thread_local node_heap *tls_heap SPINDLE_TLS_INITIAL_EXEC;
/* Set once this thread's heap has been abandoned (its key's destructor ran): from then
 * on the thread allocates plain blocks and frees without batching. */
static _Thread_local bool tls_exited SPINDLE_TLS_INITIAL_EXEC;

static pthread_once_t heap_once = PTHREAD_ONCE_INIT;
static pthread_key_t heap_key;
static bool heap_key_ok; /* written once, in heap_setup, under heap_once */
static pthread_mutex_t abandoned_lock = PTHREAD_MUTEX_INITIALIZER;
static node_heap *abandoned; /* under abandoned_lock */

#ifdef SPINDLE_TESTING
/* Test counters (spindle_test_task_cache): blocks carved or malloc'ed, and blocks given
 * back to malloc. Relaxed, off the cache's fast paths, and only in debug builds
 * (seams.c). */
static _Atomic uint64_t blocks_malloced, blocks_freed;
#define COUNT_BLOCK(counter) atomic_fetch_add_explicit(&(counter), 1, memory_order_relaxed)
#else
#define COUNT_BLOCK(counter) ((void)0)
#endif

static void heap_exit(void *arg);

/* A fork()ed child has one thread; a lock another thread held at fork() is held for
 * ever there. The list itself is consistent: it changes only under the lock. */
static void reset_in_child(void) { pthread_mutex_init(&abandoned_lock, NULL); }

static void heap_setup(void) {
    heap_key_ok = pthread_key_create(&heap_key, heap_exit) == 0;
    pthread_atfork(NULL, NULL, reset_in_child);
}

/* Puts `h` on the list for the next new thread to adopt. */
static void give_back(node_heap *h) {
    pthread_mutex_lock(&abandoned_lock);
    h->next_abandoned = abandoned;
    abandoned = h;
    pthread_mutex_unlock(&abandoned_lock);
}

static node_heap *new_heap(void) {
    node_heap *h = aligned_alloc(SPINDLE_CACHELINE, sizeof *h);
    if (!h) return NULL;
    atomic_init(&h->remote, NULL);
    atomic_init(&h->remote_count, 0);
    h->local = NULL;
    h->nlocal = 0;
    h->slab_next = h->slab_end = NULL;
    h->carved = 0;
    h->slab_bytes = 0;
    h->batch_owner = NULL;
    h->batch_first = h->batch_last = NULL;
    h->nbatch = 0;
    h->next_abandoned = NULL;
    return h;
}

/* Makes `h` the calling thread's heap, or gives it back when the thread's exit could not
 * be seen. */
static node_heap *install_heap(node_heap *h) {
    if (pthread_setspecific(heap_key, h) != 0) {
        /* Cannot be told when this thread exits: give the heap back at once, for whatever
         * may still be freed back to it. */
        give_back(h);
        return NULL;
    }
    tls_heap = h;
    return h;
}

static node_heap *heap_for_thread_slow(void) {
    if (tls_exited) return NULL;
    pthread_once(&heap_once, heap_setup);
    /* Without a key a thread's exit could not be seen (N3): plain blocks instead. */
    if (!heap_key_ok) return NULL;
    pthread_mutex_lock(&abandoned_lock);
    node_heap *h = abandoned;
    if (h) abandoned = h->next_abandoned;
    pthread_mutex_unlock(&abandoned_lock);
    if (!h && !(h = new_heap())) return NULL;
    return install_heap(h);
}

static inline node_heap *heap_for_thread(void) {
    node_heap *h = tls_heap;
    return h ? h : heap_for_thread_slow();
}

/* Carves a block from `h`'s slabs, or returns NULL when it has carved its bound (N5)
 * or malloc refuses a new slab. */
static node_header *carve(node_heap *h) {
    if (h->slab_next == h->slab_end) {
        if (h->carved >= NODE_CACHE_MAX) return NULL;
        /* N7: as many blocks as carved so far, between the first slab's and the largest. */
        uint32_t blocks = h->carved < SLAB_FIRST_BLOCKS ? SLAB_FIRST_BLOCKS
                          : h->carved > SLAB_MAX_BLOCKS ? SLAB_MAX_BLOCKS
                                                        : h->carved;
        if (blocks > NODE_CACHE_MAX - h->carved) blocks = NODE_CACHE_MAX - h->carved;
        size_t bytes = (size_t)blocks * BLOCK_BYTES;
        char *slab = malloc(bytes);
        if (!slab) return NULL;
        h->slab_next = slab;
        h->slab_end = slab + bytes;
        h->slab_bytes += bytes;
    }
    node_header *b = (node_header *)h->slab_next;
    h->slab_next += BLOCK_BYTES;
    h->carved++;
    COUNT_BLOCK(blocks_malloced);
    return b;
}

/* Pushes the `n` nodes first..last onto `owner`'s remote stack (N2). An abandoned
 * owner's nodes wait there for its adopter (N3). */
static void push_remote(node_heap *owner, node_header *first, node_header *last, uint32_t n) {
    /* Relaxed load: the CAS below re-reads it. */
    node_header *head = atomic_load_explicit(&owner->remote, memory_order_relaxed);
    do {
        last->next = head;
        /* Release: our last writes to these nodes (and the user's, before free) happen
         * before the owner's reuse, which takes the stack with an acquire exchange.
         * Relaxed on failure: we retry with the new head. */
    } while (!atomic_compare_exchange_weak_explicit(&owner->remote, &head, first,
                                                    memory_order_release, memory_order_relaxed));
    /* Relaxed: a count for a bound (see remote_count). */
    atomic_fetch_add_explicit(&owner->remote_count, n, memory_order_relaxed);
}

static void flush_batch(node_heap *me) {
    if (!me->nbatch) return;
    push_remote(me->batch_owner, me->batch_first, me->batch_last, me->nbatch);
    me->batch_owner = NULL;
    me->batch_first = me->batch_last = NULL;
    me->nbatch = 0;
}

void spindle_task_cache_flush(void) {
    node_heap *h = tls_heap;
    if (h) flush_batch(h);
}

/* Makes what other threads freed back to us the local list (N2, N5), which is empty when
 * this is called. Returns the first node, taken off for the caller, or NULL when
 * nothing came back. */
static node_header *take_remote(node_heap *h) {
    /* Relaxed check first: the exchange would take the line for writing. */
    if (!atomic_load_explicit(&h->remote, memory_order_relaxed)) return NULL;
    /* Acquire pairs with the pushers' release CAS (N2). */
    node_header *first = atomic_exchange_explicit(&h->remote, NULL, memory_order_acquire);
    if (!first) return NULL;
    /* Relaxed: a count (see remote_count). The heap has carved NODE_CACHE_MAX blocks at
     * most (N5), so the chain is that long at most, and becomes the local list whole and
     * unwalked: each node is touched when it is handed out, and not before. */
    uint32_t n = atomic_exchange_explicit(&h->remote_count, 0, memory_order_relaxed);
    h->local = first->next;
    h->nlocal = n ? n - 1 : 0;
    return first;
}

void *spindle_task_alloc(size_t bytes) {
    node_heap *h;
    if (bytes > SPINDLE_TASK_CACHED_BYTES || !(h = heap_for_thread())) {
        node_header *b = malloc(sizeof(node_header) + bytes);
        if (!b) return NULL;
        COUNT_BLOCK(blocks_malloced);
        b->owner = 0;
        return b + 1;
    }
    node_header *b = h->local;
    if (b) {
        node_header *next = b->next;
        h->local = next;
        if (h->nlocal) h->nlocal--;
        /* The next node was most likely last written on another CPU (its free): fetch it
         * for writing now, while this one is filled in and submitted. */
        if (next) __builtin_prefetch(next, 1, 3);
    } else if (!(b = take_remote(h)) && !(b = carve(h))) {
        /* Past the bound (N5): a plain block, which goes back to malloc when freed. */
        b = malloc(sizeof(node_header) + bytes);
        if (!b) return NULL;
        COUNT_BLOCK(blocks_malloced);
        b->owner = 0;
        return b + 1;
    }
    /* The caller's bytes only: the rest of the block stays poisoned under ASan. */
    POISON(b + 1, SPINDLE_TASK_CACHED_BYTES);
    UNPOISON(b + 1, bytes);
    b->owner = (uintptr_t)h;
    return b + 1;
}

void spindle_task_free(void *node) {
    if (!node) return;
    node_header *b = (node_header *)node - 1;
    uintptr_t owner_bits = b->owner;
    if (owner_bits == 0) {
        COUNT_BLOCK(blocks_freed);
        free(b);
        return;
    }
    if (owner_bits & CACHED_BIT) {
        spindle_log(SPINDLE_LOG_ERROR, "spindle_task_free: task node %p freed twice", node);
        abort();
    }
    node_heap *owner = (node_heap *)owner_bits;
    b->owner = owner_bits | CACHED_BIT;
    POISON(b + 1, SPINDLE_TASK_CACHED_BYTES);
    node_heap *me = heap_for_thread();
    if (owner == me) {
        b->next = me->local;
        me->local = b;
        me->nlocal++;
        return;
    }
    if (!me) {
        /* An exiting thread: no batch to gather in. */
        push_remote(owner, b, b, 1);
        return;
    }
    if (me->batch_owner != owner) {
        flush_batch(me);
        me->batch_owner = owner;
        me->batch_last = b;
    }
    b->next = me->batch_first;
    me->batch_first = b;
    if (++me->nbatch == NODE_BATCH) flush_batch(me);
}

/* The key's destructor, at thread exit (N3). */
static void heap_exit(void *arg) {
    node_heap *h = arg;
    flush_batch(h);
    tls_heap = NULL;
    tls_exited = true;
    /* give_back's lock publishes the heap, its local list and its slab to the adopter,
     * which takes over what was freed back meanwhile. */
    give_back(h);
}

#ifdef SPINDLE_TESTING
void spindle_test_task_cache(uint32_t *local, uint64_t *malloced, uint64_t *freed) {
    node_heap *h = tls_heap;
    if (local) *local = h ? h->nlocal : 0;
    if (malloced) *malloced = atomic_load_explicit(&blocks_malloced, memory_order_relaxed);
    if (freed) *freed = atomic_load_explicit(&blocks_freed, memory_order_relaxed);
}

bool spindle_test_task_new_heap(void) {
    if (tls_heap || tls_exited) return false;
    pthread_once(&heap_once, heap_setup);
    if (!heap_key_ok) return false;
    node_heap *h = new_heap();
    return h && install_heap(h);
}

void spindle_test_task_heap(uint32_t *carved, uint64_t *slab_bytes) {
    node_heap *h = tls_heap;
    if (carved) *carved = h ? h->carved : 0;
    if (slab_bytes) *slab_bytes = h ? h->slab_bytes : 0;
}
#endif
