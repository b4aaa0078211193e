//! The evictor runs as a batch thread: a fault's kick must not let it
//! preempt the faulting thread on its own CPU.

use tiermem_core::{Config, Runtime};

const PAGE: usize = 4096;

/// The scheduling policy of each of this process's threads named `name`.
fn policies_of_threads_named(name: &str) -> Vec<i32> {
    let tasks = std::fs::read_dir("/proc/self/task").expect("/proc/self/task");
    tasks
        .filter_map(|task| {
            let task = task.ok()?;
            let comm = std::fs::read_to_string(task.path().join("comm")).ok()?;
            (comm.trim_end() == name).then_some(())?;
            let tid: i32 = task.file_name().to_str()?.parse().ok()?;
            // SAFETY: sched_getscheduler reads a thread's policy by id.
            Some(unsafe { libc::sched_getscheduler(tid) })
        })
        .collect()
}

#[test]
fn the_evictor_is_a_batch_thread() {
    let config = Config::builder()
        .dram_budget((64 * PAGE) as u64)
        .page_size(PAGE)
        .backing(std::env::temp_dir())
        .handler_threads(1)
        .build()
        .expect("valid test config");
    let rt = Runtime::new(config).expect(
        "tiermem runtime (needs userfaultfd: run as root or set vm.unprivileged_userfaultfd=1)",
    );
    // The evictor sets its policy as it starts; give it a moment.
    let mut policies = Vec::new();
    for _ in 0..200 {
        policies = policies_of_threads_named("tiermem-evict");
        if !policies.is_empty() && policies.iter().all(|&p| p == libc::SCHED_BATCH) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(!policies.is_empty(), "no tiermem-evict thread found");
    assert!(
        policies.iter().all(|&p| p == libc::SCHED_BATCH),
        "evictor policies {policies:?}, want SCHED_BATCH ({})",
        libc::SCHED_BATCH
    );
    drop(rt);
}
