//! Which page each timed access touches.
//!
//! A paging benchmark is only as meaningful as its access pattern: uniform
//! access defeats every eviction policy, while skewed patterns (zipf,
//! pareto, normal) give hot pages a policy can keep resident. Every sampler
//! is deterministic for a given seed and thread, so all modes (dram,
//! tiermem, kernel-swap) replay exactly the same page sequence.

use std::fmt;
use std::str::FromStr;

use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};

mod rng;
mod scramble;
mod zipf;

pub use scramble::PageScrambler;

use rng::Xoshiro256PlusPlus;
use zipf::ZipfRanks;

/// Default zipf exponent: YCSB's "zipfian" constant.
pub const DEFAULT_ZIPF_THETA: f64 = 0.99;
/// Default normal spread: one eighth of the working set.
pub const DEFAULT_NORMAL_SIGMA_FRAC: f64 = 0.125;
/// Default pareto shape: log4(5) ≈ 1.16, the index of the 80/20 rule.
pub const DEFAULT_PARETO_SHAPE: f64 = 1.16;
/// Largest accepted zipf exponent; beyond it virtually every access hits one page.
const MAX_ZIPF_THETA: f64 = 10.0;

const ACCEPTED_FORMS: &str = "uniform, zipf, zipf:<theta in (0, 10]>, sequential (or seq), \
     normal, normal:<sigma as a fraction of the set, > 0>, pareto, pareto:<shape > 1>";

/// An access pattern over the pages of the working set.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pattern {
    /// Every page equally likely: the worst case for any cache.
    Uniform,
    /// Page popularity follows rank^-theta, hot pages scattered over the set.
    Zipf { theta: f64 },
    /// Each thread sweeps the set linearly from its own starting offset.
    Sequential,
    /// A hot region in the middle of the set, sigma = `sigma_frac` × pages.
    Normal { sigma_frac: f64 },
    /// Pareto-distributed popularity, hottest pages at the start of the set.
    Pareto { shape: f64 },
}

/// A pattern string or parameter that was not understood.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PatternError(String);

impl Pattern {
    /// Checks the parameter ranges, so a `Pattern` built in code gets the
    /// same guarantees as one parsed from the command line.
    pub fn validate(&self) -> Result<(), PatternError> {
        match *self {
            Pattern::Uniform | Pattern::Sequential => Ok(()),
            Pattern::Zipf { theta } if theta > 0.0 && theta <= MAX_ZIPF_THETA => Ok(()),
            Pattern::Zipf { theta } => Err(PatternError(format!(
                "zipf theta must be in (0, {MAX_ZIPF_THETA}], got {theta}"
            ))),
            Pattern::Normal { sigma_frac } if sigma_frac > 0.0 && sigma_frac.is_finite() => Ok(()),
            Pattern::Normal { sigma_frac } => Err(PatternError(format!(
                "normal sigma fraction must be a finite number > 0, got {sigma_frac}"
            ))),
            Pattern::Pareto { shape } if shape > 1.0 && shape.is_finite() => Ok(()),
            Pattern::Pareto { shape } => Err(PatternError(format!(
                "pareto shape must be a finite number > 1, got {shape} (at or below 1 the \
                 distribution has no finite mean and every access would go to one page)"
            ))),
        }
    }
}

impl FromStr for Pattern {
    type Err = PatternError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (name, parameter) = match text.trim().split_once(':') {
            Some((name, parameter)) => (name, Some(parameter)),
            None => (text.trim(), None),
        };
        let pattern = match (name.to_ascii_lowercase().as_str(), parameter) {
            ("uniform", None) => Pattern::Uniform,
            ("sequential" | "seq", None) => Pattern::Sequential,
            ("zipf", None) => Pattern::Zipf {
                theta: DEFAULT_ZIPF_THETA,
            },
            ("zipf", Some(value)) => Pattern::Zipf {
                theta: parse_parameter(text, value)?,
            },
            ("normal", None) => Pattern::Normal {
                sigma_frac: DEFAULT_NORMAL_SIGMA_FRAC,
            },
            ("normal", Some(value)) => Pattern::Normal {
                sigma_frac: parse_parameter(text, value)?,
            },
            ("pareto", None) => Pattern::Pareto {
                shape: DEFAULT_PARETO_SHAPE,
            },
            ("pareto", Some(value)) => Pattern::Pareto {
                shape: parse_parameter(text, value)?,
            },
            _ => return Err(unknown_pattern(text)),
        };
        pattern
            .validate()
            .map_err(|error| PatternError(format!("invalid access pattern '{text}': {error}")))?;
        Ok(pattern)
    }
}

