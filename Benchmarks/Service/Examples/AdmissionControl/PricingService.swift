import Hummingbird
import Spindle

@main
struct PricingService {
    static func main() async throws {
        var config = ThreadPool.Configuration()
        config.name = "spindle-price"
        config.queueLimit = 256                      // at most 256 catalogs waiting
        config.queueDelayLimit = .milliseconds(50)   // and none once the oldest waited 50 ms
        let pool = try ThreadPool(configuration: config)

        // A report queue of its own, at most 8 reports in it at once.
        let reports = OperationQueue()
        reports.maxConcurrentOperationCount = 2
        reports.admissionLimit = 8

        let router = Router()
        router.post("/price") { request, _ -> Response in
            let body = try await request.body.collect(upTo: 4 << 20)
            let bytes = Array(body.readableBytesView)
            do {
                let priced = try await pool.run(ifFull: .fail) { try Catalog.price(bytes) }
                return Response(status: .ok, body: .init(byteBuffer: ByteBuffer(bytes: priced)))
            } catch ThreadPool.Error.overloaded {
                // Clients that honour Retry-After wait instead of resending at once.
                return Response(status: .serviceUnavailable, headers: [.retryAfter: "1"])
            }
        }
        router.post("/report") { _, _ -> Response in
            let job = BlockOperation { Report.rebuild() }
            return Response(status: reports.tryAddOperation(job) ? .accepted : .tooManyRequests)
        }
        try await Application(router: router).runService()
    }
}

// What the example leaves to the reader.
enum Catalog {
    static func price(_ bytes: [UInt8]) throws -> [UInt8] { bytes }
}
enum Report {
    static func rebuild() {}
}
