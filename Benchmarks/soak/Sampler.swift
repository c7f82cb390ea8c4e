import Foundation

/// What the process holds at one moment: resident memory, threads, open descriptors.
struct Sample {
    var seconds: Double
    var rssKB: Int
    var threads: Int
    var fds: Int
    var items: Int

    /// Reads /proc/self.
    static func now(at seconds: Double, items: Int) -> Sample {
        var rss = 0, threads = 0
        if let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) {
            for line in status.split(separator: "\n") {
                let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
                if line.hasPrefix("VmRSS:"), fields.count > 1 { rss = Int(fields[1]) ?? 0 }
                if line.hasPrefix("Threads:"), fields.count > 1 { threads = Int(fields[1]) ?? 0 }
            }
        }
        let fds = ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []).count
        return Sample(seconds: seconds, rssKB: rss, threads: threads, fds: fds, items: items)
    }
}

/// Whether the process stayed flat after its warm-up.
struct Verdict {
    var rssDriftMB: Double     // the least-squares line's rise over the measured part
    var rssMeanMB: Double
    var threadsFirst: Int      // most threads in the first third of the measured part
    var threadsLast: Int       // and in the last third
    var fdsMin: Int
    var fdsMax: Int
    var problems: [String]

    /// `warm`: the samples after the warm-up.
    init(_ warm: [Sample], rssLimitMB: Double) {
        let n = Double(warm.count)
        let xs = warm.map(\.seconds), ys = warm.map { Double($0.rssKB) / 1024 }
        let mx = xs.reduce(0, +) / n, my = ys.reduce(0, +) / n
        let sxx = zip(xs, xs).map { ($0 - mx) * ($1 - mx) }.reduce(0, +)
        let sxy = zip(xs, ys).map { ($0 - mx) * ($1 - my) }.reduce(0, +)
        let slope = sxx > 0 ? sxy / sxx : 0
        rssDriftMB = slope * ((xs.last ?? 0) - (xs.first ?? 0))
        rssMeanMB = my
        let third = max(1, warm.count / 3)
        threadsFirst = warm.prefix(third).map(\.threads).max() ?? 0
        threadsLast = warm.suffix(third).map(\.threads).max() ?? 0
        fdsMin = warm.map(\.fds).min() ?? 0
        fdsMax = warm.map(\.fds).max() ?? 0
        problems = []
        if rssDriftMB > rssLimitMB {
            problems.append(String(format: "resident memory rose %.1f MB over the run (limit %.1f MB)", rssDriftMB, rssLimitMB))
        }
        if fdsMax > fdsMin + 2 { problems.append("open descriptors grew: \(fdsMin) to \(fdsMax)") }
    }
}

/// Spindle's threads in this process now: those whose name Spindle gave them
/// (`spindle-…`: workers, spares, the monitor, the spawner).
func spindleThreads() -> Int {
    let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
    return tasks.filter { tid in
        // A thread may exit between the listing and the read: then it is not counted.
        let name = (try? String(contentsOfFile: "/proc/self/task/\(tid)/comm", encoding: .utf8)) ?? ""
        return name.hasPrefix("spindle-")
    }.count
}

/// Spindle's threads once the process has no work: polls until the count has not
/// changed for `quiet` seconds (a spare exits two seconds after its last work), or
/// `within` seconds have passed.
///
/// While rounds run, the count moves with what they hold at the moment — each
/// driver's pool made and shut down within its round, spares — so two samples of a
/// process that leaks nothing can differ by several threads. With no work, what is
/// left is what stays: the pools' workers, the monitor and the spawner. A count taken
/// before a last spare has gone is only higher, which makes a later comparison with it
/// more lenient, never wrong.
func spindleThreadsOnceSettled(quiet: Double = 3, within: Double = 30) -> Int {
    let deadline = Date().addingTimeInterval(within)
    var count = spindleThreads(), since = Date()
    while Date() < deadline && Date().timeIntervalSince(since) < quiet {
        Thread.sleep(forTimeInterval: 0.1)
        let now = spindleThreads()
        if now != count { count = now; since = Date() }
    }
    return count
}

/// Spindle's threads once the work has stopped: polls until at most `limit` remain,
/// or `within` seconds have passed, and returns the last count. A leaked thread stays;
/// the deadline is many times a spare's idle time, so a busy machine only makes the
/// wait longer.
func spindleThreadsOnceIdle(atMost limit: Int, within: Double = 60) -> Int {
    let deadline = Date().addingTimeInterval(within)
    var count = spindleThreads()
    while count > limit && Date() < deadline {
        Thread.sleep(forTimeInterval: 0.1)
        count = spindleThreads()
    }
    return count
}

/// The samples as an SVG: resident memory, threads and descriptors over the run, one
/// panel each, the warm-up shaded.
func soakSVG(_ samples: [Sample], warmUp: Double, title: String) -> String {
    let width = 720.0, panel = 150.0, left = 70.0, right = 20.0, top = 40.0, gap = 40.0
    let end = max(samples.last?.seconds ?? 1, 1)
    let series: [(String, (Sample) -> Double)] = [
        ("resident memory (MB)", { Double($0.rssKB) / 1024 }), ("threads", { Double($0.threads) }),
        ("open descriptors", { Double($0.fds) }),
    ]
    var out = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"\(Int(width))\" height=\"\(Int(top + 3 * (panel + gap)))\" font-family=\"sans-serif\" font-size=\"12\">\n"
    out += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    out += "<text x=\"\(left)\" y=\"22\" font-size=\"14\">\(title)</text>\n"
    for (k, (name, value)) in series.enumerated() {
        let y0 = top + Double(k) * (panel + gap)
        let values = samples.map(value)
        let hi = max((values.max() ?? 1) * 1.1, 1)
        func px(_ s: Double) -> Double { left + (width - left - right) * s / end }
        func py(_ v: Double) -> Double { y0 + panel - panel * v / hi }
        out += "<rect x=\"\(px(0))\" y=\"\(y0)\" width=\"\(px(warmUp) - px(0))\" height=\"\(panel)\" fill=\"#eeeeee\"/>\n"
        out += "<rect x=\"\(left)\" y=\"\(y0)\" width=\"\(width - left - right)\" height=\"\(panel)\" fill=\"none\" stroke=\"#999\"/>\n"
        out += "<text x=\"\(left)\" y=\"\(y0 - 6)\">\(name)</text>\n"
        out += String(format: "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"end\">%.0f</text>\n", left - 6, y0 + 10, hi)
        out += String(format: "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"end\">0</text>\n", left - 6, y0 + panel)
        let points = zip(samples, values).map { String(format: "%.1f,%.1f", px($0.seconds), py($1)) }.joined(separator: " ")
        out += "<polyline fill=\"none\" stroke=\"#1f5fa8\" stroke-width=\"1.5\" points=\"\(points)\"/>\n"
    }
    let y = top + 3 * (panel + gap) - 12
    out += String(format: "<text x=\"%.0f\" y=\"%.0f\">0</text><text x=\"%.0f\" y=\"%.0f\" text-anchor=\"end\">%.1f min</text>\n",
                  left, y, width - right, y, end / 60)
    return out + "</svg>\n"
}