fn parse_parameter(text: &str, value: &str) -> Result<f64, PatternError> {
    value.trim().parse::<f64>().map_err(|_| {
        PatternError(format!(
            "invalid access pattern '{text}': '{value}' is not a number; accepted forms: \
             {ACCEPTED_FORMS}"
        ))
    })
}

fn unknown_pattern(text: &str) -> PatternError {
    PatternError(format!(
        "unknown access pattern '{text}'; accepted forms: {ACCEPTED_FORMS}"
    ))
}

/// Prints the canonical form, which `FromStr` parses back to the same value.
impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pattern::Uniform => write!(f, "uniform"),
            Pattern::Zipf { theta } => write!(f, "zipf:{theta}"),
            Pattern::Sequential => write!(f, "sequential"),
            Pattern::Normal { sigma_frac } => write!(f, "normal:{sigma_frac}"),
            Pattern::Pareto { shape } => write!(f, "pareto:{shape}"),
        }
    }
}

/// Produces the page index of each access for one worker thread.
///
/// Owns its random number generator (seeded from the run seed and the
/// thread number), so threads never share state and every mode sees the
/// same sequence.
#[derive(Clone, Debug)]
pub struct PageSampler {
    rng: Xoshiro256PlusPlus,
    n_pages: u64,
    kind: SamplerKind,
}

#[derive(Clone, Debug)]
enum SamplerKind {
    Uniform,
    Zipf {
        ranks: ZipfRanks,
        scrambler: PageScrambler,
    },
    Sequential {
        next: u64,
    },
    Normal {
        center: f64,
        sigma: f64,
    },
    Pareto {
        exponent: f64,
    },
}

impl PageSampler {
    /// A sampler for thread `thread` of `threads`, drawing pages in
    /// `[0, n_pages)`.
    ///
    /// # Panics
    /// If `n_pages` is 0 or `pattern` fails [`Pattern::validate`] (patterns
    /// from `FromStr` always pass). Use [`Self::try_new`] to get an error.
    pub fn new(pattern: &Pattern, n_pages: u64, seed: u64, thread: usize, threads: usize) -> Self {
        match Self::try_new(pattern, n_pages, seed, thread, threads) {
            Ok(sampler) => sampler,
            Err(error) => panic!("PageSampler::new: {error}"),
        }
    }

    /// Like [`Self::new`], but reports bad arguments as an error.
    pub fn try_new(
        pattern: &Pattern,
        n_pages: u64,
        seed: u64,
        thread: usize,
        threads: usize,
    ) -> Result<Self, PatternError> {
        if n_pages == 0 {
            return Err(PatternError(
                "the working set must have at least one page".into(),
            ));
        }
        pattern.validate()?;
        let kind = match *pattern {
            Pattern::Uniform => SamplerKind::Uniform,
            Pattern::Zipf { theta } => SamplerKind::Zipf {
                ranks: ZipfRanks::new(n_pages, theta),
                scrambler: PageScrambler::new(n_pages),
            },
            Pattern::Sequential => SamplerKind::Sequential {
                next: sequential_start(n_pages, thread, threads),
            },
            Pattern::Normal { sigma_frac } => SamplerKind::Normal {
                center: n_pages as f64 / 2.0,
                sigma: sigma_frac * n_pages as f64,
            },
            Pattern::Pareto { shape } => SamplerKind::Pareto {
                exponent: shape / (shape - 1.0),
            },
        };
        Ok(PageSampler {
            rng: Xoshiro256PlusPlus::for_thread(seed, thread),
            n_pages,
            kind,
        })
    }

