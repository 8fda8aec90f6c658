//! The core logs through the `log` facade, with targets under `lmcache_resp::` (`::engine`,
//! `::bridge`, `::batch`, `::health`, ...). What carries the records elsewhere lives here,
//! free of Python: a bounded queue that a logging thread drains ([`LogQueue`], [`QueueLogger`]:
//! the thread that logs never waits for the drainer, and a full queue drops and counts), and
//! the [`Digest`] that folds bursts of like events (servers going down) into a few lines.
//! The Python bindings install a [`QueueLogger`] and forward its records to `logging`. The
//! rate-limited summary of failed keys that every front writes per batch is the engine's
//! (`engine::FailureLog`): it reads batch results.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// One log record, owned, as the drainer gets it.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    /// `log::Level` as a number: 1 error, 2 warn, 3 info, 4 debug, 5 trace.
    pub level: log::Level,
    /// The `log` target (`lmcache_resp::bridge`).
    pub target: String,
    /// The formatted message.
    pub message: String,
    /// The name of the thread that logged it (`lmcache-resp-io-3`).
    pub thread: String,
    /// Source file and line, when known.
    pub file: Option<&'static str>,
    /// Its line.
    pub line: Option<u32>,
    /// Seconds since the Unix epoch when it was logged.
    pub created: f64,
}

struct Inner {
    records: VecDeque<Record>,
    dropped: u64,
    closed: bool,
}

/// A bounded queue of records: [`LogQueue::push`] never blocks on the consumer (it holds a
/// short lock, never across I/O or the GIL); past its capacity it drops the record and counts.
pub struct LogQueue {
    inner: Mutex<Inner>,
    ready: Condvar,
    capacity: usize,
}

impl LogQueue {
    /// An empty queue of at most `capacity` records.
    pub const fn new(capacity: usize) -> LogQueue {
        LogQueue {
            inner: Mutex::new(Inner { records: VecDeque::new(), dropped: 0, closed: false }),
            ready: Condvar::new(),
            capacity,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `record` and wakes the drainer; false (and counted) when the queue is full.
    pub fn push(&self, record: Record) -> bool {
        let mut inner = self.lock();
        if inner.records.len() >= self.capacity {
            inner.dropped += 1;
            return false;
        }
        let was_empty = inner.records.is_empty();
        inner.records.push_back(record);
        drop(inner);
        if was_empty {
            self.ready.notify_one();
        }
        true
    }

    /// Waits up to `timeout` for records (returns at once if some are queued, or the queue
    /// was closed), then takes them all, with the count of records dropped since the last
    /// take.
    pub fn take(&self, timeout: Duration) -> (Vec<Record>, u64) {
        let mut inner = self.lock();
        if inner.records.is_empty() && !inner.closed && !timeout.is_zero() {
            inner = self
                .ready
                .wait_timeout_while(inner, timeout, |i| i.records.is_empty() && !i.closed)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        let records = inner.records.drain(..).collect();
        (records, std::mem::take(&mut inner.dropped))
    }

    /// Waits up to `timeout` until records are queued (or the queue was closed), without
    /// taking them; whether there are any.
    pub fn wait(&self, timeout: Duration) -> bool {
        let inner = self.lock();
        let inner = self
            .ready
            .wait_timeout_while(inner, timeout, |i| i.records.is_empty() && i.dropped == 0 && !i.closed)
            .unwrap_or_else(|p| p.into_inner())
            .0;
        !inner.records.is_empty() || inner.dropped > 0
    }

    /// Wakes the drainer for good: every later [`LogQueue::take`] returns at once.
    pub fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_all();
    }

    /// Lets [`LogQueue::take`] wait again (a drainer started after a close).
    pub fn reopen(&self) {
        self.lock().closed = false;
    }
}

/// A `log::Log` that queues every record enabled by `log::max_level()` into a [`LogQueue`].
pub struct QueueLogger {
    /// Where records go.
    pub queue: &'static LogQueue,
}

impl log::Log for QueueLogger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let created = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        self.queue.push(Record {
            level: record.level(),
            target: record.target().to_owned(),
            message: record.args().to_string(),
            thread: std::thread::current().name().unwrap_or("").to_owned(),
            file: record.file_static(),
            line: record.line(),
            created,
        });
    }

    fn flush(&self) {}
}

/// Events of one kind (a server going down, one coming back) on a line each, up to `burst` in a
/// `window`; past that they are counted, and the window ends with one line that counts them and
/// names a few. A thousand servers failing at once cost a handful of lines, not a thousand
/// (docs/reliability.md). Pure: the caller logs what it is told to.
#[derive(Debug)]
pub struct Digest {
    window: Duration,
    burst: usize,
    opened: Option<Instant>,
    shown: usize,
    held: Held,
}

/// The events of a window that were not shown one by one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Held {
    /// How many.
    pub count: usize,
    /// The names of the first few ([`Digest::EXAMPLES`]).
    pub examples: Vec<String>,
}

impl Held {
    /// `a, b, c and N others`.
    pub fn describe(&self) -> String {
        let mut text = self.examples.join(", ");
        let others = self.count - self.examples.len();
        if others > 0 {
            text.push_str(&format!(" and {others} other{}", if others == 1 { "" } else { "s" }));
        }
        text
    }
}

impl Digest {
    /// Names a summary gives.
    pub const EXAMPLES: usize = 3;

