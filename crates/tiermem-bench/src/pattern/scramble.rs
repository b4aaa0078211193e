//! A fixed pseudo-random permutation of the pages, scattering zipf's hot ranks.

/// A fixed pseudo-random bijection of `[0, n)`, used to scatter zipf's hot
/// ranks over the working set.
///
/// Without it the hottest pages would be contiguous, so a handful of huge
/// pages or one readahead window would hold the whole hot set and the
/// benchmark would measure prefetching, not page replacement. The keys are
/// constants, so every mode and thread maps rank r to the same page.
///
/// Built as a 4-round Feistel network over the smallest power of two
/// `>= n` (each round is invertible, so the network is a permutation), with
/// cycle walking to stay inside `[0, n)`: out-of-range outputs are permuted
/// again until they land in range, which restricts the permutation to
/// `[0, n)` while keeping it a bijection. The domain is under twice `n`, so
/// that takes fewer than two rounds of the network on average.
#[derive(Clone, Debug)]
pub struct PageScrambler {
    n: u64,
    high_bits: u32,
    low_bits: u32,
}

/// Round keys: arbitrary fixed constants (hex digits of pi).
const FEISTEL_KEYS: [u64; 4] = [
    0x243F_6A88_85A3_08D3,
    0x1319_8A2E_0370_7344,
    0xA409_3822_299F_31D0,
    0x082E_FA98_EC4E_6C89,
];

impl PageScrambler {
    pub fn new(n: u64) -> Self {
        let domain_bits = u64::BITS - n.saturating_sub(1).leading_zeros();
        let high_bits = domain_bits / 2;
        PageScrambler {
            n,
            high_bits,
            low_bits: domain_bits - high_bits,
        }
    }

    /// The page that `index` (in `[0, n)`) is mapped to.
    #[inline]
    pub fn scramble(&self, index: u64) -> u64 {
        let mut value = self.permute_domain(index);
        while value >= self.n {
            value = self.permute_domain(value);
        }
        value
    }

    /// One pass of the Feistel network over `[0, 2^(high_bits + low_bits))`.
    /// The halves may differ by one bit; each round swaps their roles, and
    /// with an even number of rounds they end where they started.
    fn permute_domain(&self, value: u64) -> u64 {
        let (mut high_bits, mut low_bits) = (self.high_bits, self.low_bits);
        let mut high = value >> low_bits;
        let mut low = value & low_mask(low_bits);
        for key in FEISTEL_KEYS {
            let new_low = high ^ (mix64(low ^ key) & low_mask(high_bits));
            high = low;
            low = new_low;
            std::mem::swap(&mut high_bits, &mut low_bits);
        }
        (high << low_bits) | low
    }
}

/// The lowest `bits` bits set (`bits` is at most 32 here).
fn low_mask(bits: u32) -> u64 {
    (1u64 << bits) - 1
}

/// SplitMix64's finalizer: a cheap, well-mixing 64-bit hash.
pub(super) fn mix64(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrambling_is_a_bijection() {
        for n in [
            1, 2, 3, 5, 7, 8, 16, 17, 100, 1000, 1023, 1024, 4097, 65_537, 300_001,
        ] {
            let scrambler = PageScrambler::new(n);
            let mut seen = vec![false; n as usize];
            for index in 0..n {
                let page = scrambler.scramble(index);
                assert!(page < n, "n={n}: {index} -> {page}");
                assert!(!seen[page as usize], "n={n}: page {page} hit twice");
                seen[page as usize] = true;
            }
        }
    }

    #[test]
    fn scrambling_is_identical_across_instances() {
        let a = PageScrambler::new(12_345);
        let b = PageScrambler::new(12_345);
        assert!((0..12_345).all(|index| a.scramble(index) == b.scramble(index)));
    }
}
