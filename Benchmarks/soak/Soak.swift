import ArgumentParser
import Foundation
import Spindle
import Synchronization

/// A long run of everything Spindle does at once (Workload.swift), sampled once a
/// second. It passes when nothing was lost or run twice, the process's memory and
/// descriptors stay flat after the warm-up (Sampler.swift, Verdict), and Spindle's
/// threads, counted with no work at the end of the warm-up and again once the run has
/// ended, are no more at the end: the drivers pause after the warm-up while the first
/// count is taken.
@main
struct Soak: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Runs Spindle's whole mix for a while and checks that nothing is lost, run twice or leaked.")

    @Option(help: "How long to run, in minutes.") var minutes: Double = 1
    @Option(help: "Threads driving rounds at once.") var drivers: Int = 3
    @Option(help: "The random seed (a failing round prints its own).") var seed: UInt64 = 1
    @Option(help: "Resident memory may rise at most this much over the measured part, in MB.") var rssLimit: Double = 8
    @Option(help: "Write the samples here (CSV).") var output: String?
    @Option(help: "Draw the samples here (SVG).") var plot: String?

    func run() throws {
        let end = Date().addingTimeInterval(minutes * 60)
        let start = Date()
        let warmUp = min(max(10, minutes * 60 * 0.1), 120)
        let rounds = Atomic<Int>(0), items = Atomic<Int>(0)
        let failures = Locked<[String]>([])
        let samples = Locked<[Sample]>([])
        let running = Atomic<Bool>(true)
        let sampler = Thread {
            while running.load(ordering: .relaxed) {
                let s = Sample.now(at: Date().timeIntervalSince(start), items: items.load(ordering: .relaxed))
                samples.locked { $0.append(s) }
                Thread.sleep(forTimeInterval: 1)
            }
        }
        sampler.start()
        let drivers = self.drivers, seed = self.seed
        let warmEnd = start.addingTimeInterval(warmUp)
        let group = DispatchGroup()
        // The pause after the warm-up: every driver arrives, then waits to be let go.
        let paused = DispatchGroup(), resume = DispatchSemaphore(value: 0)
        for d in 0..<drivers {
            group.enter()
            paused.enter()
            Thread {
                var k = 0
                var pausedYet = false
                while Date() < end {
                    if !pausedYet && Date() >= warmEnd {
                        pausedYet = true
                        paused.leave()
                        resume.wait()
                    }
                    let roundSeed = seed &+ UInt64(d) &* 1_000_003 &+ UInt64(k)
                    var workload = Workload(seed: roundSeed)
                    let round = Round(items: 4096)
                    do {
                        try workload.run(round)
                    } catch {
                        failures.locked { $0.append("round seed \(roundSeed): \(error)") }
                    }
                    let (lost, twice) = round.verdict()
                    if !lost.isEmpty || !twice.isEmpty {
                        failures.locked {
                            $0.append("round seed \(roundSeed): \(lost.count) items lost \(lost.prefix(5)), \(twice.count) run twice \(twice.prefix(5))")
                        }
                    }
                    items.add(round.issued, ordering: .relaxed)
                    rounds.add(1, ordering: .relaxed)
                    k += 1
                }
                if !pausedYet { paused.leave() }
                group.leave()
            }.start()
        }
        paused.wait()
        let threadsAfterWarmUp = spindleThreadsOnceSettled()
        for _ in 0..<drivers { resume.signal() }
        group.wait()
        running.store(false, ordering: .relaxed)
        Thread.sleep(forTimeInterval: 1.1)
        let all = samples.locked { $0 }
        let measured = all.filter { $0.seconds >= warmUp }
        if let output {
            let csv = "seconds,rss_kb,threads,fds,items\n" + all.map {
                String(format: "%.1f,%d,%d,%d,%d", $0.seconds, $0.rssKB, $0.threads, $0.fds, $0.items)
            }.joined(separator: "\n") + "\n"
            try csv.write(toFile: output, atomically: true, encoding: .utf8)
        }
        var problems = failures.locked { $0 }
        var summary = "soak: \(String(format: "%.1f", minutes)) min, \(rounds.load(ordering: .relaxed)) rounds, \(items.load(ordering: .relaxed)) items"
        if measured.count >= 3 {
            let v = Verdict(measured, rssLimitMB: rssLimit)
            problems += v.problems
            let threadsAtEnd = spindleThreadsOnceIdle(atMost: threadsAfterWarmUp)
            if threadsAtEnd > threadsAfterWarmUp {
                problems.append("Spindle's threads stayed: \(threadsAtEnd) with no work after the run, \(threadsAfterWarmUp) after the warm-up")
            }
            summary += String(format: "; after a %.0f s warm-up: resident memory %.1f MB, drift %+.2f MB; threads at most %d early, %d late; Spindle's with no work %d after the warm-up, %d at the end; descriptors %d-%d",
                              warmUp, v.rssMeanMB, v.rssDriftMB, v.threadsFirst, v.threadsLast, threadsAfterWarmUp, threadsAtEnd, v.fdsMin, v.fdsMax)
            if let plot {
                let title = String(format: "Spindle soak: %.1f min, %d items, RSS drift %+.2f MB", minutes,
                                   items.load(ordering: .relaxed), v.rssDriftMB)
                try soakSVG(all, warmUp: warmUp, title: title).write(toFile: plot, atomically: true, encoding: .utf8)
            }
        } else {
            problems.append("too few samples after the warm-up to judge (run longer)")
        }
        print(summary)
        if !problems.isEmpty {
            for p in problems { print("soak: FAILED: \(p)") }
            throw ExitCode.failure
        }
        print("soak: nothing lost, nothing run twice, flat after the warm-up")
    }
}
