import Foundation

struct Machine {
    var cpus: Int
    var numaNodes: Int
    var cpuModel: String
    var kernel: String
    var swift: String

    static func detect(cpus: Int) -> Machine {
        var nodes = 1
        if let s = try? String(contentsOfFile: "/sys/devices/system/node/online", encoding: .utf8) {
            nodes = parseCPUList(s.trimmingCharacters(in: .whitespacesAndNewlines)).count
        }
        var model = "unknown"
        if let s = try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8),
           let line = s.split(separator: "\n").first(where: { $0.hasPrefix("model name") }),
           let colon = line.firstIndex(of: ":") {
            model = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        var u = utsname()
        uname(&u)
        let kernel = withUnsafeBytes(of: &u.release) { String(decoding: $0.prefix(while: { $0 != 0 }), as: UTF8.self) }
        return Machine(cpus: cpus, numaNodes: max(nodes, 1), cpuModel: model, kernel: kernel, swift: swiftVersion)
    }
}

var swiftVersion: String {
    #if compiler(>=6.4)
    return "6.4+"
    #elseif compiler(>=6.3)
    return "6.3"
    #elseif compiler(>=6.2)
    return "6.2"
    #else
    return "6.1"
    #endif
}

/// "0-3,8,10-11" -> [0,1,2,3,8,10,11]
func parseCPUList(_ s: String) -> [Int] {
    var out = [Int]()
    for part in s.split(separator: ",") {
        let bounds = part.split(separator: "-").compactMap { Int($0.trimmingCharacters(in: .whitespaces)) }
        if bounds.count == 1 { out.append(bounds[0]) } else if bounds.count == 2, bounds[0] <= bounds[1] {
            out.append(contentsOf: bounds[0]...bounds[1])
        }
    }
    return out
}

// MARK: JSON (hand-written so that the key order is exactly the documented one)

func jsonString(_ s: String) -> String {
    var out = "\""
    for u in s.unicodeScalars {
        switch u {
        case "\"": out += "\\\""
        case "\\": out += "\\\\"
        case "\n": out += "\\n"
        case "\t": out += "\\t"
        default:
            if u.value < 0x20 { out += String(format: "\\u%04x", u.value) } else { out.unicodeScalars.append(u) }
        }
    }
    return out + "\""
}

func jsonNumber(_ x: Double) -> String {
    guard x.isFinite else { return "null" }
    if x == x.rounded(), abs(x) < 1e15 { return String(Int64(x)) }
    return String(format: "%.3f", x)
}

func renderJSON(machine: Machine, results: [CaseResult]) -> String {
    var r = [String]()
    var ratios = [String]()
    for c in results {
        for s in c.systems {
            var fields = ["\"case\":\(jsonString(c.name))", "\"system\":\(jsonString(s.system))",
                          "\"tasks\":\(s.tasks > 0 ? s.tasks : c.tasks)", "\"reps\":\(c.reps)"]
            switch c.metric {
            case .nsPerTask:
                fields.append("\"ns_per_task\":{\"median\":\(jsonNumber(median(s.samples))),\"min\":\(jsonNumber(s.samples.min()!)),\"max\":\(jsonNumber(s.samples.max()!)),\"samples\":[\(s.samples.map(jsonNumber).joined(separator: ","))]}")
            case .latency:
                let p = s.percentiles
                fields.append("\"latency_ns\":{\"p50\":\(jsonNumber(p["p50"] ?? .nan)),\"p99\":\(jsonNumber(p["p99"] ?? .nan)),\"p999\":\(jsonNumber(p["p999"] ?? .nan))}")
            case .cpuMsPerSecond:
                fields.append("\"cpu_ms_per_s\":\(jsonNumber(median(s.samples)))")
            }
            r.append("{" + fields.joined(separator: ",") + "}")
        }
        for q in c.ratios {
            ratios.append("{\"case\":\(jsonString(c.name)),\"system\":\(jsonString(q.system)),\"vs\":\(jsonString(q.vs)),\"median\":\(jsonNumber(q.median))}")
        }
    }
    let m = "{\"cpus\":\(machine.cpus),\"numa_nodes\":\(machine.numaNodes),\"cpu_model\":\(jsonString(machine.cpuModel)),\"kernel\":\(jsonString(machine.kernel)),\"swift\":\(jsonString(machine.swift))}"
    return "{\"schema\":1,\"machine\":\(m),\"results\":[\(r.joined(separator: ","))],\"ratios\":[\(ratios.joined(separator: ","))]}"
}

