//! redis-benchmark: run against a server for GET and SET, and its CSV
//! output read into one row per test.

use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};

use super::plan::Plan;
use super::process::{describe, die_with_parent, tail, wait_timeout, Log};
use super::report::BenchRow;

/// How long one redis-benchmark run may take before it is killed.
const BENCHMARK_TIMEOUT: Duration = Duration::from_secs(4 * 3600);

/// Runs redis-benchmark and returns its (GET, SET) rows.
pub(super) fn benchmark(plan: &Plan, port: u16) -> anyhow::Result<(BenchRow, BenchRow)> {
    let tmp = std::env::temp_dir();
    let out = Log::create(&tmp, "redis-benchmark-csv")?;
    let err = Log::create(&tmp, "redis-benchmark-err")?;
    let mut cmd = Command::new(&plan.redis_benchmark);
    cmd.args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-c", &plan.clients.to_string()])
        .args(["-n", &plan.requests.to_string()])
        .args(["-d", &plan.value_size.to_string()])
        .args(["-r", &plan.keys.to_string()])
        .args(["-t", "get,set", "--csv"])
        .stdin(Stdio::null())
        .stdout(out.stdio()?)
        .stderr(err.stdio()?);
    die_with_parent(&mut cmd);
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {}", plan.redis_benchmark.display()))?;
    let status = match wait_timeout(&mut child, BENCHMARK_TIMEOUT)? {
        Some(s) => s,
        None => {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "redis-benchmark did not finish in {} s and was killed",
                BENCHMARK_TIMEOUT.as_secs()
            );
        }
    };
    let csv = out.read();
    let err = err.read();
    if !status.success() {
        bail!(
            "redis-benchmark failed ({}); its output ends with:\n{}{}",
            describe(status),
            tail(&csv, 1000),
            tail(&err, 1000)
        );
    }
    parse_csv(&csv).with_context(|| {
        format!(
            "reading redis-benchmark's CSV output:\n{}{}",
            tail(&csv, 1000),
            tail(&err, 1000)
        )
    })
}

fn parse_csv(csv: &str) -> anyhow::Result<(BenchRow, BenchRow)> {
    let fields = |line: &str| -> Vec<String> {
        line.split(',')
            .map(|f| f.trim().trim_matches('"').to_string())
            .collect()
    };
    let mut lines = csv.lines().filter(|l| !l.trim().is_empty());
    let header = fields(lines.next().context("no output")?);
    let col = |name: &str| header.iter().position(|h| h == name);
    let test_col = col("test").context("no \"test\" column")?;
    let rps_col = col("rps").context("no \"rps\" column")?;
    let (mut get, mut set) = (None, None);
    for line in lines {
        let f = fields(line);
        let num = |c: Option<usize>| c.and_then(|c| f.get(c)).and_then(|v| v.parse::<f64>().ok());
        let Some(rps) = num(Some(rps_col)) else {
            continue;
        };
        let row = BenchRow {
            rps,
            avg_latency_ms: num(col("avg_latency_ms")),
            p50_latency_ms: num(col("p50_latency_ms")),
            p99_latency_ms: num(col("p99_latency_ms")),
            max_latency_ms: num(col("max_latency_ms")),
        };
        match f.get(test_col).map(String::as_str) {
            Some("GET") => get = Some(row),
            Some("SET") => set = Some(row),
            _ => {}
        }
    }
    Ok((get.context("no GET result")?, set.context("no SET result")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_redis_benchmark_csv() {
        let csv = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n\
                   \"SET\",\"35714.29\",\"0.079\",\"0.024\",\"0.063\",\"0.167\",\"0.247\",\"2.543\"\n\
                   \"GET\",\"34482.76\",\"0.082\",\"0.016\",\"0.079\",\"0.127\",\"0.183\",\"3.911\"\n";
        let (get, set) = parse_csv(csv).unwrap();
        assert_eq!(get.rps, 34482.76);
        assert_eq!(set.rps, 35714.29);
        assert_eq!(get.p99_latency_ms, Some(0.183));
        assert!(parse_csv("\"test\",\"rps\"\n\"SET\",\"1\"\n").is_err());
    }
}
