import Spindle

// snippet.hide
// What the example leaves to the reader.
let pool = ThreadPool.shared
let payload = [UInt8](repeating: 7, count: 1024)
func sha256(_ bytes: [UInt8]) -> [UInt8] { bytes }
// snippet.show

let digest = await Task(executorPreference: pool) { sha256(payload) }.value
