import Hummingbird
import ServiceLifecycle

// What the example leaves to the reader.
@MainActor let router = Router()
@MainActor var app: some Service { Application(router: router) }

struct Thumbnail {
    var png: [UInt8]
    init(decoding upload: ByteBuffer) throws { png = Array(upload.readableBytesView) }
}
