/*
 * finish_cycle.pml — the operations of a dependency cycle that finish at once do not
 * deadlock (Sources/Spindle/Operations/Internals/OperationLifecycle.swift, F2's walk in
 * `takeHandOff` and `isFinishing`).
 *
 * Three operations, each depending on the previous one, so each is the next one's
 * dependent: op i's dependents are { op (i+1) mod 3 }. All three are cancelled, so all
 * finish, on three threads at once. Each finish claims F1 (a seq_cst store of its
 * `finishHandled`, as Spin's interleaving is) and then, under its own lock, counts down
 * its dependent under the dependent's lock, unless the dependent has begun its own
 * finish. A two-operation cycle is the same protocol with one step fewer.
 *
 * What is checked: when nothing can move, every finish has ended (no cycle of threads
 * each holding its own lock and waiting for the next one's).
 *
 * Mutants (scripts/model-check.sh makes sure each fails):
 *   -DMUTANT_NO_SKIP  the walk takes a dependent's lock even when it is finishing.
 */
#define N 3
bit locks[N];
bit handled[N];
byte unfinished[N];
byte ended = 0;

inline lock(l) { atomic { l == 0 -> l = 1 } }
inline unlock(l) { l = 0 }

proctype finish(byte i) {
    byte next = (i + 1) % N;
    handled[i] = 1;                        /* F1 */
    lock(locks[i]);                        /* F2 */
#ifdef MUTANT_NO_SKIP
    if :: true ->
#else
    if :: !handled[next] ->
#endif
       lock(locks[next]);
       unfinished[next]--;
       unlock(locks[next])
    :: else -> skip
    fi;
    unlock(locks[i]);
    ended++
}

init {
    atomic {
        unfinished[0] = 1; unfinished[1] = 1; unfinished[2] = 1;
        run finish(0); run finish(1); run finish(2)
    }
}

active proctype watchdog() {
    timeout -> assert(ended == N)
}
