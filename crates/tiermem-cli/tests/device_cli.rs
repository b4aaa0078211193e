//! `tiermem device` as a user runs it: a short measurement of the
//! filesystem under a scratch directory, printed as JSON.

mod timed;

use std::path::Path;

#[test]
fn device_measures_and_names_the_interrupt_cpus() {
    let dir = tempfile::Builder::new()
        .prefix("tiermem-device-cli-")
        .tempdir_in("/var/tmp")
        .expect("a scratch directory in /var/tmp");
    let out = timed::tiermem_within(120)
        .arg("device")
        .arg(dir.path())
        .args(["--engines", "psync", "--size", "32M", "--duration", "0.2"])
        .args(["--qd", "4", "--json", "--no-cache"])
        .output()
        .expect("tiermem device runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("--json prints JSON");
    let jobs = report["jobs"].as_array().expect("jobs");
    assert!(!jobs.is_empty(), "{report}");
    let notes: Vec<&str> = report["notes"]
        .as_array()
        .expect("notes")
        .iter()
        .filter_map(|n| n.as_str())
        .collect();
    let irq_note = notes.iter().find(|n| n.contains("`--cpus irq`"));
    match tiermem_core::cpus::device_irq_cpus(Path::new("/var/tmp")) {
        Ok((cpus, device)) => {
            let note = irq_note.unwrap_or_else(|| panic!("no interrupt note: {notes:?}"));
            let cpus = tiermem_core::cpus::format_cpu_list(&cpus);
            assert!(
                note.contains(&format!("the interrupts of {device} go to CPU(s) {cpus}")),
                "{note}"
            );
        }
        Err(_) => assert!(irq_note.is_none(), "{notes:?}"),
    }
    // A guest that halts idle vCPUs at once inflates interrupt-completed
    // figures: the report says so there, and only there.
    let halting_note = notes
        .iter()
        .any(|n| n.contains(tiermem_core::cpuidle::HALT_NOTE_MARK));
    assert_eq!(
        halting_note,
        tiermem_core::cpuidle::IdleWait::read().halts_at_once(),
        "{notes:?}"
    );
}
