//! The bridge's log of connections it turns away, at a bounded rate.
//!
//! A peer can open connections as fast as the kernel accepts them, each refused (a uid the
//! bridge does not serve, the bridge full, a handshake not finished in time). One log line
//! each would let it flood the log (29.5k lines in 2 s in the review). The first refusal after
//! a quiet second is logged at once, with its reason; the ones after it are counted, by uid
//! and cause, and told in one line at most once per [`WINDOW`]: "N connections refused in the
//! last S s: ...". Plain code: time is what the caller says it is.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The shortest time between two lines.
pub(super) const WINDOW: Duration = Duration::from_secs(1);
/// Groups named in one summary line; the rest are counted together.
const NAMED_GROUPS: usize = 4;

/// Why a connection was turned away, for grouping.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Cause {
    /// Its uid is not one the bridge serves.
    NotAllowed,
    /// The kernel did not say who the peer is.
    Unknown,
    /// Too many attaches in progress.
    Busy,
    /// The bridge serves its maximum of clients.
    Full,
    /// Another protocol version, or not a bridge client.
    Protocol,
    /// It did not finish its handshake in time.
    Timeout,
    /// The bridge could not set it up.
    Failed,
}

impl Cause {
    fn describe(self) -> &'static str {
        match self {
            Cause::NotAllowed => "uid not allowed",
            Cause::Unknown => "peer unknown",
            Cause::Busy => "too many attaches in progress",
            Cause::Full => "the bridge is full",
            Cause::Protocol => "protocol",
            Cause::Timeout => "handshake not finished in time",
            Cause::Failed => "setup failed",
        }
    }
}

#[derive(Debug)]
struct Group {
    count: u64,
    last_pid: i32,
}

/// Refusals counted since the last line.
#[derive(Debug, Default)]
pub(super) struct RefusalLog {
    last_line: Option<Instant>,
    /// Counted, not yet told, since `since`.
    pending: BTreeMap<(u32, Cause), Group>,
    since: Option<Instant>,
}

impl RefusalLog {
    /// A connection of `uid` (process `pid`) was refused for `cause`; `reason` says it in
    /// full. Returns the line to log now, if one is due.
    pub(super) fn refused(
        &mut self,
        now: Instant,
        uid: u32,
        pid: i32,
        cause: Cause,
        reason: impl FnOnce() -> String,
    ) -> Option<String> {
        if self.last_line.is_none_or(|last| now.duration_since(last) >= WINDOW) && self.pending.is_empty() {
            self.last_line = Some(now);
            return Some(reason());
        }
        let group = self.pending.entry((uid, cause)).or_insert(Group { count: 0, last_pid: pid });
        group.count += 1;
        group.last_pid = pid;
        self.since.get_or_insert(now);
        self.flush(now)
    }

    /// The summary of what was counted, once a window has passed since the last line.
    pub(super) fn flush(&mut self, now: Instant) -> Option<String> {
        let due = self.next_due()?;
        if now < due {
            return None;
        }
        let since = self.since.take().unwrap_or(now);
        let pending = std::mem::take(&mut self.pending);
        self.last_line = Some(now);
        let total: u64 = pending.values().map(|g| g.count).sum();
        let mut groups: Vec<_> = pending.into_iter().collect();
        groups.sort_by(|a, b| b.1.count.cmp(&a.1.count).then(a.0.cmp(&b.0)));
        let mut named: Vec<String> = groups
            .iter()
            .take(NAMED_GROUPS)
            .map(|((uid, cause), g)| format!("{} uid {uid} ({}, last pid {})", g.count, cause.describe(), g.last_pid))
            .collect();
        if groups.len() > NAMED_GROUPS {
            let rest: u64 = groups[NAMED_GROUPS..].iter().map(|(_, g)| g.count).sum();
            named.push(format!("{rest} more"));
        }
        let seconds = now.duration_since(since).as_secs_f64().max(0.001);
        Some(format!("{total} connections refused in the last {seconds:.1} s: {}", named.join(", ")))
    }

    /// When the counted refusals are due to be told; None when none are counted.
    pub(super) fn next_due(&self) -> Option<Instant> {
        if self.pending.is_empty() {
            return None;
        }
        Some(self.last_line.map_or_else(|| self.since.expect("set with pending"), |last| last + WINDOW))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_refusal_is_told_at_once_with_its_reason() {
        let mut log = RefusalLog::default();
        let now = Instant::now();
        let line = log.refused(now, 65534, 42, Cause::NotAllowed, || "uid 65534 (pid 42) may not attach".into());
        assert_eq!(line.as_deref(), Some("uid 65534 (pid 42) may not attach"));
        assert_eq!(log.next_due(), None, "nothing counted");
        // A second later, the next one is told at once too.
        let line = log.refused(now + WINDOW, 65534, 43, Cause::NotAllowed, || "again".into());
        assert_eq!(line.as_deref(), Some("again"));
    }

    #[test]
    fn a_flood_of_refusals_is_told_in_one_line_a_second() {
        let mut log = RefusalLog::default();
        let start = Instant::now();
        let mut lines = Vec::new();
        // 30,000 refusals over 2 s, a few of another uid and cause among them.
        for i in 0..30_000u32 {
            let now = start + Duration::from_micros(u64::from(i) * 2000 / 30 + 1);
            let (uid, cause) = if i % 1000 == 7 { (1000, Cause::Full) } else { (65534, Cause::NotAllowed) };
            lines.extend(log.refused(now, uid, i as i32, cause, || format!("refusal {i}")));
            lines.extend(log.flush(now));
        }
        let end = start + Duration::from_secs(2) + Duration::from_millis(1);
        lines.extend(log.flush(end));
        assert!(lines.len() <= 4, "{} lines: {lines:?}", lines.len());
        assert_eq!(lines[0], "refusal 0");
        assert!(lines[1].contains(" connections refused in the last 1.0 s: "), "{}", lines[1]);
        assert!(
            lines[1].contains("uid 65534 (uid not allowed, last pid ")
                && lines[1].contains("uid 1000 (the bridge is full")
        );
        let told: u64 = lines[1..].iter().map(|l| l.split(' ').next().unwrap().parse::<u64>().unwrap()).sum();
        assert_eq!(told, 29_999, "every refusal counted once: {lines:?}");
        assert_eq!(log.next_due(), None);
    }

    #[test]
    fn counted_refusals_are_due_a_window_after_the_last_line() {
        let mut log = RefusalLog::default();
        let now = Instant::now();
        assert!(log.refused(now, 1, 1, Cause::Timeout, || "first".into()).is_some());
        assert!(log.refused(now + Duration::from_millis(10), 1, 2, Cause::Timeout, String::new).is_none());
        assert_eq!(log.next_due(), Some(now + WINDOW));
        assert_eq!(log.flush(now + Duration::from_millis(999)), None);
        let line = log.flush(now + WINDOW).unwrap();
        assert_eq!(
            line,
            "1 connections refused in the last 1.0 s: 1 uid 1 (handshake not finished in time, last pid 2)"
        );
    }

    #[test]
    fn past_four_groups_the_rest_are_counted_together() {
        let mut log = RefusalLog::default();
        let now = Instant::now();
        let _ = log.refused(now, 0, 0, Cause::Busy, String::new);
        for uid in 0..10 {
            let _ = log.refused(now, uid, 7, Cause::NotAllowed, String::new);
        }
        let line = log.flush(now + WINDOW).unwrap();
        assert!(line.starts_with("10 connections refused") && line.ends_with(", 6 more"), "{line}");
    }
}
