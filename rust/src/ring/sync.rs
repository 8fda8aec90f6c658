//! The atomics the ring uses: loom's model-checked ones under `cfg(loom)`, std's otherwise.

#[cfg(loom)]
pub(super) use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
pub(super) use std::sync::atomic::{AtomicU64, Ordering};
