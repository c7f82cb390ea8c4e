import Hummingbird
import Logging
import Metrics
import ServiceLifecycle
import Spindle
import SpindleServiceLifecycle

@main
struct ThumbnailService {
    static func main() async throws {
        let logger = Logger(label: "thumbnails")
        ThreadPool.logger = logger

        var config = ThreadPool.Configuration()
        config.name = "spindle-thumb"
        config.queueLimit = 512
        config.logger = logger
        let pool = try ThreadPool(configuration: config)
        let metrics = PoolMetrics(pools: ["thumbnails": pool])
        defer { metrics.stop() }

        let router = Router()
        router.post("/thumbnail") { request, context -> Response in
            let upload = try await request.body.collect(upTo: 10 << 20)
            do {
                let png = try await pool.run(ifFull: .fail) { try Thumbnail(decoding: upload).png }
                return Response(status: .ok, body: .init(byteBuffer: ByteBuffer(bytes: png)))
            } catch ThreadPool.Error.overloaded {
                return Response(status: .serviceUnavailable)
            }
        }
        let app = Application(router: router, logger: logger)
        let group = ServiceGroup(
            services: [app, ThreadPoolService(pool)],
            gracefulShutdownSignals: [.sigterm],
            logger: logger)
        try await group.run()
    }
}

// What the example leaves to the reader.
struct Thumbnail {
    var png: [UInt8]
    init(decoding upload: ByteBuffer) throws { png = Array(upload.readableBytesView) }
}
