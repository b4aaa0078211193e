//! Latency figures and CPU accounting of a job.
//!
//! Latency is per I/O, from just before submission to the moment the
//! completion is seen, recorded in nanoseconds in the latency histogram
//! `tiermem bench` uses too ([`tiermem_host::histogram`]: three significant
//! figures). CPU is `getrusage(RUSAGE_SELF)` user+sys time over wall time;
//! it covers every thread of the process, including io_uring's kernel-side
//! threads (`iou-sqp-*`, `iou-wrk-*`), which live in our thread group.
//! Their share is read separately from `/proc/self/task/*/schedstat`.

use std::fs;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tiermem_host::histogram::LatencyHistogram;

/// Records one I/O's latency, `elapsed`, in `hist`.
#[inline]
pub(crate) fn record_latency(hist: &mut LatencyHistogram, elapsed: Duration) {
    hist.record(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX));
}

/// Latency figures of one job, in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub min_us: f64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

impl LatencySummary {
    /// The figures of `hist`: exact minimum, mean and maximum, and the
    /// histogram's percentiles.
    pub(crate) fn of(hist: &LatencyHistogram) -> LatencySummary {
        if hist.count() == 0 {
            return LatencySummary::default();
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        LatencySummary {
            min_us: us(hist.min_ns()),
            mean_us: hist.mean_ns() / 1000.0,
            p50_us: us(hist.quantile(0.50)),
            p99_us: us(hist.quantile(0.99)),
            p999_us: us(hist.quantile(0.999)),
            max_us: us(hist.max_ns()),
        }
    }
}

/// CPU time of the process at one instant.
#[derive(Debug, Clone, Copy)]
pub struct CpuSnapshot {
    wall: Instant,
    user_us: u64,
    sys_us: u64,
}

/// CPU use over an interval, in percent of one CPU.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuUsage {
    pub total_pct: f64,
    pub user_pct: f64,
    pub sys_pct: f64,
}

impl CpuSnapshot {
    pub fn now() -> Self {
        // SAFETY: `rusage` is plain old data, so all-zero is a valid value.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `ru` is a valid, writable rusage; RUSAGE_SELF always
        // succeeds for the calling process.
        let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
        let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
        let (user_us, sys_us) = if rc == 0 {
            (tv(ru.ru_utime), tv(ru.ru_stime))
        } else {
            (0, 0)
        };
        CpuSnapshot {
            wall: Instant::now(),
            user_us,
            sys_us,
        }
    }

    /// Usage between `self` (earlier) and `later`.
    pub fn usage_until(&self, later: &CpuSnapshot) -> CpuUsage {
        let wall_us = later.wall.duration_since(self.wall).as_secs_f64() * 1e6;
        if wall_us <= 0.0 {
            return CpuUsage::default();
        }
        let user = later.user_us.saturating_sub(self.user_us) as f64;
        let sys = later.sys_us.saturating_sub(self.sys_us) as f64;
        CpuUsage {
            total_pct: 100.0 * (user + sys) / wall_us,
            user_pct: 100.0 * user / wall_us,
            sys_pct: 100.0 * sys / wall_us,
        }
    }
}

/// CPU time of every thread of the process at one instant, to attribute
/// the share of io_uring's kernel threads (comm `iou-sqp-*`, `iou-wrk-*`).
///
/// Threads are matched by tid: an SQPOLL thread has no `iou-` name yet
/// right after it is created, and every ring's SQPOLL thread has the same
/// name (`iou-sqp-<creator pid>`), so names alone cannot pair samples.
#[derive(Debug, Clone, Default)]
pub(crate) struct ThreadTimes(Vec<ThreadTime>);

#[derive(Debug, Clone, Copy)]
struct ThreadTime {
    tid: u32,
    io_thread: bool,
    cpu_ns: u64,
}

