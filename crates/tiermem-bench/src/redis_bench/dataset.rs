//! The dataset: keys in the format redis-benchmark generates, values
//! derived from the key, loaded with pipelined SETs and verified with
//! pipelined GETs.

use anyhow::bail;
use indicatif::ProgressBar;

use super::plan::Plan;
use super::resp::{encode, Conn, Reply};
use crate::page_data::PageData;

/// Keys per pipelined batch when loading and verifying.
const BATCH_KEYS: u64 = 200;
/// Upper bound on the bytes of values in one batch.
const BATCH_BYTES: u64 = 8 << 20;

/// The key redis-benchmark -r generates for `i`.
fn key(i: u64) -> String {
    format!("key:{i:012}")
}

/// The value of key `i`: its words are those of page `i` of `data`, so a
/// value holds what a page of `tiermem bench --data` holds.
fn fill_value(data: PageData, i: u64, buf: &mut [u8]) {
    for (index, chunk) in buf.chunks_mut(8).enumerate() {
        let word = data.word(i, index).to_le_bytes();
        chunk.copy_from_slice(&word[..chunk.len()]);
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
            fill_value(plan.data, i, &mut value);
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
                    fill_value(plan.data, i, &mut expected);
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
        for data in [PageData::Random, PageData::Text, PageData::Mixed] {
            let (mut a, mut b, mut c) = (vec![0u8; 4099], vec![0u8; 4099], vec![0u8; 4099]);
            fill_value(data, 7, &mut a);
            fill_value(data, 7, &mut b);
            fill_value(data, 8, &mut c);
            assert_eq!(a, b, "{data}");
            assert_ne!(a, c, "{data}");
            assert!(a.iter().any(|&x| x != 0), "{data}");
        }
    }

    #[test]
    fn values_hold_the_words_of_their_page() {
        let mut value = vec![0u8; 4096 + 5];
        fill_value(PageData::Text, 42, &mut value);
        for (index, chunk) in value.chunks(8).enumerate() {
            let word = PageData::Text.word(42, index).to_le_bytes();
            assert_eq!(chunk, &word[..chunk.len()], "word {index}");
        }
        assert!(
            value[..4096].iter().all(|b| b.is_ascii()),
            "text values are text"
        );
        let mut zero = vec![1u8; 100];
        fill_value(PageData::Zero, 3, &mut zero);
        assert!(zero.iter().all(|&b| b == 0));
    }
}
