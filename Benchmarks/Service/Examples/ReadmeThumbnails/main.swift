import Hummingbird                                 // the server framework of this example
import Logging                                     // swift-log's Logger (Spindle depends on it)
import ServiceLifecycle                            // ServiceGroup
import Spindle
import SpindleServiceLifecycle                     // with the ServiceLifecycle trait (below)

let logger = Logger(label: "thumbnails")

var config = ThreadPool.Configuration()
config.queueLimit = 512                            // at most 512 queued: then say no
config.queueDelayLimit = .milliseconds(50)         // and no more while the oldest has waited 50 ms
config.logger = logger                             // swift-log; ThreadPool.logger for process-wide notes
let pool = try ThreadPool(configuration: config)
let metrics = PoolMetrics(pools: ["thumbnails": pool])   // swift-metrics, published every second

router.post("/thumbnail") { request, _ -> Response in
    let upload = try await request.body.collect(upTo: 10 << 20)
    do {                                           // never blocks the event loop or the cooperative pool
        let png = try await pool.run(ifFull: .fail) { try Thumbnail(decoding: upload).png }
        return Response(status: .ok, body: .init(byteBuffer: ByteBuffer(bytes: png)))
    } catch ThreadPool.Error.overloaded {
        return Response(status: .serviceUnavailable)   // a fast 503 instead of unbounded latency
    }
}
let group = ServiceGroup(services: [app, ThreadPoolService(pool)],  // drains the pool on SIGTERM
                         gracefulShutdownSignals: [.sigterm], logger: logger)
try await group.run()
