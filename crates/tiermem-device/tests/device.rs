//! End-to-end runs of the device probe on real filesystems, kept short
//! (the whole file runs in well under 30 s).

use std::path::Path;
use std::time::Duration;

use tiermem_device::{
    measure_seq_read, run, DeviceConfig, DeviceReport, Engine, IoMode, Pattern, Progress,
    TargetKind,
};

fn quick(dir: &Path, engines: &[Engine]) -> DeviceConfig {
    let mut cfg = DeviceConfig::quick(dir);
    cfg.engines = engines.to_vec();
    cfg
}

fn run_collecting(cfg: &DeviceConfig) -> (DeviceReport, Vec<Progress>) {
    let mut seen = Vec::new();
    let report = run(cfg, &mut |p| seen.push(p)).expect("device run");
    (report, seen)
}

fn entries(dir: &Path) -> usize {
    std::fs::read_dir(dir).expect("read_dir").count()
}

/// The sequential read alone (what `tiermem bench` measures beside a scan):
/// one job on the first engine listed, in a private file that leaves
/// nothing behind.
#[test]
fn the_sequential_read_alone_runs_on_the_first_engine() {
    let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir in /var/tmp");
    for engine in [Engine::Psync, Engine::IoUring] {
        let mut cfg = quick(dir.path(), &[engine, Engine::Psync]);
        cfg.duration_per_job = Duration::from_millis(300);
        let (job, warnings) = measure_seq_read(&cfg).expect("sequential read");
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(job.engine, engine);
        assert_eq!(job.pattern, Pattern::SeqRead);
        assert_eq!((job.block_size, job.qd), (1 << 20, 4));
        assert!(
            job.error.is_none() && job.ops > 0 && job.mb_s > 0.0,
            "{job:?}"
        );
    }
    assert_eq!(entries(dir.path()), 0, "the test file was left behind");
}

#[test]
fn sequential_read_of_a_missing_path_is_a_clear_error() {
    let cfg = quick(
        Path::new("/var/tmp/no-such-dir-for-tiermem"),
        &[Engine::Psync],
    );
    let err = measure_seq_read(&cfg).expect_err("a missing path");
    assert!(
        format!("{err:#}").contains("no-such-dir-for-tiermem"),
        "{err:#}"
    );
}

#[test]
fn quick_psync_and_io_uring_on_var_tmp() {
    let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir in /var/tmp");
    let cfg = quick(dir.path(), &[Engine::Psync, Engine::IoUring]);
    let (report, progress) = run_collecting(&cfg);
    println!("{}", report.render_table());

    // Fill + 5 jobs per engine.
    assert_eq!(report.jobs.len(), 1 + 2 * 5);
    assert_eq!(report.target, TargetKind::Directory);
    assert!(report.jobs[0].fill && report.jobs[0].pattern == Pattern::SeqWrite);
    for j in &report.jobs {
        assert!(j.error.is_none(), "{}: {:?}", j.label(), j.error);
        assert!(j.ops > 0 && j.iops > 0.0 && j.mb_s > 0.0, "{}", j.label());
        assert!(j.lat_mean_us > 0.0 && j.lat_p50_us > 0.0, "{}", j.label());
        assert!(j.lat_p99_us >= j.lat_p50_us && j.lat_p999_us >= j.lat_p99_us);
        assert!(j.cpu_pct >= 0.0);
        if !j.fill {
            // Time-bound jobs run for about their duration.
            assert!(
                j.runtime_s > 0.3 && j.runtime_s < 5.0,
                "{}: {}",
                j.label(),
                j.runtime_s
            );
        }
    }
    // The fill covered the whole file exactly once.
    let fill = &report.jobs[0];
    assert_eq!(fill.ops * fill.block_size, report.test_size);
    assert_eq!(report.test_size, 256 << 20);

    assert!(report.qd1_read_latency_us().is_some_and(|v| v > 0.0));
    assert!(report.qdn_read_iops().is_some_and(|v| v > 0.0));
    assert!(report.seq_read_mb_s().is_some_and(|v| v > 0.0));
    assert!(report.qd1_write_latency_us().is_some_and(|v| v > 0.0));
    assert!(report.device.fs_type.is_some());

    // Progress: every job reported, fractions in range and ending at 1.
    assert!(!progress.is_empty());
    assert!(progress.iter().all(
        |p| (0.0..=1.0).contains(&p.job_fraction) && (0.0..=1.0).contains(&p.overall_fraction)
    ));
    let last = progress.last().expect("progress");
    assert_eq!(last.job_index + 1, last.job_count);
    assert!((last.overall_fraction - 1.0).abs() < 1e-9);

    // JSON round trip, in memory and through a file.
    let json = serde_json::to_string(&report).expect("serialise");
    let back: DeviceReport = serde_json::from_str(&json).expect("parse");
    assert_eq!(back, report);
    let saved = dir.path().join("cache/report.json");
    report.save(&saved).expect("save");
    assert_eq!(DeviceReport::load(&saved).expect("load"), report);

    // The private test file is gone (only our cache dir remains).
    assert_eq!(entries(dir.path()), 1);
}

