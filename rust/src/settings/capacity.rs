//! What capacity tracking is asked to do: LMCache's `max_capacity_gb` with its `eviction`
//! block, as settled settings. The tracker that acts on them lives in `crate::capacity`.

use crate::error::{Error, Result};

/// What capacity tracking does once stored bytes pass the watermark (`eviction_policy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvictionPolicy {
    /// Delete the least recently used keys.
    Lru,
    /// Track only; never delete.
    Noop,
}

impl EvictionPolicy {
    /// The policy's name as written back (`"LRU"`, `"noop"`).
    pub fn name(self) -> &'static str {
        match self {
            EvictionPolicy::Lru => "LRU",
            EvictionPolicy::Noop => "noop",
        }
    }
}

impl std::str::FromStr for EvictionPolicy {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        match text.to_ascii_lowercase().as_str() {
            "lru" => Ok(EvictionPolicy::Lru),
            "noop" => Ok(EvictionPolicy::Noop),
            _ => Err(Error::invalid(format!("eviction_policy must be \"LRU\" or \"noop\", got {text:?}"))),
        }
    }
}

/// Capacity tracking as `crate::capacity` runs it: the capacity and the eviction settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CapacityConfig {
    /// The capacity, in bytes; must be more than 0.
    pub capacity_bytes: u64,
    /// What eviction does.
    pub policy: EvictionPolicy,
    /// Evict once stored bytes exceed this share of the capacity.
    pub trigger_watermark: f64,
    /// Share of the tracked keys deleted per eviction.
    pub eviction_ratio: f64,
}

impl CapacityConfig {
    /// Refuses a zero capacity and a watermark or ratio outside (0, 1].
    pub fn validate(&self) -> Result<()> {
        if self.capacity_bytes == 0 {
            return Err(Error::invalid("capacity must be more than 0 bytes (0 disables tracking)"));
        }
        for (name, value) in [("trigger_watermark", self.trigger_watermark), ("eviction_ratio", self.eviction_ratio)] {
            if !(value > 0.0 && value <= 1.0) {
                return Err(Error::invalid(format!("eviction.{name} must be in (0, 1], got {value}")));
            }
        }
        Ok(())
    }

    /// The stored bytes past which eviction starts.
    pub fn watermark_bytes(&self) -> u64 {
        (self.capacity_bytes as f64 * self.trigger_watermark) as u64
    }
}
