//! Whether a client's region holds memory in pages it does not hold.
//!
//! A client maps its whole region and can write (or read: a shared-memory read fault takes a
//! page too) anywhere in it, pages it was never given included. The bridge's memory is bounded
//! only if that is caught, so the relay walks each region's memory (`SEEK_DATA` on its memfd)
//! and drops a client with memory in a page it does not hold. The walk is per page, at the
//! granularity the kernel allocates shared memory in: 4 KiB pages, unless transparent huge
//! pages for shared memory are enabled, when one write may bring a whole huge page in and
//! pages sharing a huge page with a held one are let be ([`shmem_granule`]).
//!
//! The walk itself ([`first_unheld_page`]) is plain code over a "next data at or after"
//! function, tested without a memfd.

use std::os::fd::BorrowedFd;

/// Where a region's pages lie.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Geometry {
    /// Where page 0 starts (everything before it is the header and the rings).
    pub(super) pages_offset: u64,
    /// Bytes from one page's start to the next's (the page size rounded up to 4 KiB).
    pub(super) page_stride: u64,
    pub(super) num_pages: u64,
    /// The unit the kernel allocates the region's memory in (a power of two).
    pub(super) granule: u64,
}

/// The first page with memory in it that the client does not hold, and the offset of that
/// memory; None when every byte of memory lies in the rings or in held pages (or shares a
/// granule with them). `next_data(at)` is the first offset at or after `at` with memory.
pub(super) fn first_unheld_page(
    geometry: &Geometry,
    mut next_data: impl FnMut(u64) -> Option<u64>,
    held: impl Fn(u32) -> bool,
) -> Option<(u32, u64)> {
    let Geometry { pages_offset, page_stride, num_pages, granule } = *geometry;
    let pages_end = pages_offset + page_stride * num_pages;
    let page_of = |offset: u64| ((offset - pages_offset) / page_stride) as u32;
    let mut at = pages_offset;
    while at < pages_end {
        let data = next_data(at)?;
        if data >= pages_end {
            return None;
        }
        if data < pages_offset {
            at = pages_offset;
            continue;
        }
        let granule_start = data / granule * granule;
        let block_start = granule_start.max(pages_offset);
        let block_end = (granule_start + granule).min(pages_end);
        let page = page_of(data);
        if held(page) {
            // Its whole page, and the rest of the granule, are accounted for.
            let page_end = pages_offset + (u64::from(page) + 1) * page_stride;
            at = block_end.max(page_end.next_multiple_of(granule).min(pages_end));
            continue;
        }
        // The rings, or another page sharing the granule, may be what brought it in.
        let shares = granule_start < pages_offset || (page_of(block_start)..=page_of(block_end - 1)).any(&held);
        if !shares {
            return Some((page, data));
        }
        at = block_end;
    }
    None
}

/// The first offset at or after `at` of `fd` that holds memory (SEEK_DATA), if any.
pub(super) fn next_data(fd: BorrowedFd<'_>, at: u64) -> Option<u64> {
    rustix::fs::seek(fd, rustix::fs::SeekFrom::Data(at)).ok()
}

/// The unit shared memory is allocated in here: the largest size transparent huge pages may
/// take for shared memory (`/sys/kernel/mm/transparent_hugepage/shmem_enabled` and the
/// per-size `hugepages-*kB/shmem_enabled`), or 4 KiB when they are off. 2 MiB when the kernel
/// does not say.
pub(super) fn shmem_granule() -> u64 {
    const OS_PAGE: u64 = 4096;
    const THP_DIR: &str = "/sys/kernel/mm/transparent_hugepage";
    let read = |path: &str| std::fs::read_to_string(path).ok();
    let Some(top) = read(&format!("{THP_DIR}/shmem_enabled")) else { return 2 << 20 };
    let top_on = shmem_setting_on(&top, false);
    let pmd = read(&format!("{THP_DIR}/hpage_pmd_size")).and_then(|s| s.trim().parse().ok()).unwrap_or(2 << 20);
    let mut granule = if top_on { pmd } else { OS_PAGE };
    // Multi-size THP (Linux 6.11+): each size has its own setting, "inherit" follows the top.
    if let Ok(dir) = std::fs::read_dir(THP_DIR) {
        for entry in dir.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(kib) = name.strip_prefix("hugepages-").and_then(|s| s.strip_suffix("kB")) else { continue };
            let (Ok(kib), Some(setting)) = (kib.parse::<u64>(), read(&format!("{THP_DIR}/{name}/shmem_enabled")))
            else {
                continue;
            };
            if shmem_setting_on(&setting, top_on) {
                granule = granule.max(kib << 10);
            }
        }
    }
    granule
}

