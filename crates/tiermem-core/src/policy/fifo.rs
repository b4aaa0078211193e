//! FIFO: pages leave in the order they came in. The simplest policy, kept
//! as a baseline for the others; it ignores references, so a hot page is
//! evicted as readily as a cold one.

use crossbeam_queue::SegQueue;

use super::{mark_queued, unmark_queued, Policy};
use crate::config::PolicyKind;
use crate::page_table::{Kind, PageNo, PageTable};

#[derive(Default)]
pub struct Fifo {
    queue: SegQueue<PageNo>,
}

impl Policy for Fifo {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Fifo
    }

    fn admit(&self, table: &PageTable, page: PageNo) {
        if mark_queued(table, page) {
            self.queue.push(page);
        }
    }

    fn pick_victims(&self, table: &PageTable, want: usize, out: &mut Vec<PageNo>) {
        while out.len() < want {
            let Some(page) = self.queue.pop() else { break };
            if unmark_queued(table, page).kind() == Kind::Resident {
                out.push(page);
            }
        }
    }

    fn probation_share(&self) -> u32 {
        0
    }
}
