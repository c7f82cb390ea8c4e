/*
 * promote.c — a thread that runs promoted work takes on another pool's priority, and
 * gives it back.
 *
 * The façade promotes an operation that a higher class waits for (Sources/Spindle/
 * Operations/Internals/Promotion.swift). A queued one moves to the higher class's
 * workers; a running one cannot move, so the thread running it takes on the higher
 * class's scheduling policy, nice value and time slice for as long as the operation
 * runs, and then takes its own pool's back. Both directions are the same call:
 * "make thread `tid` run as `pool`'s workers do".
 *
 * PR1. The target is what the pool's workers actually got (`effective_policy`,
 *      `effective_nice`: worker.c, apply_priority), not what it asked for. A class
 *      whose own nice was refused runs at the process's nice, and a promotion to it asks
 *      for no more than its own workers have.
 * PR2. Policy and nice change together, with one sched_setattr: two calls
 *      (sched_setscheduler, then setpriority) would leave the thread for a moment at a
 *      mix of the two classes, and a SCHED_IDLE thread must leave SCHED_IDLE in the same
 *      call that sets its nice (the kernel checks the new nice against RLIMIT_NICE).
 * PR3. Going back down — a higher nice, SCHED_BATCH, SCHED_IDLE — needs no privilege.
 *      Going up does: a nice below the thread's own needs CAP_SYS_NICE or an
 *      RLIMIT_NICE that allows it (setrlimit(2): the lowest nice allowed is
 *      20 - rlim_cur), and so does leaving SCHED_IDLE (sched(7), since Linux 2.6.39).
 *      When the kernel refuses the target, the thread gets the best the limit allows —
 *      the target's policy at the lowest nice RLIMIT_NICE permits — and the call
 *      reports the refusal either way, so the façade can say what a promotion did not
 *      get.
 *
 * PR4. The asymmetric barrier (spindle_sync.h). The dispatcher of an operation marks
 *      it submitted and then looks at its promotion floor; a promoter raises the floor
 *      and then looks at the mark (Promotion.swift, P7). Each side needs a store-load
 *      barrier, or a dispatcher that read the old floor and a promoter that read no
 *      mark would both let the operation wait at its old class. The dispatcher runs on
 *      every operation and the promoter almost never, so the cost goes to the promoter:
 *      membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) interrupts every CPU that runs a
 *      thread of the process and has it execute a full barrier, so a dispatcher whose
 *      two accesses only the compiler keeps in order either finished both before the
 *      promoter's barrier — then the promoter's look sees the mark — or makes its look
 *      after it, and sees the floor (the kernel's own argument for the command:
 *      membarrier(2); Documentation/scheduler/membarrier.rst). This is folly's
 *      asymmetricHeavyBarrier and the pairing of userspace RCU's fast path. Where the
 *      command is missing (before Linux 4.14) or refused (a seccomp filter), the light
 *      side is a full fence and the heavy one too: the plain Dekker pair.
 *
 * Rejected: re-nicing the whole process, or raising RLIMIT_NICE's soft limit to its
 * hard one on the program's behalf. Both change what the program set for itself. And,
 * for PR4, a seq_cst mark on every dispatch: a locked instruction on the path of every
 * operation, to serve a race that a promotion rarely meets.
 */
#include "internal.h"

#include <errno.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The kernel's struct sched_attr, SCHED_ATTR_SIZE_VER0 (48 bytes): every field this
 * file sets is in the first version, which every kernel with sched_setattr accepts. */
typedef struct spindle_sched_attr0 {
    uint32_t size, sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime, sched_deadline, sched_period;
} spindle_sched_attr0;

/* The kernel keeps a SCHED_IDLE thread's nice as it was (sched_setattr sets it only
 * for the fair policies, SCHED_OTHER and SCHED_BATCH), so a thread going back to an
 * idle pool sets its nice on its own: upward, which needs no privilege. It changes no
 * weight under SCHED_IDLE, but it is what the thread reports, and what it keeps if the
 * program moves it out of SCHED_IDLE. */
static int idle_nice(int32_t tid, int policy, int32_t nice) {
    if (policy != SCHED_IDLE) return 0;
    return setpriority(PRIO_PROCESS, (id_t)tid, nice) == 0 ? 0 : errno;
}