/// Whether a `shmem_enabled` file's selected value (`[...]`) lets huge pages in; `inherit`
/// is `inherited`.
fn shmem_setting_on(text: &str, inherited: bool) -> bool {
    let selected = text.split('[').nth(1).and_then(|s| s.split(']').next()).unwrap_or(text.trim());
    match selected {
        "never" | "deny" => false,
        "inherit" => inherited,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    const KIB: u64 = 1 << 10;

    /// Memory at the 4 KiB blocks that `blocks` start at.
    fn memory(blocks: &[u64]) -> impl Fn(u64) -> Option<u64> {
        let set: BTreeSet<u64> = blocks.iter().copied().collect();
        move |at| {
            let block = at / 4096 * 4096;
            set.range(block..).next().map(|&b| b.max(at))
        }
    }

    fn geometry(granule: u64) -> Geometry {
        // Rings in the first 1 MiB; 16 pages of 64 KiB.
        Geometry { pages_offset: 1 << 20, page_stride: 64 * KIB, num_pages: 16, granule }
    }

    fn page(i: u64) -> u64 {
        (1 << 20) + i * 64 * KIB
    }

    #[test]
    fn memory_in_the_rings_and_in_held_pages_is_the_clients_own() {
        let held = |p: u32| p == 0 || p == 5;
        let touched = [0, 4096, 300 * KIB, page(0), page(0) + 60 * KIB, page(5) + 4096];
        assert_eq!(first_unheld_page(&geometry(4096), memory(&touched), held), None);
        assert_eq!(first_unheld_page(&geometry(4096), memory(&[]), held), None);
    }

    #[test]
    fn one_block_of_a_page_not_held_is_found_even_next_to_a_held_one() {
        let held = |p: u32| p == 0;
        // The review's case: a page written inside the huge page of a held one.
        let touched = [page(0), page(1) + 8 * KIB];
        assert_eq!(first_unheld_page(&geometry(4096), memory(&touched), held), Some((1, page(1) + 8 * KIB)));
        // The last block of the last page, and read faults count as writes do.
        let touched = [page(0), page(15) + 60 * KIB];
        assert_eq!(first_unheld_page(&geometry(4096), memory(&touched), held), Some((15, page(15) + 60 * KIB)));
        // A client holding nothing, one block anywhere in the page area.
        assert_eq!(first_unheld_page(&geometry(4096), memory(&[page(7)]), |_| false), Some((7, page(7))));
    }

    #[test]
    fn with_huge_pages_a_page_sharing_a_huge_page_with_a_held_one_or_the_rings_is_let_be_and_no_other() {
        // 80 pages of 64 KiB from 1 MiB: pages 0..16 share the huge page [0, 2 MiB) with the
        // rings, pages 16..48 fill [2 MiB, 4 MiB), pages 48..80 [4 MiB, 6 MiB).
        let g = Geometry { pages_offset: 1 << 20, page_stride: 64 * KIB, num_pages: 80, granule: 2 << 20 };
        let held = |p: u32| p == 20;
        // Page 40 shares [2 MiB, 4 MiB) with held page 20, page 3 shares [0, 2 MiB) with the
        // rings: a write to either may have brought the whole huge page in.
        assert_eq!(first_unheld_page(&g, memory(&[page(20), page(40), page(3)]), held), None);
        // Pages 60 and 79 are in [4 MiB, 6 MiB), with no held page.
        assert_eq!(first_unheld_page(&g, memory(&[page(20), page(60)]), held), Some((60, page(60))));
        assert_eq!(first_unheld_page(&g, memory(&[page(79) + 60 * KIB]), held), Some((79, page(79) + 60 * KIB)));
    }

    #[test]
    fn shmem_settings_read_as_the_kernel_means_them() {
        assert!(!shmem_setting_on("always within_size advise [never] deny force\n", false));
        assert!(!shmem_setting_on("always within_size advise never [deny] force\n", false));
        assert!(shmem_setting_on("[always] within_size advise never deny force\n", false));
        assert!(shmem_setting_on("always [within_size] advise never deny force\n", false));
        assert!(shmem_setting_on("always inherit within_size advise [inherit]\n", true));
        assert!(!shmem_setting_on("always inherit within_size advise [inherit]\n", false));
        let granule = shmem_granule();
        assert!(granule.is_power_of_two() && granule >= 4096, "{granule}");
    }
}
