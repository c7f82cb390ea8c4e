import Spindle

let queue = OperationQueue()
let load = BlockOperation { loadModel() }
let infer = BlockOperation { runInference() }
infer.addDependency(load)
queue.addOperations([load, infer], waitUntilFinished: true)

// snippet.hide
// What the example leaves to the reader.
func loadModel() {}
func runInference() {}
