import Foundation
import Spindle

/// `bench topology`: the detected topology and the placement plan, not timed.
func renderTopology(_ topo: Topology, _ plan: PlacementPlan, format: Bench.Format) -> String {
    switch format {
    case .json:
        let nodes = topo.nodes.map { "{\"id\":\($0.id),\"cpus\":[\($0.cpus.map(String.init).joined(separator: ","))]}" }
        let workers = plan.workers.map { w in
            "{\"id\":\(w.id),\"cpu\":\(w.cpu.map(String.init) ?? "null"),\"node\":\(w.node),\"steal_order\":[\(w.stealOrder.map(String.init).joined(separator: ","))]}"
        }
        return "{\"nodes\":[\(nodes.joined(separator: ","))],\"workers\":[\(workers.joined(separator: ","))]}\n"
    case .table, .markdown:
        var out = ""
        if let why = topo.fallbackReason { out += "note: \(why); one node\n" }
        for (i, n) in topo.nodes.enumerated() {
            out += "node \(n.id): cpus \(compactList(n.cpus)); distances \(topo.distances[i].map(String.init).joined(separator: " "))\n"
        }
        out += "\nworker  cpu    node  memory  steal tiers (nearest first)\n"
        for w in plan.workers {
            let cpu = w.cpu.map(String.init) ?? "node"
            let tiers = w.stealTiers.map { "[" + compactList($0) + "]" }.joined(separator: " ")
            let cols = ["\(w.id)", cpu, "\(w.node)", "\(w.memoryNode)"].enumerated().map { i, c in
                c.padding(toLength: [8, 7, 6, 8][i], withPad: " ", startingAt: 0)
            }
            out += cols.joined() + tiers + "\n"
        }
        return out
    }
}

/// [0,1,2,3,8] -> "0-3,8"
func compactList(_ xs: [Int]) -> String {
    var out: [String] = []
    var i = 0
    while i < xs.count {
        var j = i
        while j + 1 < xs.count && xs[j + 1] == xs[j] + 1 { j += 1 }
        out.append(i == j ? "\(xs[i])" : "\(xs[i])-\(xs[j])")
        i = j + 1
    }
    return out.joined(separator: ",")
}
