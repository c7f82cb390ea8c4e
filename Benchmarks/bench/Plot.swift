import Foundation

/// A horizontal bar chart of every ratio (log scale, 1× marked), as standalone SVG.
func renderSVG(machine: Machine, results: [CaseResult]) -> String {
    let ratios = results.flatMap { c in c.ratios.map { (c.name, $0) } }
    let rowH = 26.0, left = 330.0, width = 900.0, top = 60.0
    let plotW = width - left - 90
    let height = top + Double(max(ratios.count, 1)) * rowH + 50
    // Log scale from 1/100× to 10×, so 0.05× and 5× are equally readable.
    let lo = log10(0.01), hi = log10(10.0)
    func x(_ r: Double) -> Double { left + (log10(min(max(r, 0.01), 10)) - lo) / (hi - lo) * plotW }
    func esc(_ s: String) -> String {
        s.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;").replacingOccurrences(of: ">", with: "&gt;")
    }
    var out = """
        <svg xmlns="http://www.w3.org/2000/svg" width="\(Int(width))" height="\(Int(height))" font-family="sans-serif" font-size="13">
        <rect width="100%" height="100%" fill="white"/>
        <text x="10" y="22" font-size="16" font-weight="bold">Spindle: time (or latency) relative to the reference — shorter is better</text>
        <text x="10" y="42" fill="#555">\(esc("\(machine.cpus) CPUs, \(machine.numaNodes) NUMA node(s), \(machine.cpuModel), Linux \(machine.kernel), Swift \(machine.swift)"))</text>

        """
    for t in [0.01, 0.1, 1.0, 10.0] {
        out += "<line x1=\"\(x(t))\" y1=\"\(top - 6)\" x2=\"\(x(t))\" y2=\"\(height - 40)\" stroke=\"\(t == 1 ? "#000" : "#ccc")\" stroke-dasharray=\"\(t == 1 ? "" : "3,3")\"/>\n"
        out += "<text x=\"\(x(t))\" y=\"\(height - 24)\" text-anchor=\"middle\" fill=\"#555\">\(t == 0.01 ? "0.01" : t == 0.1 ? "0.1" : t == 1 ? "1×" : "10")</text>\n"
    }
    for (i, (name, r)) in ratios.enumerated() {
        let y = top + Double(i) * rowH
        let better = r.median <= 1
        let x0 = x(1), x1 = x(r.median)
        out += "<text x=\"\(left - 8)\" y=\"\(y + 16)\" text-anchor=\"end\">\(esc("\(name): \(r.system) vs \(r.vs)"))</text>\n"
        out += "<rect x=\"\(min(x0, x1))\" y=\"\(y + 4)\" width=\"\(max(abs(x1 - x0), 1))\" height=\"\(rowH - 8)\" fill=\"\(better ? "#2e7d32" : "#c62828")\"/>\n"
        out += "<text x=\"\(max(x0, x1) + 6)\" y=\"\(y + 16)\">\(String(format: "%.3g×", r.median))</text>\n"
    }
    out += "</svg>\n"
    return out
}