    /// At most `burst` lines of their own per `window`.
    pub const fn new(window: Duration, burst: usize) -> Digest {
        Digest { window, burst, opened: None, shown: 0, held: Held { count: 0, examples: Vec::new() } }
    }

    /// An event about `name` at `now`: whether it gets a line of its own (else it is held for
    /// the window's summary), and the summary of an earlier window that had ended (to log
    /// first).
    pub fn admit(&mut self, now: Instant, name: &str) -> (Option<Held>, bool) {
        let ended = self.flush(now, false);
        self.opened.get_or_insert(now);
        if self.shown < self.burst {
            self.shown += 1;
            return (ended, true);
        }
        self.held.count += 1;
        if self.held.examples.len() < Self::EXAMPLES {
            self.held.examples.push(name.to_owned());
        }
        (ended, false)
    }

    /// The window's summary once it has ended (or at once with `force`), if it held anything;
    /// an ended window is closed either way.
    pub fn flush(&mut self, now: Instant, force: bool) -> Option<Held> {
        let opened = self.opened?;
        if !force && now.saturating_duration_since(opened) < self.window {
            return None;
        }
        self.opened = None;
        self.shown = 0;
        let held = std::mem::take(&mut self.held);
        (held.count > 0).then_some(held)
    }

    /// When the running window ends, if it holds events to summarise.
    pub fn due(&self) -> Option<Instant> {
        self.opened.filter(|_| self.held.count > 0).map(|opened| opened + self.window)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_digest_shows_a_burst_per_window_and_counts_the_rest_into_one_summary() {
        let window = Duration::from_secs(1);
        let mut digest = Digest::new(window, 2);
        let t0 = Instant::now();
        let names: Vec<String> = (0..10_000).map(|i| format!("10.0.{}.{}:7000", i / 256, i % 256)).collect();
        let shown: Vec<bool> = names
            .iter()
            .map(|name| digest.admit(t0, name))
            .map(|(ended, shown)| {
                assert_eq!(ended, None);
                shown
            })
            .collect();
        assert_eq!(shown.iter().filter(|s| **s).count(), 2);
        assert!(shown[0] && shown[1]);
        assert_eq!(digest.due(), Some(t0 + window));
        assert_eq!(digest.flush(t0 + window / 2, false), None, "the window still runs");
        let held = digest.flush(t0 + window, false).expect("the window ended");
        assert_eq!(held.count, 9_998);
        assert_eq!(held.describe(), "10.0.0.2:7000, 10.0.0.3:7000, 10.0.0.4:7000 and 9995 others");
        assert_eq!(digest.due(), None);
        // A new window shows a new burst; an event after it ended closes it first.
        assert_eq!(digest.admit(t0 + window * 2, "a"), (None, true));
        assert_eq!(digest.admit(t0 + window * 2, "b"), (None, true));
        assert_eq!(digest.admit(t0 + window * 2, "c"), (None, false));
        let (ended, shown) = digest.admit(t0 + window * 4, "d");
        assert_eq!(ended, Some(Held { count: 1, examples: vec!["c".into()] }));
        assert!(shown);
        assert_eq!(ended.unwrap().describe(), "c");
        // Nothing held: no summary, even forced.
        assert_eq!(digest.flush(t0 + window * 4, true), None);
        assert_eq!(
            Held { count: 4, examples: vec!["x".into(), "y".into(), "z".into()] }.describe(),
            "x, y, z and 1 other"
        );
    }

    fn record(message: &str) -> Record {
        Record {
            level: log::Level::Info,
            target: "lmcache_resp::test".into(),
            message: message.into(),
            thread: "t".into(),
            file: None,
            line: None,
            created: 0.0,
        }
    }

    #[test]
    fn a_full_queue_drops_and_counts_and_never_blocks() {
        let queue = LogQueue::new(3);
        let started = Instant::now();
        let pushed = (0..1000).filter(|i| queue.push(record(&i.to_string()))).count();
        assert!(started.elapsed() < Duration::from_secs(1));
        assert_eq!(pushed, 3);
        let (records, dropped) = queue.take(Duration::ZERO);
        assert_eq!(records.iter().map(|r| r.message.as_str()).collect::<Vec<_>>(), ["0", "1", "2"]);
        assert_eq!(dropped, 997);
        assert_eq!(queue.take(Duration::ZERO), (vec![], 0), "the count is reported once");
    }

    #[test]
    fn the_drainer_is_woken_by_a_push_and_by_close() {
        let queue: &'static LogQueue = Box::leak(Box::new(LogQueue::new(8)));
        let drainer = std::thread::spawn(move || queue.take(Duration::from_secs(30)));
        std::thread::sleep(Duration::from_millis(50));
        let started = Instant::now();
        queue.push(record("wake"));
        let (records, _) = drainer.join().unwrap();
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(records[0].message, "wake");
        let drainer = std::thread::spawn(move || queue.take(Duration::from_secs(30)));
        std::thread::sleep(Duration::from_millis(50));
        queue.close();
        assert_eq!(drainer.join().unwrap(), (vec![], 0));
        let many: Vec<_> = (0..4).map(|_| std::thread::spawn(move || queue.push(record("x")))).collect();
        assert!(many.into_iter().all(|t| t.join().unwrap()));
        assert_eq!(queue.take(Duration::from_secs(30)).0.len(), 4, "a closed queue does not wait");
    }
}
