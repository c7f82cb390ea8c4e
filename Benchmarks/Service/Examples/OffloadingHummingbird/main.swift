import Foundation
import Hummingbird
import Spindle

func price(_ body: [UInt8]) throws -> [UInt8] {
    let catalog = try JSONDecoder().decode(Catalog.self, from: Data(body))
    let priced = catalog.priced()       // prices, ratings, a sort: milliseconds of CPU
    return Array(try JSONEncoder().encode(priced))
}

func offload(_ router: Router<BasicRequestContext>) {
    let pool = ThreadPool.forQualityOfService(.utility)   // nice +2, SCHED_BATCH

    router.post("/heavy") { request, _ -> Response in
        let body = try await request.body.collect(upTo: 4 << 20)
        let bytes = Array(body.readableBytesView)
        let out = try await pool.run { try price(bytes) }
        return Response(status: .ok, headers: [.contentType: "application/json"],
                        body: ResponseBody(byteBuffer: ByteBuffer(bytes: out)))
    }
    handlerOnThePool(router, pool)
}

func handlerOnThePool(_ router: Router<BasicRequestContext>, _ pool: ThreadPool) {
    router.post("/heavy") { request, _ -> Response in
        let body = try await request.body.collect(upTo: 4 << 20)
        let bytes = Array(body.readableBytesView)
        let out = try await withTaskExecutorPreference(pool) {
            try await pool.run { try price(bytes) }   // already on a worker: inline
        }
        return Response(status: .ok, headers: [.contentType: "application/json"],
                        body: ResponseBody(byteBuffer: ByteBuffer(bytes: out)))
    }
}

func sayNo(_ router: Router<BasicRequestContext>, _ limited: ThreadPool) {
    router.post("/limited") { request, _ -> Response in
        let bytes = Array(try await request.body.collect(upTo: 4 << 20).readableBytesView)
        do {
            let out = try await limited.run(ifFull: .fail) { try price(bytes) }
            return Response(status: .ok, body: ResponseBody(byteBuffer: ByteBuffer(bytes: out)))
        } catch ThreadPool.Error.overloaded {
            return Response(status: .serviceUnavailable, headers: [.retryAfter: "1"])
        }
    }
}

// What the example leaves to the reader.
struct Catalog: Codable {
    var prices: [Int]
    func priced() -> Catalog { Catalog(prices: prices.map { $0 * 2 }.sorted()) }
}
