//! The rate-limited summary of failed keys that every front writes per batch (target
//! `lmcache_resp::batch`): one WARNING line per batch with failures, at most one per interval,
//! the rest counted into the next line.

use super::BatchResult;
use crate::conn::Outcome;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Per front: failed keys summarised once per batch at WARNING (target
/// `lmcache_resp::batch`), at most one summary per `interval`; the batches not shown are
/// counted into the next summary.
pub struct FailureLog {
    interval: Duration,
    state: Mutex<FailureState>,
}

#[derive(Default)]
struct FailureState {
    last: Option<Instant>,
    /// Failed batches (and their failed keys) not shown since the last summary.
    suppressed_batches: u64,
    suppressed_keys: u64,
}

impl Default for FailureLog {
    fn default() -> Self {
        FailureLog::new(Duration::from_secs(1))
    }
}

impl FailureLog {
    /// At most one summary per `interval`.
    pub fn new(interval: Duration) -> FailureLog {
        FailureLog { interval, state: Mutex::new(FailureState::default()) }
    }

    /// Summarises `result`'s failed keys (nothing if none failed) for the front sending to
    /// `endpoint`; `keys`, when the caller still has them, names the first failed key.
    /// Returns the line it logged, if it logged one.
    pub fn report(&self, endpoint: &str, result: &BatchResult, keys: Option<&[&[u8]]>) -> Option<String> {
        let mut failed = result.outcomes.iter().enumerate().filter_map(|(i, o)| match o {
            Outcome::Failed(err) => Some((i, err)),
            _ => None,
        });
        let (first, err) = failed.next()?;
        let count = 1 + failed.count() as u64;
        let now = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.last.is_some_and(|last| now.duration_since(last) < self.interval) {
            state.suppressed_batches += 1;
            state.suppressed_keys += count;
            return None;
        }
        state.last = Some(now);
        let suppressed = std::mem::take(&mut state.suppressed_batches);
        let suppressed_keys = std::mem::take(&mut state.suppressed_keys);
        drop(state);
        let name = match keys.and_then(|keys| keys.get(first)) {
            Some(key) => format!("key {first} ({})", shown_key(key)),
            None => format!("key {first}"),
        };
        let mut line = format!(
            "{count} of {} keys failed in a {} batch to {endpoint}; first: {name}: {:?}: {err}",
            result.outcomes.len(),
            result.op.name(),
            err.kind(),
        );
        if suppressed > 0 {
            line.push_str(&format!(
                " ({suppressed} more failed batches with {suppressed_keys} failed keys in the last {:.0} s not shown)",
                self.interval.as_secs_f64()
            ));
        }
        log::warn!(target: "lmcache_resp::batch", "{line}");
        Some(line)
    }
}

/// A key for a log line: text as is (non-printable bytes escaped), cut at 120 bytes.
fn shown_key(key: &[u8]) -> String {
    let cut = &key[..key.len().min(120)];
    let mut shown: String = cut.escape_ascii().to_string();
    if key.len() > cut.len() {
        shown.push_str(&format!("... ({} bytes)", key.len()));
    }
    format!("'{shown}'")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{Error, ErrorKind};
    use crate::op::Op;

    #[test]
    fn failed_keys_are_summarised_at_most_once_per_interval_counting_the_rest() {
        let log = FailureLog::new(Duration::from_millis(200));
        let err = Error::new(ErrorKind::Connection, "cannot connect to 127.0.0.1:1: refused");
        let failed = BatchResult {
            id: 1,
            op: Op::Get,
            outcomes: vec![Outcome::Hit(1), Outcome::Failed(err.clone()), Outcome::Failed(err)],
        };
        let ok = BatchResult { id: 2, op: Op::Get, outcomes: vec![Outcome::Miss] };
        assert_eq!(log.report("127.0.0.1:1", &ok, None), None);
        let keys: [&[u8]; 3] = [b"a", b"b\n", b"c"];
        let line = log.report("127.0.0.1:1", &failed, Some(&keys)).unwrap();
        assert_eq!(
            line,
            "2 of 3 keys failed in a GET batch to 127.0.0.1:1; first: key 1 ('b\\n'): Connection: cannot connect to \
             127.0.0.1:1: refused"
        );
        assert_eq!(log.report("127.0.0.1:1", &failed, None), None);
        assert_eq!(log.report("127.0.0.1:1", &failed, None), None);
        std::thread::sleep(Duration::from_millis(250));
        let line = log.report("127.0.0.1:1", &failed, None).unwrap();
        assert!(line.contains("first: key 1: Connection"), "{line}");
        assert!(line.ends_with("(2 more failed batches with 4 failed keys in the last 0 s not shown)"), "{line}");
    }
}
