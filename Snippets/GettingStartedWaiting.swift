import Spindle

// snippet.hide
// What the example leaves to the reader.
let queue = OperationQueue()
let infer = BlockOperation {}
queue.addOperation(infer)
// snippet.show

await infer.finished()
await queue.allOperationsFinished()