    /// The page index of the next access, in `[0, n_pages)`.
    #[inline]
    pub fn next_page(&mut self) -> u64 {
        let n_pages = self.n_pages;
        match &mut self.kind {
            SamplerKind::Uniform => self.rng.below(n_pages),
            SamplerKind::Zipf { ranks, scrambler } => {
                let rank = ranks.sample(&mut self.rng);
                scrambler.scramble(rank - 1)
            }
            SamplerKind::Sequential { next } => {
                let page = *next;
                *next = if page + 1 == n_pages { 0 } else { page + 1 };
                page
            }
            SamplerKind::Normal { center, sigma } => {
                let offset: f64 = StandardNormal.sample(&mut self.rng);
                reflect_into_range(*center + *sigma * offset, n_pages)
            }
            SamplerKind::Pareto { exponent } => {
                // Hot end at page 0: see `pareto_page`.
                pareto_page(self.rng.unit_f64(), *exponent, n_pages)
            }
        }
    }

    /// Whether the next access is a read (`true`) or a write, with
    /// `read_ratio_percent` percent reads (100 or more: reads only).
    #[inline]
    pub fn read_or_write(&mut self, read_ratio_percent: u32) -> bool {
        self.rng.below(100) < u64::from(read_ratio_percent)
    }
}

/// Thread `t` of `threads` starts sweeping at `t × n_pages / threads`, so
/// sequential threads cover disjoint stretches instead of racing each other
/// over the same pages.
fn sequential_start(n_pages: u64, thread: usize, threads: usize) -> u64 {
    let threads = threads.max(1) as u128;
    let thread = thread as u128 % threads;
    (thread * n_pages as u128 / threads) as u64
}

/// Maps a real-valued position into `[0, n_pages)` by mirroring it at both
/// ends, like a random walk between walls. Unlike clamping this does not pile
/// the out-of-range tail onto the first and last page, which would create two
/// artificial hot pages.
fn reflect_into_range(position: f64, n_pages: u64) -> u64 {
    let span = n_pages as f64;
    let folded = position.rem_euclid(2.0 * span);
    let mirrored = if folded >= span {
        2.0 * span - folded
    } else {
        folded
    };
    // `as` saturates NaN to 0; `min` guards float rounding at the top edge.
    (mirrored as u64).min(n_pages - 1)
}

