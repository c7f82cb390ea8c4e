import Logging
import Metrics
import Prometheus
import Spindle

let logger = Logger(label: "thumbnails")
ThreadPool.logger = logger                        // the process-wide notes

let registry = PrometheusCollectorRegistry()
MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))

var config = ThreadPool.Configuration()
config.name = "spindle-thumb"
config.nice = -5                                  // refused without CAP_SYS_NICE: logged
config.logger = logger
let pool = try ThreadPool(configuration: config)

// The quality-of-service classes, and this pool under the name "thumbnails".
let classes = PoolMetrics()
let mine = PoolMetrics(pools: ["thumbnails": pool], every: .seconds(5))

// Serve `registry.emit(into:)` on /metrics, and stop both when the server stops:
classes.stop()
mine.stop()
