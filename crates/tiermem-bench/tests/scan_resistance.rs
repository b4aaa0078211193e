//! The scan-resistance workload on tiermem with S3-FIFO and a 16 MiB budget,
//! as `tiermem bench --workload scan-resistance --modes tiermem` runs it:
//! the bench's own counting (windows around each hot pass, tiermem's
//! counters) must find what tiermem-core's `tests/scan_resistance.rs` finds,
//! with every page intact. Needs userfaultfd, like the core tests.

use tiermem_bench::result::Mode;
use tiermem_bench::scan_resistance::ScanShape;
use tiermem_bench::worker::{run_workload, TiermemSet, WorkloadSpec};
use tiermem_core::{CompressSettings, Config, PolicyKind};

const BUDGET: u64 = 16 << 20;
const PAGE: u64 = 4096;

fn spec(shape: ScanShape) -> WorkloadSpec {
    WorkloadSpec::scan_resistance(shape, PAGE, 1)
}

#[test]
fn s3fifo_keeps_the_hot_set_and_the_bench_counts_it() {
    let config = Config::builder()
        .dram_budget(BUDGET)
        .backing("/var/tmp")
        .page_size(PAGE as usize)
        .policy(PolicyKind::S3Fifo)
        // The scan must reach the device: its zero pages would fit in
        // the compressed pool.
        .compress(CompressSettings::off())
        .build()
        .expect("configuring tiermem");
    tiermem_core::global::init(config).expect("starting tiermem (needs userfaultfd)");
    let shape = ScanShape::for_budget(BUDGET, PAGE).expect("shape");
    let spec = spec(shape);
    let set = TiermemSet::new(spec.working_set_bytes).expect("allocating the working set");
    let result = run_workload(Mode::Tiermem, &spec, &set).expect("running the workload");

    assert!(result.verify.is_clean(), "{:?}", result.verify);
    assert_eq!(result.verify.pages_checked, shape.total_pages());
    let scan = result.scan_resistance.expect("scan-resistance result");
    println!(
        "hot set during the scan: {:.1}% ({:?}), read-ahead as miss {:?}; scan {:?}",
        100.0 * scan.hot_during_scan.ratio,
        scan.hot_during_scan.counters,
        scan.hot_during_scan.ratio_read_ahead_as_miss,
        scan.scan.counters
    );
    assert_eq!(
        scan.hot_during_scan.accesses,
        shape.passes() * shape.hot_pages
    );
    // The scan cannot fit in DRAM, so it really went to the device.
    let scan_reads = scan.scan.device_reads.expect("tiermem counts page-ins");
    assert!(
        scan_reads >= shape.scan_pages / 2,
        "only {scan_reads} device reads for {} scan pages",
        shape.scan_pages
    );
    // tiermem-core's test measures 97% for S3-FIFO, read-ahead counted as miss.
    let kept = scan
        .hot_during_scan
        .ratio_read_ahead_as_miss
        .expect("tiermem counts page-ins");
    assert!(kept >= 0.90, "hot set kept {:.1}% < 90%", 100.0 * kept);
    assert!(scan.hot_during_scan.ratio >= kept);
    let overall = result.hit_ratio.expect("hit ratio");
    assert_eq!(
        overall.misses,
        scan.hot_during_scan.misses + scan.scan.misses
    );
}
