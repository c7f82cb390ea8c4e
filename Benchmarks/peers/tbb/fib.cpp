// The fork-join case of Spindle's benchmark (Benchmarks/bench/EngineCases.swift) on
// oneTBB: fib(n) split by a task_group down to a cut-off, on oneTBB's default arena
// (one thread per CPU). One warm-up, a pause, then one timed run: prints
// `ns=<time> result=<fib(n)>`.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <oneapi/tbb/info.h>
#include <oneapi/tbb/task_group.h>
#include <thread>

static long fib_serial(long n) { return n < 2 ? n : fib_serial(n - 1) + fib_serial(n - 2); }

static long fib(long n, long cutoff) {
    if (n < cutoff) return fib_serial(n);
    long a = 0, b = 0;
    tbb::task_group g;
    g.run([&] { a = fib(n - 1, cutoff); });
    b = fib(n - 2, cutoff);
    g.wait();
    return a + b;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: fib-tbb N CUTOFF\n");
        return 2;
    }
    long n = std::atol(argv[1]), cutoff = std::atol(argv[2]);
    fib(n, cutoff);
    // The harness starts each of its own systems' runs 200 ms after the last work
    // (`settle` in Benchmarks/bench/Harness.swift), with their threads idle; so does this.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    auto start = std::chrono::steady_clock::now();
    long result = fib(n, cutoff);
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
    std::printf("ns=%lld result=%ld threads=%d\n", (long long)ns, result, tbb::info::default_concurrency());
    return 0;
}
