import Spindle
import Vapor

func offload(_ app: Application, _ pool: ThreadPool) {
    app.post("heavy") { req async throws -> Response in
        let bytes = Array(req.body.data?.readableBytesView ?? ByteBuffer().readableBytesView)
        let out = try await pool.run { try price(bytes) }
        return Response(status: .ok, body: .init(data: Data(out)))
    }
}

// What the example leaves to the reader.
func price(_ body: [UInt8]) throws -> [UInt8] { body }
