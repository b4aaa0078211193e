//! Handler threads are pinned one per CPU, so a fault is usually served on
//! the CPU that took it (cross-CPU wake-ups cost 15-30 us per fault on a VM).

mod common;

use std::collections::BTreeSet;

use common::runtime;
use tiermem_core::PolicyKind;

/// Parses `Cpus_allowed_list` ("0-3,5") into CPU numbers.
fn parse_cpu_list(list: &str) -> BTreeSet<usize> {
    let mut cpus = BTreeSet::new();
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<usize>().unwrap()..=b.parse::<usize>().unwrap()),
            None => {
                cpus.insert(part.parse().unwrap());
            }
        }
    }
    cpus
}

/// CPU affinity of every thread of this process named `tiermem-fault*`.
fn handler_affinities() -> Vec<BTreeSet<usize>> {
    let mut out = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !comm.starts_with("tiermem-fault") {
            continue;
        }
        let status = std::fs::read_to_string(task.path().join("status")).unwrap();
        let list = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap();
        out.push(parse_cpu_list(list));
    }
    out
}

#[test]
fn one_handler_pinned_to_each_cpu() {
    let cpus = std::thread::available_parallelism().unwrap().get();
    let config = tiermem_core::Config::builder()
        .dram_budget(16 << 20)
        .backing("/var/tmp")
        .build()
        .unwrap();
    assert_eq!(
        config.handler_threads,
        cpus.clamp(1, 16),
        "default: one handler per CPU"
    );
    let rt = tiermem_core::Runtime::new(config).unwrap();
    // Threads pin themselves as they start; give them a moment.
    let mut affinities = handler_affinities();
    for _ in 0..100 {
        if affinities.len() == cpus && affinities.iter().all(|a| a.len() == 1) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        affinities = handler_affinities();
    }
    assert_eq!(affinities.len(), cpus, "{affinities:?}");
    assert!(
        affinities.iter().all(|a| a.len() == 1),
        "each handler is pinned to one CPU: {affinities:?}"
    );
    let covered: BTreeSet<usize> = affinities.iter().flatten().copied().collect();
    assert_eq!(
        covered.len(),
        cpus,
        "every CPU has its handler: {affinities:?}"
    );
    drop(rt);
    // The explicit setting still wins.
    let _two = runtime(16 << 20, 4096, PolicyKind::Clock);
    // io_uring's kernel workers briefly carry the name of the thread that
    // spawned them; let them settle.
    for _ in 0..100 {
        if handler_affinities().len() == 2 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(
        handler_affinities().len(),
        2,
        "common::runtime asks for 2 handler threads"
    );
}