// MARK: table / markdown

func fmt(_ x: Double) -> String {
    if !x.isFinite { return "-" }
    if x >= 1e6 { return String(format: "%.3g", x) }
    if x >= 100 { return String(format: "%.0f", x) }
    if x >= 10 { return String(format: "%.1f", x) }
    return String(format: "%.2f", x)
}

func rows(_ results: [CaseResult]) -> [[String]] {
    var out = [[String]]()
    for c in results {
        for s in c.systems {
            let rs = c.ratios.filter { $0.system == s.system }
            let ratio = rs.isEmpty ? (c.metric == .cpuMsPerSecond || !runReference ? "-" : "reference")
                : rs.map { String(format: "%.3g× %@", $0.median, $0.vs) }.joined(separator: ", ")
            let tasks = "\(s.tasks > 0 ? s.tasks : c.tasks)"
            switch c.metric {
            case .nsPerTask:
                out.append([c.name, s.system, tasks, "ns/task", fmt(median(s.samples)), fmt(s.samples.min()!), fmt(s.samples.max()!), ratio])
            case .latency:
                let p = s.percentiles
                out.append([c.name, s.system, tasks, "latency ns p50/p99/p99.9", fmt(p["p50"] ?? .nan), fmt(p["p99"] ?? .nan), fmt(p["p999"] ?? .nan), ratio])
            case .cpuMsPerSecond:
                out.append([c.name, s.system, "-", "CPU ms per idle s", fmt(median(s.samples)), fmt(s.samples.min()!), fmt(s.samples.max()!), ratio])
            }
        }
    }
    return out
}

let header = ["case", "system", "tasks", "unit", "median", "min", "max", "ratio (median of per-rep ratios)"]

func renderTable(machine: Machine, results: [CaseResult]) -> String {
    let all = [header] + rows(results)
    var widths = [Int](repeating: 0, count: header.count)
    for r in all { for (i, c) in r.enumerated() { widths[i] = max(widths[i], c.count) } }
    func line(_ r: [String]) -> String {
        r.enumerated().map { i, c in c.padding(toLength: widths[i], withPad: " ", startingAt: 0) }.joined(separator: "  ")
    }
    var out = "machine: \(machine.cpus) CPUs, \(machine.numaNodes) NUMA node(s), \(machine.cpuModel), Linux \(machine.kernel), Swift \(machine.swift)\n"
    out += line(all[0]) + "\n" + widths.map { String(repeating: "-", count: $0) }.joined(separator: "  ") + "\n"
    for r in all.dropFirst() { out += line(r) + "\n" }
    for c in results where c.note != nil { out += "\(c.name): \(c.note!)\n" }
    return out
}

func renderMarkdown(machine: Machine, results: [CaseResult]) -> String {
    var out = "Machine: \(machine.cpus) CPUs, \(machine.numaNodes) NUMA node(s), \(machine.cpuModel), Linux \(machine.kernel), Swift \(machine.swift)\n\n"
    out += "| " + header.joined(separator: " | ") + " |\n"
    out += "|" + header.map { _ in "---" }.joined(separator: "|") + "|\n"
    for r in rows(results) { out += "| " + r.joined(separator: " | ") + " |\n" }
    let notes = results.compactMap { c in c.note.map { "- `\(c.name)`: \($0)" } }
    if !notes.isEmpty { out += "\n" + notes.joined(separator: "\n") + "\n" }
    return out
}
