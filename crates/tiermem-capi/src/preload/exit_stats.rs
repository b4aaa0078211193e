//! What a tiered program reports at exit: the one-screen summary on stderr
//! (`tiermem run --stats`, or `TIERMEM_STATS=1`), the same as JSON in a
//! file (`tiermem run --stats-file PATH`, or `TIERMEM_STATS_FILE`), and a
//! note when it paged to a private file instead of the backing store the
//! run was given.

use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::OnceLock;

use tiermem_core::Stats;

use super::{program_name, runtime, Guard};

/// A private copy of stderr: programs such as coreutils close fd 2 before
/// they exit, and the summary must still get out.
static STDERR_COPY: AtomicI32 = AtomicI32::new(-1);

/// The backing store this process found held by another process of its
/// run; see [`note_spill`].
static SPILLED_FROM: OnceLock<PathBuf> = OnceLock::new();

pub fn register() {
    keep_stderr();
    // SAFETY: registers a plain extern "C" function with no arguments.
    unsafe { libc::atexit(print_at_exit) };
}

/// The JSON summary's path template (`%p`: the pid), for [`write_file_at_exit`].
static STATS_FILE: OnceLock<String> = OnceLock::new();

/// The `schema` of the JSON summary.
pub const STATS_SCHEMA: &str = tiermem_host::stats_file::SCHEMA;

/// Writes the statistics as JSON to `template` (`%p` replaced by the
/// pid) at exit.
pub fn register_file(template: String) {
    if STATS_FILE.set(template).is_ok() {
        keep_stderr();
        // SAFETY: registers a plain extern "C" function with no arguments.
        unsafe { libc::atexit(write_file_at_exit) };
    }
}

/// The summary as JSON: the envelope, the program and its pid, and every
/// counter of [`Stats`] (times in nanoseconds, sizes in bytes).
pub fn stats_json(program: &str, pid: u32, s: &Stats) -> serde_json::Value {
    stats_json_with_schema(STATS_SCHEMA, program, pid, s)
}

/// [`stats_json`] under another schema (the control socket's replies).
pub fn stats_json_with_schema(
    schema: &str,
    program: &str,
    pid: u32,
    s: &Stats,
) -> serde_json::Value {
    tiermem_host::wrap(
        schema,
        serde_json::json!({ "program": program, "pid": pid, "stats": s }),
    )
}

/// `tiermem run`'s pid, which it passes so that the program it started
/// (its child, after any exec) can tell itself from the run's other
/// processes.
pub const ENV_STATS_OWNER: &str = "TIERMEM_STATS_OWNER";

/// Whether this process writes the stats file: the program `tiermem run`
/// started always does (or any process, outside `tiermem run`); the
/// other processes of a run (a shell's subshells, a version manager's
/// helpers, the program's children) only when `%p` gives each a file of
/// its own, and only if they paged, so that helpers leave no litter.
fn writes_stats_file(template: &str, owner: Option<u32>, parent: u32, s: &Stats) -> bool {
    let started_by_run = owner.is_none_or(|o| o == parent);
    started_by_run || (template.contains("%p") && s.page_ins + s.page_outs > 0)
}

extern "C" fn write_file_at_exit() {
    let _inside = Guard::enter();
    let Some(template) = STATS_FILE.get() else {
        return;
    };
    let stats = runtime().stats();
    let owner = std::env::var(ENV_STATS_OWNER)
        .ok()
        .and_then(|v| v.parse().ok());
    // SAFETY: getppid has no preconditions.
    let parent = unsafe { libc::getppid() } as u32;
    if !writes_stats_file(template, owner, parent, &stats) {
        return;
    }
    let pid = std::process::id();
    let path = tiermem_host::stats_file::expand(template, pid);
    let json = stats_json(&program_name(), pid, &stats);
    let text = serde_json::to_string_pretty(&json).unwrap_or_default() + "\n";
    if let Err(e) = std::fs::write(&path, text) {
        let msg = format!("tiermem: writing the statistics to {path} failed: {e}\n");
        write_all(stderr_fd(), msg.as_bytes());
    }
    note_reported();
}

/// Says at exit, if this process paged anything, that its pages went to a
/// private file and not to `named`. Short-lived helpers of a run (a shell,
/// `env`, a version manager's shim) page nothing and stay quiet.
pub fn note_spill(named: PathBuf) {
    if SPILLED_FROM.set(named).is_ok() {
        keep_stderr();
        // SAFETY: registers a plain extern "C" function with no arguments.
        unsafe { libc::atexit(report_spill) };
    }
}

