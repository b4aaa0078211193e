//! The working set as stamped pages. Every page carries a stamp: its
//! identity in its first and last words and a version that writes bump
//! with an atomic max, so concurrent writers agree on the final value. The
//! words between hold the chosen contents (`--data`, see `page_data`). At
//! the end every word of every page is verified.

use std::sync::atomic::{AtomicU64, Ordering};

use super::events::{emit, WorkerEvent};
use super::sets::WorkingSet;
use crate::page_data::PageData;
use crate::result::VerifyReport;

const STAMP_MAGIC: u64 = 0x706d_6265_6e63_6800;

fn tag(page: u64) -> u64 {
    STAMP_MAGIC ^ page.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// The bytes of `page` of `page_size` as `Pages::stamp` leaves it: what a
/// pager receives when the page leaves DRAM after its first touch.
pub(crate) fn stamped_image(data: PageData, page: u64, page_size: usize) -> Vec<u8> {
    let last = page_size / 8 - 1;
    (0..=last)
        .map(|i| match i {
            0 => tag(page),
            1 => 1,
            i if i == last => tag(page),
            i => data.word(page, i),
        })
        .flat_map(u64::to_le_bytes)
        .collect()
}

/// The working set as stamped pages.
pub(crate) struct Pages {
    base: *mut u8,
    page_size: usize,
    count: u64,
    data: PageData,
    expected: Vec<AtomicU64>,
}

// SAFETY: all access to the working set is through atomics on words that
// belong to it; the raw base pointer is only offset within it.
unsafe impl Sync for Pages {}

impl Pages {
    /// The `count` pages of `page_size` bytes at `set.base()`, not stamped
    /// yet, to be filled with `data`.
    pub(crate) fn new(set: &dyn WorkingSet, page_size: usize, count: u64, data: PageData) -> Pages {
        Pages {
            base: set.base(),
            page_size,
            count,
            data,
            expected: (0..count).map(|_| AtomicU64::new(1)).collect(),
        }
    }

    /// Pages in the working set.
    pub(crate) fn count(&self) -> u64 {
        self.count
    }

    #[inline]
    fn word(&self, page: u64, index: usize) -> &AtomicU64 {
        debug_assert!(page < self.count && index < self.page_size / 8);
        // SAFETY: `page < count` and `index` is inside the page, so the word
        // lies inside the working set, 8-byte aligned.
        unsafe { &*(self.base.add(page as usize * self.page_size + index * 8) as *const AtomicU64) }
    }

    fn last_word(&self) -> usize {
        self.page_size / 8 - 1
    }

    /// Writes the page's stamp and its contents: its first touch.
    pub(crate) fn stamp(&self, page: u64) {
        self.word(page, 0).store(tag(page), Ordering::Relaxed);
        self.word(page, 1).store(1, Ordering::Relaxed);
        if self.data != PageData::Zero {
            for i in 2..self.last_word() {
                self.word(page, i)
                    .store(self.data.word(page, i), Ordering::Relaxed);
            }
        }
        self.word(page, self.last_word())
            .store(tag(page), Ordering::Relaxed);
    }

    /// Whether every word between the stamp words holds its contents.
    fn contents_intact(&self, page: u64) -> bool {
        (2..self.last_word())
            .all(|i| self.word(page, i).load(Ordering::Relaxed) == self.data.word(page, i))
    }

    #[inline]
    pub(crate) fn access(&self, page: u64, read: bool) {
        if read {
            std::hint::black_box(self.word(page, 1).load(Ordering::Relaxed));
        } else {
            let v = self.expected[page as usize].fetch_add(1, Ordering::Relaxed) + 1;
            self.word(page, 1).fetch_max(v, Ordering::Relaxed);
        }
    }

    pub(crate) fn verify(&self) -> VerifyReport {
        let mut r = VerifyReport {
            pages_checked: self.count,
            ..Default::default()
        };
        for p in 0..self.count {
            let head = self.word(p, 0).load(Ordering::Relaxed);
            let tail = self.word(p, self.last_word()).load(Ordering::Relaxed);
            let version = self.word(p, 1).load(Ordering::Relaxed);
            let bad = if head != tag(p) || tail != tag(p) {
                r.lost += 1;
                true
            } else if version != self.expected[p as usize].load(Ordering::Relaxed)
                || !self.contents_intact(p)
            {
                r.corrupted += 1;
                true
            } else {
                false
            };
            if bad && r.first_bad_page.is_none() {
                r.first_bad_page = Some(p);
            }
        }
        r
    }
}

/// Stamps `range` of the pages in order, with progress events.
pub(crate) fn stamp_pages(pages: &Pages, range: std::ops::Range<u64>) {
    let total = range.end - range.start;
    let step = (total / 100).max(1);
    for (stamped, page) in (0u64..).zip(range) {
        pages.stamp(page);
        if stamped.is_multiple_of(step) {
            emit(&WorkerEvent::Progress {
                phase: "stamp".into(),
                done: stamped as f64 / total as f64,
            });
        }
    }
}

pub(crate) fn verify_with_progress(pages: &Pages) -> VerifyReport {
    emit(&WorkerEvent::Progress {
        phase: "verify".into(),
        done: 0.0,
    });
    pages.verify()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::sets::AnonymousSet;

    /// Verification reads every word of every page: one byte changed in
    /// the middle of one page, away from the stamp words, is found, for
    /// each kind of contents.
    #[test]
    fn one_changed_byte_anywhere_in_a_page_is_found() {
        for data in PageData::ALL {
            let set = AnonymousSet::new(64 * 4096, None).unwrap();
            let pages = Pages::new(&set, 4096, 64, data);
            stamp_pages(&pages, 0..64);
            assert!(
                pages.verify().is_clean(),
                "{data}: clean pages reported bad"
            );
            // SAFETY: byte 2049 of page 37 lies inside the 64-page set.
            unsafe { *set.base().add(37 * 4096 + 2049) ^= 0x10 };
            let report = pages.verify();
            assert_eq!(report.corrupted, 1, "{data}");
            assert_eq!(report.first_bad_page, Some(37), "{data}");
        }
    }

    /// `stamped_image` is byte for byte what stamping leaves in memory.
    #[test]
    fn the_stamped_image_is_the_stamped_page() {
        for data in PageData::ALL {
            let set = AnonymousSet::new(8 * 4096, None).unwrap();
            let pages = Pages::new(&set, 4096, 8, data);
            stamp_pages(&pages, 0..8);
            // SAFETY: page 5 lies inside the 8-page set, stamped above and
            // not written since.
            let page5 = unsafe { std::slice::from_raw_parts(set.base().add(5 * 4096), 4096) };
            assert_eq!(page5, &stamped_image(data, 5, 4096)[..], "{data}");
        }
    }
}
