import Spindle

// snippet.hide
// What the example leaves to the reader.
struct Request: Sendable { var body: [UInt8] }   // a server framework's
struct Response { var body: [UInt8] }
struct Thumbnail: Sendable {
    var encoded: [UInt8]
    init(decoding bytes: [UInt8]) throws { encoded = bytes }
}
// snippet.show

let pool = ThreadPool.forQualityOfService(.utility)

func resize(_ request: Request) async throws -> Response {
    let thumbnail = try await pool.run { try Thumbnail(decoding: request.body) }
    return Response(body: thumbnail.encoded)
}
