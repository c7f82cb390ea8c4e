/// Spindle: a work-stealing thread pool for Swift on Linux, with Foundation's
/// `Operation` / `OperationQueue` semantics on top.
///
/// `import Spindle` re-exports Foundation, so a file that swaps `import Foundation` for
/// `import Spindle` keeps compiling and gets Spindle's types where the names overlap.
@_exported import Foundation
