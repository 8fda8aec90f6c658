//! Which pages operations in flight use. A page an operation uses is never freed (and handed
//! to another owner) before the operation completes: a GET may still be writing into it.
//!
//! One ledger serves every front that hands out pages: the in-process store, a bridge's
//! client (for its own batches) and the bridge itself (for every client's, where it is the
//! trust boundary). Each keeps its own idea of who owns a page and checks it inside
//! [`PageLedger::claim`], under the ledger's lock, so that a free cannot slip in between the
//! ownership check and the count.

use crate::error::{Error, ErrorKind, Result};
use crate::op::Op;
use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};

/// Busy counts per page, and the claims of batches submitted to be drained.
pub struct PageLedger {
    /// Operations in flight per page.
    busy: Mutex<Vec<u32>>,
    /// Claims kept until their batch is drained, by batch id.
    filed: Mutex<HashMap<u64, Claim>>,
}

/// The pages one batch counted busy; hand it back with [`PageLedger::release`] once the batch
/// completed.
#[must_use = "a claim keeps its pages busy until it is released"]
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Claim {
    pages: Vec<u32>,
}

impl Claim {
    /// The pages claimed, in the batch's key order.
    pub fn pages(&self) -> &[u32] {
        &self.pages
    }
}

impl PageLedger {
    /// A ledger for pages `0..num_pages`, all idle.
    pub fn new(num_pages: usize) -> PageLedger {
        PageLedger { busy: Mutex::new(vec![0; num_pages]), filed: Mutex::new(HashMap::new()) }
    }