static int set_attr(int32_t tid, int policy, int32_t nice, uint32_t slice_ns) {
    spindle_sched_attr0 attr;
    memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.sched_policy = (uint32_t)policy;
    attr.sched_nice = nice;
    /* A custom slice is a fair-class setting (worker.c, spindle_thread_request_slice);
     * 0 gives the kernel's default. */
    attr.sched_runtime = policy == SCHED_OTHER ? slice_ns : 0;
    if (syscall(SYS_sched_setattr, (pid_t)tid, &attr, 0) == 0) return idle_nice(tid, policy, nice);
    int err = errno;
    /* A kernel without custom slices (before 6.12) refuses a runtime for SCHED_OTHER:
     * the policy and nice matter more than the slice. */
    if (err == EINVAL && attr.sched_runtime != 0) {
        attr.sched_runtime = 0;
        if (syscall(SYS_sched_setattr, (pid_t)tid, &attr, 0) == 0) return idle_nice(tid, policy, nice);
        err = errno;
    }
    return err;
}

int32_t spindle_thread_id(void) {
    static _Thread_local int32_t tid;
    if (tid == 0) tid = (int32_t)syscall(SYS_gettid);
    return tid;
}

int spindle_thread_adopt_pool_priority(int32_t tid, const spindle_pool *pool, int32_t *got_nice) {
    spindle_pool *p = (spindle_pool *)pool;
    if (tid == 0) tid = spindle_thread_id();
    /* Relaxed: reports written once by worker 0 before create returned (worker.c). */
    int policy = atomic_load_explicit(&p->effective_policy, memory_order_relaxed) & ~SCHED_RESET_ON_FORK;
    int32_t nice = atomic_load_explicit(&p->effective_nice, memory_order_relaxed);
    uint32_t slice = p->requested_slice_ns;
    int err = set_attr(tid, policy, nice, slice);
    if (got_nice) *got_nice = nice;
    if (err != EPERM && err != EACCES) return err;
    /* PR3: the best RLIMIT_NICE allows. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NICE, &rl) != 0) return err;
    int64_t lowest = 20 - (int64_t)(rl.rlim_cur > 40 ? 40 : rl.rlim_cur);
    errno = 0;
    int current = getpriority(PRIO_PROCESS, (id_t)tid);
    if (errno != 0) return err;
    /* The target's nice, raised to what the limit allows; never above the thread's
     * own, which would not be a promotion. */
    int64_t allowed = nice < lowest ? lowest : nice;
    if (allowed > 19 || allowed > current) return err;
    if (set_attr(tid, policy, (int32_t)allowed, slice) == 0 && got_nice) *got_nice = (int32_t)allowed;
    return err;
}

int spindle_thread_class_of_caller(int32_t *nice) {
    errno = 0;
    int n = getpriority(PRIO_PROCESS, 0); /* who 0: the calling thread, on Linux */
    if (nice) *nice = errno == 0 ? n : 0;
    int policy = sched_getscheduler(0) & ~SCHED_RESET_ON_FORK;
    return policy == SCHED_IDLE ? SPINDLE_POLICY_IDLE : policy == SCHED_BATCH ? SPINDLE_POLICY_BATCH
                                                                               : SPINDLE_POLICY_NORMAL;
}

/* ---- PR4: the asymmetric barrier ------------------------------------------------------- */

/* True until membarrier is known to work: the safe answer for a dispatcher that runs
 * before spindle_barrier_init (none does: every dispatch goes to a pool, and every pool's
 * creation runs the init first, which orders it before the pool is handed out). */
bool spindle_barrier_light_fences = true;
static bool membarrier_ready;
static pthread_once_t barrier_once = PTHREAD_ONCE_INIT;

static void barrier_init(void) {
    long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    if (cmds < 0 || !(cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED)) return;
    if (syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) != 0) return;
    membarrier_ready = true;
    /* Relaxed: pthread_once orders this before every pool's creation returns, and so
     * before any dispatch, and before every heavy barrier (which runs the once too). */
    __atomic_store_n(&spindle_barrier_light_fences, false, __ATOMIC_RELAXED);
}

void spindle_barrier_init(void) { pthread_once(&barrier_once, barrier_init); }

void spindle_barrier_heavy(void) {
    spindle_barrier_init();
    if (membarrier_ready && syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0) return;
    /* Without membarrier the light side fences too. (Once registered, the command has
     * no failure that membarrier(2) lists; the fence is what is left to do if it did.) */
    atomic_thread_fence(memory_order_seq_cst);
}