/// Pareto-distributed popularity mapped onto page positions.
///
/// If page popularities are Pareto(α) and pages are ordered hottest first,
/// the hottest fraction `f` of pages receives the share `f^(1 - 1/α)` of
/// all accesses (the Pareto Lorenz curve). Inverting that CDF gives
/// `page = n × u^(α / (α - 1))` for uniform `u`. With α = 1.16 the hottest
/// 20% of pages receive 80% of accesses, at any working-set size. This is
/// Gray et al.'s "self-similar" distribution with h = 0.2. `exponent` is
/// `α / (α - 1)`, which is why α must exceed 1.
fn pareto_page(uniform: f64, exponent: f64, n_pages: u64) -> u64 {
    let fraction = uniform.powf(exponent);
    ((fraction * n_pages as f64) as u64).min(n_pages - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL_PATTERNS: [&str; 5] = ["uniform", "zipf", "sequential", "normal", "pareto"];

    fn sampler(text: &str, n_pages: u64) -> PageSampler {
        let pattern: Pattern = text.parse().unwrap();
        PageSampler::new(&pattern, n_pages, 42, 0, 1)
    }

    fn histogram_of_pages(sampler: &mut PageSampler, n_pages: u64, samples: usize) -> Vec<u64> {
        let mut counts = vec![0u64; n_pages as usize];
        for _ in 0..samples {
            counts[sampler.next_page() as usize] += 1;
        }
        counts
    }

    fn zeta(n: u64, theta: f64) -> f64 {
        (1..=n).map(|rank| (rank as f64).powf(-theta)).sum()
    }

    #[test]
    fn outputs_stay_in_range() {
        for text in ALL_PATTERNS
            .iter()
            .chain(&["zipf:3", "normal:5", "pareto:50"])
        {
            for n_pages in [1, 2, 3, 7, 1000, 1 << 20, (1 << 40) + 3, u64::MAX] {
                let mut sampler = sampler(text, n_pages);
                for _ in 0..2000 {
                    let page = sampler.next_page();
                    assert!(page < n_pages, "{text}: page {page} >= {n_pages}");
                }
            }
        }
    }

    #[test]
    fn zipf_rank_frequencies_match_the_distribution() {
        let samples = 400_000;
        // Table length 3 also exercises the untabled path for ranks 4..=20.
        for (theta, table_len) in [
            (0.5, 3),
            (0.99, 1024),
            (0.99, 3),
            (1.0, 3),
            (1.5, 1024),
            (4.0, 3),
        ] {
            let n = 20;
            let ranks = ZipfRanks::with_table_len(n, theta, table_len);
            let mut rng = Xoshiro256PlusPlus::for_thread(7, 0);
            let mut counts = vec![0u64; n as usize + 1];
            for _ in 0..samples {
                counts[ranks.sample(&mut rng) as usize] += 1;
            }
            let normalizer = zeta(n, theta);
            for rank in 1..=n {
                let expected = (rank as f64).powf(-theta) / normalizer;
                let observed = counts[rank as usize] as f64 / samples as f64;
                let sigma = (expected * (1.0 - expected) / samples as f64).sqrt();
                assert!(
                    (observed - expected).abs() <= 5.0 * sigma + 1e-6,
                    "theta {theta} table {table_len} rank {rank}: observed {observed}, \
                     expected {expected}"
                );
            }
        }
    }

    #[test]
    fn zipf_hottest_page_frequency_is_one_over_zeta() {
        let n_pages = 100_000;
        let theta = 0.99;
        let samples = 1_000_000;
        let mut sampler = sampler("zipf:0.99", n_pages);
        let hottest = PageScrambler::new(n_pages).scramble(0);
        let hits = (0..samples)
            .filter(|_| sampler.next_page() == hottest)
            .count();
        let expected = 1.0 / zeta(n_pages, theta);
        let observed = hits as f64 / samples as f64;
        assert!(
            (observed - expected).abs() < 0.05 * expected,
            "observed {observed}, expected {expected}"
        );
    }

    #[test]
    fn zipf_hot_pages_are_scattered() {
        let n_pages = 1 << 20;
        let scrambler = PageScrambler::new(n_pages);
        let hot: Vec<u64> = (0..64).map(|rank| scrambler.scramble(rank)).collect();
        let in_first_64 = hot.iter().filter(|&&page| page < 64).count();
        assert!(in_first_64 < 4, "hot pages not scattered: {hot:?}");
    }

    #[test]
    fn sequential_threads_start_at_their_offsets_and_wrap() {
        let pattern = Pattern::Sequential;
        let n_pages = 1000;
        for thread in 0..4 {
            let mut sampler = PageSampler::new(&pattern, n_pages, 1, thread, 4);
            let start = thread as u64 * 250;
            assert_eq!(sampler.next_page(), start);
            assert_eq!(sampler.next_page(), start + 1);
        }
        let mut last = PageSampler::new(&pattern, 10, 1, 2, 3);
        let pages: Vec<u64> = (0..6).map(|_| last.next_page()).collect();
        assert_eq!(pages, [6, 7, 8, 9, 0, 1]);
        let mut single = PageSampler::new(&pattern, 1, 1, 0, 1);
        assert_eq!((single.next_page(), single.next_page()), (0, 0));
    }

    #[test]
    fn uniform_covers_all_pages_evenly() {
        let n_pages = 10;
        let counts = histogram_of_pages(&mut sampler("uniform", n_pages), n_pages, 100_000);
        assert!(
            counts.iter().all(|&count| (9_000..11_000).contains(&count)),
            "{counts:?}"
        );
    }

    #[test]
    fn normal_concentrates_around_the_middle() {
        let n_pages = 1000;
        let counts = histogram_of_pages(&mut sampler("normal:0.05", n_pages), n_pages, 100_000);
        let within_one_sigma: u64 = counts[450..550].iter().sum();
        // 68% of a normal lies within one sigma.
        assert!(
            (66_000..70_000).contains(&within_one_sigma),
            "{within_one_sigma}"
        );
    }

    #[test]
    fn pareto_default_is_eighty_twenty() {
        let n_pages = 10_000;
        let counts = histogram_of_pages(&mut sampler("pareto", n_pages), n_pages, 200_000);
        let hottest_fifth: u64 = counts[..2_000].iter().sum();
        let share = hottest_fifth as f64 / 200_000.0;
        assert!((0.78..0.82).contains(&share), "share {share}");
        assert!(counts[0] > counts[5_000]);
    }

    #[test]
    fn read_ratio_is_respected() {
        let mut sampler = sampler("uniform", 10);
        let reads = (0..100_000).filter(|_| sampler.read_or_write(70)).count();
        assert!((69_000..71_000).contains(&reads), "{reads}");
        assert!((0..1000).all(|_| sampler.read_or_write(100)));
        assert!((0..1000).all(|_| !sampler.read_or_write(0)));
    }

    #[test]
    fn threads_and_seeds_give_different_streams() {
        let pattern = Pattern::Uniform;
        let stream = |seed, thread| {
            let mut sampler = PageSampler::new(&pattern, 1 << 30, seed, thread, 4);
            (0..8).map(|_| sampler.next_page()).collect::<Vec<_>>()
        };
        assert_eq!(stream(1, 0), stream(1, 0));
        assert_ne!(stream(1, 0), stream(1, 1));
        assert_ne!(stream(1, 0), stream(2, 0));
    }

    #[test]
    fn parse_and_display_round_trip() {
        let cases = [
            ("uniform", "uniform"),
            ("zipf", "zipf:0.99"),
            ("zipf:0.8", "zipf:0.8"),
            ("seq", "sequential"),
            ("sequential", "sequential"),
            ("normal", "normal:0.125"),
            ("normal:0.05", "normal:0.05"),
            ("pareto", "pareto:1.16"),
            ("pareto:2.0", "pareto:2"),
            (" Zipf:10 ", "zipf:10"),
        ];
        for (input, canonical) in cases {
            let pattern: Pattern = input.parse().unwrap();
            assert_eq!(pattern.to_string(), canonical, "{input}");
            assert_eq!(canonical.parse::<Pattern>().unwrap(), pattern);
        }
    }

    #[test]
    fn bad_patterns_are_rejected_helpfully() {
        let bad = [
            "",
            "random",
            "zipf:",
            "zipf:abc",
            "zipf:0",
            "zipf:-1",
            "zipf:11",
            "zipf:NaN",
            "normal:0",
            "normal:inf",
            "pareto:1",
            "pareto:0.5",
            "uniform:3",
            "seq:1",
        ];
        for text in bad {
            let error = text.parse::<Pattern>().unwrap_err().to_string();
            assert!(error.contains(&format!("'{text}'")), "{text}: {error}");
        }
        let error = "random".parse::<Pattern>().unwrap_err().to_string();
        for form in ALL_PATTERNS {
            assert!(error.contains(form), "{error}");
        }
    }

    #[test]
    fn bad_sampler_arguments_are_errors() {
        assert!(PageSampler::try_new(&Pattern::Uniform, 0, 1, 0, 1).is_err());
        let bad = Pattern::Zipf { theta: -1.0 };
        assert!(PageSampler::try_new(&bad, 10, 1, 0, 1).is_err());
    }

    /// Prints the per-sample cost (run with `--nocapture`); asserts nothing
    /// about time so it cannot be flaky.
    #[test]
    fn sampling_cost_report() {
        for text in ALL_PATTERNS {
            let mut sampler = sampler(text, 1 << 24);
            let samples = 200_000;
            let start = std::time::Instant::now();
            let checksum = (0..samples).fold(0u64, |sum, _| sum ^ sampler.next_page());
            let per_sample = start.elapsed().as_nanos() as f64 / samples as f64;
            println!("{text}: {per_sample:.1} ns/sample (checksum {checksum})");
        }
    }
}