    fn lock_busy(&self) -> MutexGuard<'_, Vec<u32>> {
        self.busy.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_filed(&self) -> MutexGuard<'_, HashMap<u64, Claim>> {
        self.filed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts `pages` busy for one batch of `op`, once `check` (the caller's ownership check,
    /// run under the ledger's lock) accepted them. A GET may name a page only once: two values
    /// received into one page would overwrite each other.
    pub fn claim(&self, op: Op, pages: &[u32], check: impl FnOnce() -> Result<()>) -> Result<Claim> {
        let mut busy = self.lock_busy();
        check()?;
        if let Some(page) = pages.iter().find(|&&page| page as usize >= busy.len()) {
            return Err(Error::new(ErrorKind::Page, format!("page {page} is not in a pool of {} pages", busy.len())));
        }
        if op == Op::Get {
            let mut seen = HashSet::with_capacity(pages.len());
            if let Some(twice) = pages.iter().find(|page| !seen.insert(**page)) {
                return Err(Error::invalid(format!("page {twice} appears twice in one GET batch")));
            }
        }
        for &page in pages {
            busy[page as usize] += 1;
        }
        Ok(Claim { pages: pages.to_vec() })
    }

    /// The batch that held `claim` completed: its pages are free to go.
    pub fn release(&self, claim: Claim) {
        let mut busy = self.lock_busy();
        for page in claim.pages {
            busy[page as usize] -= 1;
        }
    }

    /// Submits a batch with `submit` and keeps `claim` under the batch's id until
    /// [`PageLedger::settle`] sees that id drained. The filing lock is held across the submit,
    /// so a drain that sees the batch complete (even before `submit` returns) settles it only
    /// after it was filed. A failed submit releases the claim at once.
    pub fn submit_filed(&self, claim: Claim, submit: impl FnOnce() -> Result<u64>) -> Result<u64> {
        let mut filed = self.lock_filed();
        match submit() {
            Ok(batch) => {
                filed.insert(batch, claim);
                Ok(batch)
            }
            Err(err) => {
                drop(filed);
                self.release(claim);
                Err(err)
            }
        }
    }

    /// Drained batches: the claims filed under their ids are released. Ids with no claim
    /// (batches of keys only) are ignored.
    pub fn settle(&self, batches: impl IntoIterator<Item = u64>) {
        let claims: Vec<Claim> = {
            let mut filed = self.lock_filed();
            batches.into_iter().filter_map(|batch| filed.remove(&batch)).collect()
        };
        for claim in claims {
            self.release(claim);
        }
    }

    /// Runs `free` only while `page` is idle, under the ledger's lock, so that no claim can
    /// slip in between the check and the free.
    pub fn free_if_idle<T>(&self, page: u32, free: impl FnOnce() -> Result<T>) -> Result<T> {
        let busy = self.lock_busy();
        refuse_if_busy(&busy, page)?;
        free()
    }

    /// Refuses a free of `page` while an operation uses it, without holding the ledger while
    /// the free goes on (a bridge's client: the bridge checks again under its own ledger).
    pub fn ensure_idle(&self, page: u32) -> Result<()> {
        refuse_if_busy(&self.lock_busy(), page)
    }

    /// Runs `take` with the pages of `pages` that no operation uses, under the ledger's lock
    /// (a client leaving: its idle pages go back now, the others when their batches finish).
    pub fn with_idle<T>(&self, pages: impl IntoIterator<Item = u32>, take: impl FnOnce(Vec<u32>) -> T) -> T {
        let busy = self.lock_busy();
        let idle = pages.into_iter().filter(|&page| busy.get(page as usize).is_some_and(|&count| count == 0)).collect();
        take(idle)
    }

    /// Whether no operation uses `page`.
    pub fn is_idle(&self, page: u32) -> bool {
        self.lock_busy().get(page as usize).is_none_or(|&count| count == 0)
    }
}

fn refuse_if_busy(busy: &[u32], page: u32) -> Result<()> {
    if busy.get(page as usize).is_some_and(|&count| count > 0) {
        return Err(Error::new(
            ErrorKind::Page,
            format!("page {page} is in use by an operation in flight: free it once the operation completes"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_busy_page_is_not_freed_until_its_batch_releases_it() {
        let ledger = PageLedger::new(4);
        let claim = ledger.claim(Op::Set, &[1, 2], || Ok(())).unwrap();
        assert_eq!(claim.pages(), &[1, 2]);
        let err = ledger.free_if_idle(1, || Ok(())).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Page);
        assert_eq!(err.message(), "page 1 is in use by an operation in flight: free it once the operation completes");
        assert_eq!(ledger.free_if_idle(3, || Ok("freed")).unwrap(), "freed");
        assert_eq!(
            ledger.ensure_idle(2).unwrap_err().message(),
            "page 2 is in use by an operation in flight: free it once the operation completes"
        );
        ledger.ensure_idle(3).unwrap();
        ledger.release(claim);
        assert!(ledger.is_idle(1));
        ledger.free_if_idle(1, || Ok(())).unwrap();
    }

    #[test]
    fn a_get_names_each_page_once_and_a_refused_claim_counts_nothing() {
        let ledger = PageLedger::new(4);
        let err = ledger.claim(Op::Get, &[0, 3, 0], || Ok(())).unwrap_err();
        assert_eq!(err.message(), "page 0 appears twice in one GET batch");
        assert!(ledger.is_idle(0) && ledger.is_idle(3));
        // Sending one page twice is fine: both SETs only read it.
        let twice = ledger.claim(Op::Set, &[0, 0], || Ok(())).unwrap();
        let err = ledger.claim(Op::Get, &[1], || Err(Error::invalid("not yours"))).unwrap_err();
        assert_eq!(err.message(), "not yours");
        assert!(ledger.is_idle(1));
        let err = ledger.claim(Op::Set, &[4], || Ok(())).unwrap_err();
        assert_eq!(err.message(), "page 4 is not in a pool of 4 pages");
        ledger.release(twice);
        assert!(ledger.is_idle(0));
    }

    #[test]
    fn filed_claims_are_released_when_their_batch_is_drained() {
        let ledger = PageLedger::new(2);
        let claim = ledger.claim(Op::Get, &[0], || Ok(())).unwrap();
        assert_eq!(ledger.submit_filed(claim, || Ok(7)).unwrap(), 7);
        assert!(!ledger.is_idle(0));
        ledger.settle([5, 6]);
        assert!(!ledger.is_idle(0), "other batches' ids release nothing");
        ledger.settle([7]);
        assert!(ledger.is_idle(0));
        let claim = ledger.claim(Op::Get, &[1], || Ok(())).unwrap();
        let err = ledger.submit_filed(claim, || Err(Error::closed("the store"))).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Closed);
        assert!(ledger.is_idle(1), "a failed submit releases its claim");
    }

    #[test]
    fn only_idle_pages_are_handed_back() {
        let ledger = PageLedger::new(3);
        let claim = ledger.claim(Op::Set, &[1], || Ok(())).unwrap();
        assert_eq!(ledger.with_idle([0, 1, 2], |idle| idle), vec![0, 2]);
        ledger.release(claim);
        assert_eq!(ledger.with_idle([1], |idle| idle), vec![1]);
    }

    #[derive(Clone, Debug)]
    enum Step {
        Claim(Op, Vec<u32>),
        Release(usize),
        Free(u32),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (prop_oneof![Just(Op::Get), Just(Op::Set)], prop::collection::vec(0u32..6, 0..4))
                .prop_map(|(op, pages)| Step::Claim(op, pages)),
            (0usize..8).prop_map(Step::Release),
            (0u32..6).prop_map(Step::Free),
        ]
    }

    proptest! {
        /// Against a model (a list of live claims): a free succeeds exactly when no live claim
        /// names the page, and every count returns to zero once every claim is released.
        #[test]
        fn frees_are_refused_exactly_while_a_claim_holds_the_page(steps in prop::collection::vec(step(), 0..60)) {
            let ledger = PageLedger::new(6);
            let mut live: Vec<Claim> = Vec::new();
            for step in steps {
                match step {
                    Step::Claim(op, pages) => {
                        let twice = op == Op::Get && pages.iter().collect::<HashSet<_>>().len() != pages.len();
                        match ledger.claim(op, &pages, || Ok(())) {
                            Ok(claim) => { prop_assert!(!twice); live.push(claim) }
                            Err(_) => prop_assert!(twice),
                        }
                    }
                    Step::Release(i) if !live.is_empty() => {
                        let claim = live.remove(i % live.len());
                        ledger.release(claim);
                    }
                    Step::Release(_) => {}
                    Step::Free(page) => {
                        let held = live.iter().any(|claim| claim.pages().contains(&page));
                        prop_assert_eq!(ledger.free_if_idle(page, || Ok(())).is_ok(), !held);
                    }
                }
            }
            for claim in live.drain(..) {
                ledger.release(claim);
            }
            prop_assert!((0..6).all(|page| ledger.is_idle(page)));
        }
    }
}
