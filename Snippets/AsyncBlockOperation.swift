import Spindle

// snippet.hide
// What the example leaves to the reader.
struct Client: Sendable { func get(_ url: URL) async throws -> Data { Data() } }
actor Store { func save(_ data: Data, for url: URL) {} }
let urls = [URL(string: "https://example.com/a")!]
let http = Client()
let store = Store()
// snippet.show

let downloads = OperationQueue()
downloads.maxConcurrentOperationCount = 4
for url in urls {
    downloads.addOperation(AsyncBlockOperation {
        guard let data = try? await http.get(url), !Task.isCancelled else { return }
        await store.save(data, for: url)
    })
}
