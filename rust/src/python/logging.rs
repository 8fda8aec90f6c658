//! The core's `log` records into Python's `logging`: a [`QueueLogger`] (installed once, when
//! the module loads) queues them without the GIL; `lmcache_resp._logging`'s daemon thread
//! takes them with [`_log_take`] (waiting with the GIL released) and emits each through
//! `logging.getLogger(target with :: as .)`. The Python side sets the level the core logs at
//! ([`_log_set_level`]) from its loggers' effective levels.

use crate::logging::{LogQueue, QueueLogger};
use pyo3::prelude::*;
use std::time::Duration;

/// Records waiting for the Python thread; past this many, new ones are dropped and counted.
pub const QUEUE_CAPACITY: usize = 8192;

static QUEUE: LogQueue = LogQueue::new(QUEUE_CAPACITY);
static LOGGER: QueueLogger = QueueLogger { queue: &QUEUE };

/// `(level, target, message, thread, file, line, created)`, `level` as Python's number.
type PyRecord = (u32, String, String, String, Option<&'static str>, Option<u32>, f64);

fn python_level(level: log::Level) -> u32 {
    match level {
        log::Level::Error => 40,
        log::Level::Warn => 30,
        log::Level::Info => 20,
        log::Level::Debug => 10,
        log::Level::Trace => 5,
    }
}

/// Waits up to `timeout` seconds for records and takes them: `(records, dropped since the
/// last take)`. The GIL is released while it waits.
#[pyfunction]
fn _log_take(py: Python<'_>, timeout: f64) -> (Vec<PyRecord>, u64) {
    let timeout = Duration::try_from_secs_f64(timeout.max(0.0)).unwrap_or(Duration::from_secs(1));
    let (records, dropped) = py.detach(|| QUEUE.take(timeout));
    let records = records
        .into_iter()
        .map(|r| (python_level(r.level), r.target, r.message, r.thread, r.file, r.line, r.created))
        .collect();
    (records, dropped)
}

/// Waits up to `timeout` seconds, with the GIL released, until records are queued (without
/// taking them: the caller takes them with `_log_take(0)` under its own lock).
#[pyfunction]
fn _log_wait(py: Python<'_>, timeout: f64) -> bool {
    let timeout = Duration::try_from_secs_f64(timeout.max(0.0)).unwrap_or(Duration::from_secs(1));
    py.detach(|| QUEUE.wait(timeout))
}

/// The lowest Python level any `lmcache_resp` logger emits: the core formats and queues only
/// records at or above it.
#[pyfunction]
fn _log_set_level(level: u32) {
    let filter = match level {
        0..=5 => log::LevelFilter::Trace,
        6..=10 => log::LevelFilter::Debug,
        11..=20 => log::LevelFilter::Info,
        21..=30 => log::LevelFilter::Warn,
        31..=40 => log::LevelFilter::Error,
        _ => log::LevelFilter::Off,
    };
    log::set_max_level(filter);
}

/// Wakes the thread waiting in `_log_take` for good (at exit); `_log_reopen` undoes it.
#[pyfunction]
fn _log_close() {
    QUEUE.close();
}

#[pyfunction]
fn _log_reopen() {
    QUEUE.reopen();
}

/// Logs `count` WARNING records at `target` from a thread of the core, as fast as it can,
/// with the GIL released; returns the seconds it took (test builds only).
#[cfg(feature = "test-hooks")]
#[pyfunction]
fn _log_flood_for_test(py: Python<'_>, count: usize, target: String) -> f64 {
    py.detach(|| {
        std::thread::Builder::new()
            .name("lmcache-resp-flood".into())
            .spawn(move || {
                let started = std::time::Instant::now();
                for i in 0..count {
                    log::warn!(target: &target, "flood record {i}");
                }
                started.elapsed().as_secs_f64()
            })
            .expect("a thread")
            .join()
            .expect("no panic")
    })
}

/// Installs the logger (once per process; off until Python sets a level) and adds the
/// functions.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(log::LevelFilter::Off);
    }
    m.add("LOG_QUEUE_CAPACITY", QUEUE_CAPACITY)?;
    m.add_function(wrap_pyfunction!(_log_take, m)?)?;
    m.add_function(wrap_pyfunction!(_log_wait, m)?)?;
    m.add_function(wrap_pyfunction!(_log_set_level, m)?)?;
    m.add_function(wrap_pyfunction!(_log_close, m)?)?;
    m.add_function(wrap_pyfunction!(_log_reopen, m)?)?;
    #[cfg(feature = "test-hooks")]
    m.add_function(wrap_pyfunction!(_log_flood_for_test, m)?)?;
    Ok(())
}
