import Spindle

// snippet.hide
// What the example leaves to the reader.
let chunk = [UInt8](repeating: 1, count: 1 << 16)
let (left, right) = ([1, 2, 3], [4, 5, 6])
let rows = 480
func compress(_ bytes: [UInt8]) {}
func total(_ values: [Int]) -> Int { values.reduce(0, +) }
func blur(row: Int) {}
// snippet.show

let pool = ThreadPool.shared
try pool.submit { compress(chunk) }
let (l, r) = pool.run { pool.join({ total(left) }, { total(right) }) }
pool.concurrentPerform(iterations: rows) { y in blur(row: y) }