impl ThreadTimes {
    /// Sample /proc/self/task; `None` if /proc is unreadable.
    pub fn now() -> Option<Self> {
        let mut out = Vec::new();
        for entry in fs::read_dir("/proc/self/task").ok()? {
            let Ok(entry) = entry else { continue };
            let Some(tid) = entry.file_name().to_str().and_then(|t| t.parse().ok()) else {
                continue;
            };
            let dir = entry.path();
            let Ok(stat) = fs::read_to_string(dir.join("stat")) else {
                continue;
            };
            let Some((comm, utime, stime)) = parse_stat(&stat) else {
                continue;
            };
            // schedstat's first field is exact on-CPU time in ns; stat's
            // utime+stime are clock ticks, the fallback.
            let cpu_ns = fs::read_to_string(dir.join("schedstat"))
                .ok()
                .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
                .unwrap_or_else(|| ((utime + stime) as f64 * 1e9 / clock_ticks_per_sec()) as u64);
            out.push(ThreadTime {
                tid,
                io_thread: comm.starts_with("iou-"),
                cpu_ns,
            });
        }
        Some(ThreadTimes(out))
    }

    /// CPU time io_uring kernel threads used since `earlier`. Threads that
    /// exited in between are not counted.
    pub fn io_thread_ns_since(&self, earlier: &ThreadTimes) -> u64 {
        self.0
            .iter()
            .filter(|t| t.io_thread)
            .map(|t| {
                let before = earlier
                    .0
                    .iter()
                    .find(|e| e.tid == t.tid)
                    .map_or(0, |e| e.cpu_ns);
                t.cpu_ns.saturating_sub(before)
            })
            .sum()
    }
}

/// (comm, utime, stime) from a /proc stat line. comm may contain spaces
/// and parentheses, so the line is split at the last ')'.
fn parse_stat(stat: &str) -> Option<(&str, u64, u64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?;
    let rest: Vec<&str> = stat.get(close + 1..)?.split_whitespace().collect();
    // rest[0] is field 3 (state); utime is field 14, stime field 15.
    let utime = rest.get(11)?.parse().ok()?;
    let stime = rest.get(12)?.parse().ok()?;
    Some((comm, utime, stime))
}

/// Clock ticks per second for /proc times.
fn clock_ticks_per_sec() -> f64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_summary() {
        let mut h = LatencyHistogram::new();
        for us in 1..=1000u64 {
            record_latency(&mut h, Duration::from_micros(us));
        }
        let s = LatencySummary::of(&h);
        assert_eq!(s.min_us, 1.0);
        assert_eq!(s.mean_us, 500.5);
        assert_eq!(s.max_us, 1000.0);
        assert!((s.p50_us - 500.0).abs() < 0.5, "{s:?}");
        assert!((s.p99_us - 990.0).abs() < 1.0, "{s:?}");
        assert!(s.p999_us >= s.p99_us && s.max_us >= s.p999_us);
        let mut other = LatencyHistogram::new();
        record_latency(&mut other, Duration::from_millis(10));
        h.merge(&other);
        assert_eq!(h.count(), 1001);
        assert_eq!(
            LatencySummary::of(&LatencyHistogram::new()),
            LatencySummary::default()
        );
    }

    #[test]
    fn cpu_usage_of_a_spin() {
        let a = CpuSnapshot::now();
        let t = Instant::now();
        let mut x = 0u64;
        while t.elapsed() < Duration::from_millis(100) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let b = CpuSnapshot::now();
        let u = a.usage_until(&b);
        assert!(u.total_pct > 30.0, "{u:?}");
        let t = ThreadTimes::now().unwrap();
        assert_eq!(t.io_thread_ns_since(&t), 0);
    }

    #[test]
    fn stat_line_parsing() {
        let line = "123 (iou-sqp (x) 9) S 1 2 3 4 5 6 7 8 9 10 111 222 0 0";
        assert_eq!(parse_stat(line), Some(("iou-sqp (x) 9", 111, 222)));
        assert_eq!(parse_stat("garbage"), None);
    }
}
