import Foundation

/// The heavy endpoint's document: a product catalog of the kind a service receives
/// as JSON, about 100 KB.
struct Catalog: Codable, Sendable {
    struct Product: Codable, Sendable {
        var id: Int
        var name: String
        var description: String
        var priceCents: Int
        var tags: [String]
        var ratings: [Double]
        var inStock: Bool
    }
    var store: String
    var currency: String
    var products: [Product]

    /// A deterministic catalog of `count` products (`count: 260` is about 100 KB).
    static func sample(count: Int) -> Catalog {
        var products: [Product] = []
        products.reserveCapacity(count)
        for i in 0..<count {
            products.append(Product(
                id: i,
                name: "Product \(i) — \(["lamp", "chair", "desk", "shelf", "rug"][i % 5])",
                description: String(repeating: "A well made item, number \(i). ", count: 6),
                priceCents: 999 + (i * 7919) % 50_000,
                tags: ["home", "sale", "new", "eco", "gift"].enumerated().filter { (i >> $0.offset) & 1 == 1 }.map(\.element),
                ratings: (0..<8).map { Double((i * 31 + $0 * 17) % 50) / 10 },
                inStock: i % 3 != 0))
        }
        return Catalog(store: "spindle-bench", currency: "EUR", products: products)
    }
}

/// What the heavy endpoint answers: the catalog, transformed — prices with tax,
/// average ratings, the in-stock products sorted by price — and a summary.
struct Priced: Codable, Sendable {
    struct Line: Codable, Sendable {
        var id: Int
        var name: String
        var grossCents: Int
        var rating: Double
        var tags: [String]
    }
    var store: String
    var lines: [Line]
    var totalCents: Int
    var averageRating: Double
}

/// The heavy endpoint's work: decode, transform, encode. CPU-bound, a few
/// milliseconds on a small machine, with Foundation's JSON coders.
func price(_ body: [UInt8]) throws -> [UInt8] {
    let catalog = try JSONDecoder().decode(Catalog.self, from: Data(body))
    var lines: [Priced.Line] = []
    for p in catalog.products where p.inStock {
        let rating = p.ratings.isEmpty ? 0 : p.ratings.reduce(0, +) / Double(p.ratings.count)
        lines.append(Priced.Line(id: p.id, name: p.name.uppercased(), grossCents: p.priceCents * 121 / 100,
                                 rating: rating, tags: p.tags.sorted()))
    }
    lines.sort { ($0.grossCents, $0.id) < ($1.grossCents, $1.id) }
    let total = lines.reduce(0) { $0 + $1.grossCents }
    let average = lines.isEmpty ? 0 : lines.reduce(0) { $0 + $1.rating } / Double(lines.count)
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys]
    return Array(try encoder.encode(Priced(store: catalog.store, lines: lines, totalCents: total, averageRating: average)))
}
