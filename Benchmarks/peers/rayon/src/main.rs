//! The fork-join case of Spindle's benchmark (Benchmarks/bench/EngineCases.swift) on
//! rayon: fib(n) split by `rayon::join` down to a cut-off, on rayon's global pool (one
//! thread per CPU). One warm-up, a pause, then one timed run: prints
//! `ns=<time> result=<fib(n)>`.
use std::time::Instant;

fn fib_serial(n: u64) -> u64 {
    if n < 2 { n } else { fib_serial(n - 1) + fib_serial(n - 2) }
}

fn fib(n: u64, cutoff: u64) -> u64 {
    if n < cutoff {
        return fib_serial(n);
    }
    let (a, b) = rayon::join(|| fib(n - 1, cutoff), || fib(n - 2, cutoff));
    a + b
}

fn main() {
    let args: Vec<u64> = std::env::args().skip(1).map(|a| a.parse().expect("usage: fib-rayon N CUTOFF")).collect();
    let (n, cutoff) = (args[0], args[1]);
    let pool = rayon::ThreadPoolBuilder::new().build().expect("rayon's pool");
    pool.install(|| fib(n, cutoff));
    // The harness starts each of its own systems' runs 200 ms after the last work
    // (`settle` in Benchmarks/bench/Harness.swift), with their threads idle; so does this.
    std::thread::sleep(std::time::Duration::from_millis(200));
    let start = Instant::now();
    let result = pool.install(|| fib(n, cutoff));
    let ns = start.elapsed().as_nanos();
    println!("ns={} result={} threads={}", ns, result, pool.current_num_threads());
}
