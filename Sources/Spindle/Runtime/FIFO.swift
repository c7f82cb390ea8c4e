/// A first-in, first-out line in an array: appends at the end, takes from `head`, and
/// gives back the taken prefix's storage now and then. For small lines guarded by a
/// lock (an actor executor's jobs, a pool's waiting submitters); not thread-safe.
struct FIFO<Element> {
    private var items: [Element?] = []
    private var head = 0
    private(set) var count = 0

    var isEmpty: Bool { count == 0 }

    mutating func append(_ element: Element) {
        items.append(element)
        count += 1
    }

    /// The oldest element, left on the line.
    var first: Element? { items[head...].lazy.compactMap { $0 }.first }

    /// The oldest element, taken off the line.
    mutating func popFirst() -> Element? {
        while head < items.count {
            let e = items[head]
            items[head] = nil
            head += 1
            if let e {
                count -= 1
                compact()
                return e
            }
        }
        compact()
        return nil
    }

    /// Takes the oldest element that matches off the line, wherever it is: O(count), for
    /// the rare departure from the middle (a cancelled waiter).
    mutating func remove(where matches: (Element) -> Bool) -> Element? {
        guard let i = items[head...].firstIndex(where: { $0.map(matches) ?? false }) else { return nil }
        let e = items[i]
        items[i] = nil
        count -= 1
        return e
    }

    private mutating func compact() {
        if count == 0 {
            items.removeAll(keepingCapacity: true)
            head = 0
        } else if head > 64 && head * 2 > items.count {
            items.removeFirst(head)
            head = 0
        }
    }
}
