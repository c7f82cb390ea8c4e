import Spindle          // instead of `import Foundation`: re-exports Foundation

let queue = OperationQueue()
queue.maxConcurrentOperationCount = 4
let parse = BlockOperation { parseHeaders() }
let decode = BlockOperation { decodeBody() }
decode.addDependency(parse)
decode.completionBlock = { print("decoded") }
queue.addOperations([parse, decode], waitUntilFinished: false)
await queue.allOperationsFinished()        // Spindle's addition: never blocks a thread

// snippet.hide
// What the example leaves to the reader.
func parseHeaders() {}
func decodeBody() {}