fn keep_stderr() {
    if STDERR_COPY.load(Ordering::Relaxed) == -1 {
        // SAFETY: duplicates fd 2 to a close-on-exec descriptor.
        let fd = unsafe { libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 3) };
        STDERR_COPY.store(fd, Ordering::Relaxed);
    }
}

fn stderr_fd() -> i32 {
    match STDERR_COPY.load(Ordering::Relaxed) {
        -1 => 2,
        fd => fd,
    }
}

extern "C" fn print_at_exit() {
    let _inside = Guard::enter();
    let s = runtime().stats();
    let text = summary(&program_name(), std::process::id(), &s);
    write_all(stderr_fd(), text.as_bytes());
    note_reported();
}

/// Tells `tiermem run` that this process reported at exit: its pid, one
/// line, on the descriptor `TIERMEM_REPORTED_FD` names. A program that
/// ends without its exit handlers (a direct `exit_group`, as Go programs
/// make, or a fatal signal) never gets here, and `tiermem run` reports
/// the last statistics it took instead.
fn note_reported() {
    let fd = std::env::var(tiermem_host::stats_file::ENV_REPORTED_FD)
        .ok()
        .and_then(|v| v.parse::<i32>().ok());
    if let Some(fd) = fd.filter(|fd| *fd > 2) {
        write_all(fd, format!("{}\n", std::process::id()).as_bytes());
    }
}

extern "C" fn report_spill() {
    let _inside = Guard::enter();
    let (Some(named), s) = (SPILLED_FROM.get(), runtime().stats()) else {
        return;
    };
    if s.page_outs == 0 {
        return;
    }
    let text = format!(
        "tiermem: {} (pid {}) paged {} to a private file in {}, not to {}: another tiermem process (the one that started this one, or an earlier one) held that backing store when this one started\n",
        program_name(),
        std::process::id(),
        mib(s.bytes_written),
        s.backing_path,
        named.display()
    );
    write_all(stderr_fd(), text.as_bytes());
}

fn write_all(fd: i32, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: writes from a valid buffer of `bytes.len()` bytes.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n <= 0 {
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        bytes = &bytes[n as usize..];
    }
}

pub(super) use tiermem_host::format::mib;

fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".into()
    } else {
        format!("{:.1}%", 100.0 * part as f64 / whole as f64)
    }
}

/// Neighbour reads, with the share of the parked sample the program used.
fn neighbours(s: &Stats) -> String {
    if s.neighbour_reads == 0 {
        return "0".into();
    }
    format!(
        "{} ({} used of {} sampled)",
        s.neighbour_reads,
        pct(s.neighbour_used, s.neighbour_samples),
        s.neighbour_samples
    )
}

fn us(ns: u64) -> String {
    format!("{:.1} µs", ns as f64 / 1000.0)
}