/// Spinning for completions needs nothing from the device: every job of
/// the engine completes, reads and writes, QD1 and QD N, and the report
/// says what the engine costs.
#[test]
fn the_spinning_engine_runs_every_job() {
    let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir in /var/tmp");
    let mut cfg = quick(dir.path(), &[Engine::IoUringSpin]);
    cfg.duration_per_job = Duration::from_millis(200);
    cfg.file_size = 64 << 20;
    let (report, _) = run_collecting(&cfg);
    println!("{}", report.render_table());
    assert_eq!(report.jobs.len(), 1 + 5);
    for j in &report.jobs {
        assert!(j.error.is_none(), "{}: {:?}", j.label(), j.error);
        assert!(j.ops > 0 && j.lat_mean_us > 0.0, "{}", j.label());
        if !j.fill {
            // The submitting thread never sleeps.
            assert!(j.cpu_pct > 50.0, "{}: CPU {}%", j.label(), j.cpu_pct);
        }
    }
    assert!(report.qd1_read_latency_us().is_some_and(|v| v > 0.0));
    assert!(
        report
            .notes
            .iter()
            .any(|n| n.starts_with("io_uring-spin: ")),
        "{:?}",
        report.notes
    );
    assert_eq!(entries(dir.path()), 0);
}

#[test]
fn polling_engines_succeed_or_report_unsupported() {
    let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir in /var/tmp");
    let mut cfg = quick(
        dir.path(),
        &[
            Engine::IoUringSqpoll,
            Engine::IoUringIopoll,
            Engine::IoUringHybrid,
        ],
    );
    cfg.duration_per_job = Duration::from_millis(200);
    cfg.file_size = 64 << 20;
    let (report, _) = run_collecting(&cfg);
    println!("{}", report.render_table());
    assert_eq!(report.jobs.len(), 1 + 3 * 5);
    for j in &report.jobs {
        match &j.error {
            None => assert!(j.iops > 0.0 && j.lat_mean_us > 0.0, "{}", j.label()),
            // Polling modes are often unavailable (no poll queues); SQPOLL
            // only where io_uring itself is restricted.
            Some(e) => assert!(
                e.starts_with("unsupported: ") && j.engine.is_uring(),
                "{}: unexpected error {e}",
                j.label()
            ),
        }
    }
    assert_eq!(entries(dir.path()), 0);
}

#[test]
fn tmpfs_is_flagged_as_memory() {
    let Ok(dir) = tempfile::tempdir_in("/dev/shm") else {
        eprintln!("no /dev/shm here; skipping");
        return;
    };
    let mut cfg = quick(dir.path(), &[Engine::Psync, Engine::IoUringIopoll]);
    cfg.duration_per_job = Duration::from_millis(100);
    cfg.file_size = 16 << 20;
    let (report, _) = run_collecting(&cfg);
    println!("{}", report.render_table());
    assert_eq!(report.device.fs_type.as_deref(), Some("tmpfs"));
    let loud = report
        .notes
        .iter()
        .any(|n| n.contains("memory-backed") || n.contains("PAGE CACHE"));
    assert!(loud, "tmpfs must be called out: {:?}", report.notes);
    if report.io_mode == IoMode::Buffered {
        assert!(report.notes.iter().any(|n| n.contains("PAGE CACHE")));
    }
    assert!(report
        .jobs
        .iter()
        .filter(|j| j.engine == Engine::Psync)
        .all(|j| j.is_ok()));
    // tmpfs has no polled I/O: a clean "unsupported", never a panic.
    for j in report
        .jobs
        .iter()
        .filter(|j| j.engine == Engine::IoUringIopoll)
    {
        assert!(
            j.is_ok()
                || j.error
                    .as_deref()
                    .is_some_and(|e| e.starts_with("unsupported: ")),
            "{:?}",
            j.error
        );
    }
    assert_eq!(entries(dir.path()), 0);
}

#[test]
fn existing_file_is_measured_read_only() {
    let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir in /var/tmp");
    let p = dir.path().join("precious.dat");
    let content: Vec<u8> = (0..(8u32 << 20)).map(|i| (i % 251) as u8).collect();
    std::fs::write(&p, &content).expect("write");
    let mut cfg = quick(&p, &[Engine::Psync, Engine::IoUring]);
    cfg.duration_per_job = Duration::from_millis(100);
    let (report, _) = run_collecting(&cfg);
    assert_eq!(report.target, TargetKind::RegularFile);
    assert!(report.jobs.iter().all(|j| !j.pattern.is_write()));
    assert!(
        report.jobs.iter().all(|j| j.is_ok()),
        "{}",
        report.render_table()
    );
    assert!(report
        .notes
        .iter()
        .any(|n| n.contains("write tests skipped")));
    assert_eq!(std::fs::read(&p).expect("read back"), content);
}

#[test]
fn bad_paths_are_errors_not_panics() {
    let cfg = DeviceConfig::quick("/nonexistent/tiermem/device/path");
    let err = run(&cfg, &mut |_| {}).expect_err("must fail");
    assert!(format!("{err:#}").contains("/nonexistent"), "{err:#}");
    let mut cfg = DeviceConfig::quick("/var/tmp");
    cfg.qd = 0;
    assert!(run(&cfg, &mut |_| {}).is_err());
}
