//! The dataset: keys in the format redis-benchmark generates, values
//! derived from the key, loaded with pipelined SETs and verified with
//! pipelined GETs.

use anyhow::bail;
use indicatif::ProgressBar;

use super::plan::Plan;
use super::resp::{encode, Conn, Reply};

/// Keys per pipelined batch when loading and verifying.
const BATCH_KEYS: u64 = 200;
/// Upper bound on the bytes of values in one batch.
const BATCH_BYTES: u64 = 8 << 20;

/// The key redis-benchmark -r generates for `i`.
fn key(i: u64) -> String {
    format!("key:{i:012}")
}

/// The value of key `i`: xorshift64 seeded from `i`.
fn fill_value(i: u64, buf: &mut [u8]) {
    // splitmix64 of i gives a well-mixed, non-zero xorshift state.
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    let mut x = (z ^ (z >> 31)) | 1;
    for chunk in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
}

fn batch_keys(value_size: u64) -> u64 {
    (BATCH_BYTES / value_size).clamp(1, BATCH_KEYS)
}

pub(super) fn load(conn: &mut Conn, plan: &Plan, bar: &ProgressBar) -> anyhow::Result<()> {
    let vs = plan.value_size as usize;
    let batch = batch_keys(plan.value_size);
    let mut value = vec![0u8; vs];
    let mut out = Vec::with_capacity(batch as usize * (vs + 64));
    let mut first = 0;
    while first < plan.keys {
        let last = (first + batch).min(plan.keys);
        out.clear();
        for i in first..last {
            fill_value(i, &mut value);
            encode(&mut out, &[b"SET", key(i).as_bytes(), &value]);
        }
        conn.send(&out)?;
        for i in first..last {
            match conn.reply()? {
                Reply::Simple(s) if s == "OK" => {}
                other => bail!("SET {} answered {other}", key(i)),
            }
        }
        bar.set_position(last);
        first = last;
    }
    Ok(())
}

/// Returns (missing keys, keys with a wrong value).
pub(super) fn verify(
    conn: &mut Conn,
    plan: &Plan,
    bar: &ProgressBar,
) -> anyhow::Result<(u64, u64)> {
    let batch = batch_keys(plan.value_size);
    let mut expected = vec![0u8; plan.value_size as usize];
    let mut out = Vec::new();
    let (mut lost, mut corrupt) = (0, 0);
    let mut first = 0;
    while first < plan.keys {
        let last = (first + batch).min(plan.keys);
        out.clear();
        for i in first..last {
            encode(&mut out, &[b"GET", key(i).as_bytes()]);
        }
        conn.send(&out)?;
        for i in first..last {
            match conn.reply()? {
                Reply::Bulk(None) => lost += 1,
                Reply::Bulk(Some(v)) => {
                    fill_value(i, &mut expected);
                    if v != expected {
                        corrupt += 1;
                    }
                }
                other => bail!("GET {} answered {other}", key(i)),
            }
        }
        bar.set_position(last);
        first = last;
    }
    Ok((lost, corrupt))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_match_redis_benchmark_format() {
        assert_eq!(key(0), "key:000000000000");
        assert_eq!(key(12345), "key:000000012345");
    }

    #[test]
    fn values_are_deterministic_and_distinct() {
        let (mut a, mut b, mut c) = (vec![0u8; 4099], vec![0u8; 4099], vec![0u8; 4099]);
        fill_value(7, &mut a);
        fill_value(7, &mut b);
        fill_value(8, &mut c);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(a.iter().any(|&x| x != 0));
    }
}