/// Renders the summary. "Served from DRAM" counts the faults that needed no
/// device read (first touches, probation rescues, compressed hits,
/// write-protect faults):
/// accesses to mapped pages never trap, so true hits cannot be counted.
pub fn summary(program: &str, pid: u32, s: &Stats) -> String {
    // Read-ahead pages are page-ins no fault waited for.
    let demand_reads = s.page_ins.saturating_sub(s.prefetch_issued);
    let served_from_dram = s.faults.saturating_sub(demand_reads);
    let l = &s.fault_latency;
    let mut text = format!(
        "\n── tiermem: {program} (pid {pid}) ──────────────────────────────\n\
         budget          {budget}, peak resident {peak} ({peak_pct} of budget), page {page} KiB, policy {policy}\n\
         organization    {organization}; conflict evictions {conflicts}, write-throughs {wts}\n\
         faults          {faults} (missing {missing}, write-protect {wp}, first touch {zero}); reads installed writable (write predicted) {predicted}\n\
         hit ratio       {hit} of faults served from DRAM without a device read\n\
         page-ins        {ins} ({read} read), probation rescues {rescues}, read ahead {prefetch} (used {phits}, wasted {pwaste}), neighbours {neighbours}\n\
         page-outs       {outs} ({written} written), clean drops {clean}, zero drops {zdrops}\n\
         fault latency   mean {mean}, p50 {p50}, p90 {p90}, p99 {p99}, p99.9 {p999}, max {max}\n\
         page-in         p50 {pi50} (device read p50 {rd50}), p99 {pi99} (device read p99 {rd99})\n\
         backing         {path} (reads: {engine}, writes: {wengine}{direct}), {stored} stored now\n",
        budget = mib(s.budget_bytes),
        peak = mib(s.peak_resident_bytes),
        peak_pct = pct(s.peak_resident_bytes, s.budget_bytes),
        page = s.page_size / 1024,
        policy = s.policy,
        organization = s.organization,
        conflicts = s.conflict_evictions,
        wts = s.write_throughs,
        faults = s.faults,
        missing = s.missing_faults,
        wp = s.wp_faults,
        zero = s.zero_fills,
        predicted = s.predicted_writes,
        hit = pct(served_from_dram, s.faults),
        ins = s.page_ins,
        read = mib(s.bytes_read),
        rescues = s.probation_hits,
        outs = s.page_outs,
        written = mib(s.bytes_written),
        clean = s.clean_drops,
        zdrops = s.zero_drops,
        mean = us(l.mean_ns),
        p50 = us(l.p50_ns),
        p90 = us(l.p90_ns),
        p99 = us(l.p99_ns),
        p999 = us(l.p999_ns),
        max = us(l.max_ns),
        pi50 = us(s.page_in_latency.p50_ns),
        pi99 = us(s.page_in_latency.p99_ns),
        rd50 = us(s.read_latency.p50_ns),
        rd99 = us(s.read_latency.p99_ns),
        path = s.backing_path,
        engine = s.io_engine,
        wengine = s.write_engine,
        direct = match (s.direct_io, s.encrypted) {
            (true, true) => ", O_DIRECT, encrypted",
            (true, false) => ", O_DIRECT",
            (false, true) => ", encrypted",
            (false, false) => "",
        },
        prefetch = s.prefetch_issued,
        phits = s.prefetch_hits,
        pwaste = s.prefetch_wasted,
        neighbours = neighbours(s),
        stored = mib(s.stored_bytes),
    );
    text.push_str(&compressed_line(s));
    text.push_str(&errors_line(s));
    text.push_str(&pinned_line(s));
    text.push_str(&parked_line(s));
    text.push_str(&discarded_line(s));
    text.push_str(&huge_regions_line(s));
    text
}

/// `MADV_HUGEPAGE` memory kept by 2 MiB regions (when any region formed).
fn huge_regions_line(s: &Stats) -> String {
    if s.huge_regions_formed == 0 {
        return String::new();
    }
    format!(
        "huge regions    {} kept now (2 MiB of MADV_HUGEPAGE memory each); formed {}, proven in use {}, dropped unused {}, displaced {}\n",
        s.huge_regions_kept,
        s.huge_regions_formed,
        s.huge_regions_proven,
        s.huge_regions_dropped,
        s.huge_regions_displaced,
    )
}

/// Pages the program discarded with its own `madvise` system call (when any).
fn discarded_line(s: &Stats) -> String {
    if s.discarded_behind_our_back == 0 {
        return String::new();
    }
    format!(
        "discarded       {} page(s) by the program's own madvise system calls, zero-filled when touched again\n",
        s.discarded_behind_our_back,
    )
}

/// The dictionaries, as the compressed line names them.
fn dictionary_words(bytes: u64, gathered: u64) -> String {
    match (bytes, gathered) {
        (0, _) => "no dictionary".into(),
        (b, 1) => format!("{} KiB dictionary", b >> 10),
        (b, n) => format!("{} KiB of dictionaries, {n} gathered", b >> 10),
    }
}

/// The pool's share of the budget, and how often an adapting one moved.
fn share_words(percent: u32, moves: u64) -> String {
    match moves {
        0 => format!("share {percent}%"),
        n => format!("share {percent}% after {n} move(s)"),
    }
}

/// The compressed tier: what it holds and what it served.
fn compressed_line(s: &Stats) -> String {
    if s.compression == "off" {
        return "compressed      off (TIERMEM_COMPRESS=off)\n".to_string();
    }
    format!(
        "compressed      {pages} page(s) in {pool} (ratio {ratio:.2}, {dictionary}, {share}); \
         stored {stores} \
         (same-filled {same}, with the dictionary {with_dictionary}), rejected {rejected}, passed by {bypassed}, written back {wb}; \
         hits {hits} \
         (p50 {p50}, p99 {p99})\n",
        pages = s.compressed_pages,
        pool = mib(s.pool_bytes),
        ratio = s.compression_ratio(),
        dictionary = dictionary_words(s.compress_dictionary_bytes, s.dictionaries_gathered),
        share = share_words(s.compress_share_percent, s.compress_share_moves),
        stores = s.compressed_stores,
        same = s.same_filled_pages,
        with_dictionary = s.dictionary_pages,
        rejected = s.compress_rejected,
        bypassed = s.compress_bypassed,
        wb = s.compressed_writebacks,
        hits = s.compressed_hits,
        p50 = us(s.compressed_hit_latency.p50_ns),
        p99 = us(s.compressed_hit_latency.p99_ns),
    )
}

