import Hummingbird
import Logging
import ServiceLifecycle
import Spindle
import SpindleServiceLifecycle

@main
struct ResizeService {
    static func main() async throws {
        let logger = Logger(label: "resize")
        let pool = try ThreadPool(configuration: .init())
        let uploads = OperationQueue()                // background post-processing

        let router = Router()
        router.post("/resize") { request, _ -> Response in
            let body = try await request.body.collect(upTo: 16 << 20)
            let image = try await pool.run { try Image(decoding: body).resized(to: 512) }
            uploads.addOperation { Archive.store(image) }
            return Response(status: .ok, body: .init(byteBuffer: image.png))
        }
        let app = Application(router: router, logger: logger)

        // SIGTERM: the server stops taking requests, then the queue finishes its
        // archiving, then the pool drains.
        let group = ServiceGroup(
            services: [app, OperationQueueService(uploads), ThreadPoolService(pool)],
            gracefulShutdownSignals: [.sigterm],
            logger: logger)
        try await group.run()
    }
}

// What the example leaves to the reader.
struct Image: Sendable {
    var png: ByteBuffer
    init(decoding body: ByteBuffer) throws { png = body }
    func resized(to side: Int) -> Image { self }
}
enum Archive {
    static func store(_ image: Image) {}
}
