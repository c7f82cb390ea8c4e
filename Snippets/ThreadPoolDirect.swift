import Spindle

// snippet.hide
// What the example leaves to the reader.
let chunk = [UInt8](repeating: 1, count: 1 << 16)
let (left, right) = ([1, 2, 3], [4, 5, 6])
let rows = 480
func compress(_ bytes: [UInt8]) {}
func sum(_ values: [Int]) -> Int { values.reduce(0, +) }
func blur(row: Int) {}
// snippet.show

let pool = ThreadPool.shared                       // one worker per usable CPU
try pool.submit { compress(chunk) }                // throws ThreadPool.Error.shutDown after shutdown
let (l, r) = pool.run {                            // enter the pool, then fork-join inside it
    pool.join({ sum(left) }, { sum(right) })       // second half offered to idle workers
}
let total = l + r                                  // (from async code: try await pool.run { … })
pool.concurrentPerform(iterations: rows) { y in blur(row: y) }
print(pool.stats)                                  // per worker: executed, stolen, parked, ...