/// Store space kept for forked children (when any).
fn parked_line(s: &Stats) -> String {
    if s.parked_bytes == 0 {
        return String::new();
    }
    format!(
        "kept for forks  {} of freed store space that forked children may still read\n",
        mib(s.parked_bytes),
    )
}

/// Pages kept in DRAM for I/O in flight into them, or locked (when any).
fn pinned_line(s: &Stats) -> String {
    if s.pinned_skips == 0 && s.locked_bytes == 0 && s.moved_out == 0 {
        return String::new();
    }
    let moved = match s.moved_out {
        0 => String::new(),
        n => format!("; {n} dirty victim(s) moved out past the kernel's pin check"),
    };
    format!(
        "kept in DRAM    {} victim(s) skipped while under I/O or locked; {} locked now{moved}\n",
        s.pinned_skips,
        mib(s.locked_bytes),
    )
}

/// One line on store errors, only when there were any: a clean run's
/// summary stays as it was.
fn errors_line(s: &Stats) -> String {
    let any = s.read_errors + s.write_errors + s.checksum_errors + s.stalls;
    if any == 0 {
        return String::new();
    }
    format!(
        "errors          reads {} (retried {}, checksum mismatches {}, pages lost {}, read-ahead dropped {}), \
         writes {} ({} slots quarantined), stalls {}\n",
        s.read_errors,
        s.read_retries,
        s.checksum_errors,
        s.poisoned_pages,
        s.read_ahead_dropped,
        s.write_errors,
        s.quarantined_slots,
        s.stalls,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_program_always_writes_and_helpers_only_their_own_paging() {
        let idle = Stats::default();
        let paged = Stats {
            page_outs: 3,
            ..Stats::default()
        };
        assert!(
            writes_stats_file("/s.json", Some(10), 10, &idle),
            "the started program"
        );
        assert!(
            writes_stats_file("/s.json", None, 1, &idle),
            "outside tiermem run"
        );
        assert!(
            !writes_stats_file("/s.json", Some(10), 11, &paged),
            "would overwrite"
        );
        assert!(
            !writes_stats_file("/s-%p.json", Some(10), 11, &idle),
            "paged nothing"
        );
        assert!(writes_stats_file("/s-%p.json", Some(10), 11, &paged));
    }

    #[test]
    fn the_json_summary_has_the_envelope_and_every_counter() {
        let s = Stats {
            page_ins: 50,
            page_size: 4096,
            policy: "clock",
            ..Stats::default()
        };
        let v = stats_json("prog", 9, &s);
        assert_eq!(v["schema"], STATS_SCHEMA);
        assert_eq!(v["program"], "prog");
        assert_eq!(v["pid"], 9);
        assert_eq!(v["stats"]["page_ins"], 50);
        assert!(v["stats"]["fault_latency"]["p99_ns"].is_u64());
        assert!(v["host"]["cgroup"].is_string());
    }

    #[test]
    fn summary_has_every_figure_the_issue_asks_for() {
        let s = Stats {
            faults: 200,
            page_ins: 50,
            page_outs: 70,
            clean_drops: 5,
            budget_bytes: 32 << 20,
            peak_resident_bytes: 16 << 20,
            page_size: 4096,
            compression: "lz4",
            compressed_pages: 1024,
            pool_bytes: 1 << 20,
            compress_dictionary_bytes: 64 << 10,
            dictionaries_gathered: 1,
            compress_share_percent: 50,
            compressed_hits: 33,
            ..Stats::default()
        };
        let text = summary("redis-server", 42, &s);
        for word in [
            "faults          200",
            "75.0% of faults",
            "page-ins        50",
            "page-outs       70",
            "clean drops 5",
            "peak resident 16.0 MiB (50.0% of budget)",
            "p99",
            "compressed      1024 page(s) in 1.0 MiB (ratio 4.00, 64 KiB dictionary, share 50%)",
            "hits 33",
        ] {
            assert!(text.contains(word), "missing {word:?} in\n{text}");
        }
        assert!(text.lines().count() <= 12, "fits one screen");
    }
}
