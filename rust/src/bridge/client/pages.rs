//! The pages this client holds: each index with the allocation generation the bridge handed
//! it in. A page is this client's to use only while it is listed here in that generation.

use crate::arena::PageHandle;
use crate::error::{Error, ErrorKind, Result};
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

/// The pages a client holds: index -> generation.
pub(super) struct HeldPages {
    /// The pool id of this client's handles: its client id, marked as a bridge's.
    pool_id: u64,
    owned: Mutex<HashMap<u32, u32>>,
}

impl HeldPages {
    /// None yet, for the client the bridge numbered `client_id`.
    pub(super) fn new(client_id: u32) -> HeldPages {
        HeldPages { pool_id: u64::from(client_id) | 1 << 63, owned: Mutex::new(HashMap::new()) }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<u32, u32>> {
        self.owned.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The handle of page `index` in `generation`.
    fn handle(&self, index: u32, generation: u32) -> PageHandle {
        PageHandle { pool_id: self.pool_id, index, generation }
    }

    /// Pages the bridge handed over, `(index, generation)`: this client's now.
    pub(super) fn take(&self, pages: Vec<(u32, u32)>) -> Vec<PageHandle> {
        let mut owned = self.lock();
        pages
            .into_iter()
            .map(|(index, generation)| {
                owned.insert(index, generation);
                self.handle(index, generation)
            })
            .collect()
    }

    /// Whether `page` is one this client holds.
    pub(super) fn check(&self, page: &PageHandle) -> Result<()> {
        match self.lock().get(&page.index) {
            Some(&generation) if generation == page.generation && page.pool_id == self.pool_id => Ok(()),
            _ => Err(Error::new(
                ErrorKind::Page,
                format!("page {} is not one this client holds (freed, or of another store)", page.index),
            )),
        }
    }

    /// Page `index` went back to the bridge.
    pub(super) fn forget(&self, index: u32) {
        self.lock().remove(&index);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_is_held_only_in_the_generation_handed_over_and_until_it_is_given_back() {
        let held = HeldPages::new(7);
        let pages = held.take(vec![(3, 1), (4, 2)]);
        assert_eq!(pages.iter().map(|p| (p.index, p.generation)).collect::<Vec<_>>(), [(3, 1), (4, 2)]);
        assert!(pages.iter().all(|p| held.check(p).is_ok()));
        let stale = PageHandle { generation: 2, ..pages[0] };
        let foreign = PageHandle { pool_id: HeldPages::new(8).pool_id, ..pages[0] };
        let never = PageHandle { index: 5, ..pages[0] };
        for page in [stale, foreign, never] {
            let err = held.check(&page).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Page);
            assert!(err.message().contains(&format!("page {} is not one this client holds", page.index)), "{err}");
        }
        held.forget(3);
        assert!(held.check(&pages[0]).is_err(), "given back");
        assert!(held.check(&pages[1]).is_ok());
    }
}
