import Spindle

// snippet.hide
// What the example leaves to the reader.
let queue = OperationQueue()
func renderThumbnail() {}
// snippet.show

let thumbnail = BlockOperation { renderThumbnail() }
thumbnail.qualityOfService = .userInteractive
queue.addOperation(thumbnail)
