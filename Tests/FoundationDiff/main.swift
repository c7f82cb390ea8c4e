// Scenarios that run unchanged against Foundation's OperationQueue and against Spindle's
// (compiled once with `-DSPINDLE`). Each prints `name: observation` lines;
// scripts/foundation-diff.sh builds both, runs both and compares the lines name by name.
// Foundation is the judge here, not an expectation written by hand: a scenario only has
// to make what it observes deterministic on both, never say what the answer is.
//
// Rules for a scenario: its output must not depend on timing (wait for what it
// observes, or observe what cannot race); one that cannot return on one of the two
// (a deadlock on purpose) runs under `bounded`, which prints TIMEOUT; and a scenario
// where Foundation on Linux is known to differ from Apple's documented behaviour is
// listed, with the reason, in known-differences.txt.
#if SPINDLE
import Spindle
#else
import Foundation
#endif
import Dispatch

// Each file holds the scenarios of one concern; they run in this order, one at a time.
operationScenarios()
completionScenarios()
cancellationScenarios()
queueScenarios()
subclassScenarios()
edgeScenarios()
sequenceScenarios()
orderScenarios()
overrideScenarios()
getterOverrideScenarios()
barrierScenarios()
earlyFinishScenarios()
cancelledHeldScenarios()
frameworkScenarios()
baseClassScenarios()
wideScenarios()
lifetimeScenarios()
emit("END")
