import Spindle

actor SearchIndex {
    // Background: nice +10 and SCHED_IDLE, so request handling always comes first.
    static let executor = ActorExecutor(qualityOfService: .background)
    nonisolated var unownedExecutor: UnownedSerialExecutor {
        Self.executor.asUnownedSerialExecutor()
    }

    private var terms: [String: Set<Int>] = [:]

    func reindex(_ documents: [(id: Int, text: String)]) {
        for (id, text) in documents {
            for word in text.split(separator: " ") { terms[String(word), default: []].insert(id) }
        }
    }

    func search(_ word: String) -> Set<Int> { terms[word] ?? [] }
}

let index = SearchIndex()
await index.reindex(loadDocuments())      // on a background worker
let hits = await index.search("spindle")

// snippet.hide
// What the example leaves to the reader.
func loadDocuments() -> [(id: Int, text: String)] { [(1, "spindle pool"), (2, "queue")] }
