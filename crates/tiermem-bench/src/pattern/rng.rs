//! The fixed pseudo-random number generator every sampler draws from.

use rand::RngCore;

use super::scramble::mix64;

/// xoshiro256++, the generator behind `rand`'s `SmallRng` on 64-bit
/// targets: a few ns per number, good statistical quality.
///
/// Implemented here rather than taken from `SmallRng` because `SmallRng`'s
/// algorithm and seeding may change between `rand` releases; a fixed
/// generator keeps a given seed's page sequence the same across builds, so
/// runs from different tiermem versions remain comparable.
#[derive(Clone, Debug)]
pub(super) struct Xoshiro256PlusPlus {
    state: [u64; 4],
}

impl Xoshiro256PlusPlus {
    /// Seeds from `seed` and `thread` via SplitMix64, so nearby seeds and
    /// thread numbers still give unrelated streams.
    pub(super) fn for_thread(seed: u64, thread: usize) -> Self {
        let mut splitmix = seed ^ mix64((thread as u64).wrapping_add(1));
        let mut next_seed_word = || {
            splitmix = splitmix.wrapping_add(0x9E37_79B9_7F4A_7C15);
            mix64(splitmix)
        };
        Xoshiro256PlusPlus {
            state: [
                next_seed_word(),
                next_seed_word(),
                next_seed_word(),
                next_seed_word(),
            ],
        }
    }

    #[inline]
    fn next(&mut self) -> u64 {
        let s = &mut self.state;
        let result = s[0].wrapping_add(s[3]).rotate_left(23).wrapping_add(s[0]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in `[0, bound)` without bias, by Lemire's multiply-and-reject
    /// (one multiplication; the division only runs in the rare reject case).
    #[inline]
    pub(super) fn below(&mut self, bound: u64) -> u64 {
        let mut product = u128::from(self.next()) * u128::from(bound);
        if (product as u64) < bound {
            let threshold = bound.wrapping_neg() % bound;
            while (product as u64) < threshold {
                product = u128::from(self.next()) * u128::from(bound);
            }
        }
        (product >> 64) as u64
    }

    /// Uniform in `[0, 1)` with 53 random bits.
    #[inline]
    pub(super) fn unit_f64(&mut self) -> f64 {
        (self.next() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// Lets `rand_distr` distributions (the normal) draw from this generator.
impl RngCore for Xoshiro256PlusPlus {
    fn next_u32(&mut self) -> u32 {
        (self.next() >> 32) as u32
    }

    fn next_u64(&mut self) -> u64 {
        self.next()
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for chunk in dest.chunks_mut(8) {
            let bytes = self.next().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}
