//! `_native.loopback_ceiling`: the machine's own limit for moving blocks through a local stream
//! socket, with no Redis in the path, the ceiling `python -m lmcache_resp.bench --ceiling`
//! reports its results against. Benchmark support, not part of the core: it is compiled only
//! into the bindings, and nothing in the core uses it.
//!
//! `pairs` sender/receiver thread pairs, one connection each. Senders write preallocated
//! blocks in turn; receivers read into preallocated block-sized buffers in turn. With one
//! block, the copies run from and to cache (the best case); with a working set as large as a
//! benchmark's page pool, they run from and to memory, as a store's copies do. Measured from
//! the moment all threads are released until the last byte arrives, with the CPU time of the
//! sending and the receiving threads apart: on loopback the sender's time includes the
//! kernel's receive processing, which runs in its context, so each side is what a client pays
//! to send (SET) or to receive (GET) one byte.

use super::errors;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Barrier};
use std::time::Instant;

/// What one [`measure`] run measured.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Ceiling {
    /// Wall-clock seconds from the threads' release until every receiver had all its bytes.
    seconds: f64,
    /// Bytes moved, over all pairs.
    bytes: u64,
    /// User plus system CPU time of the whole process over the measurement.
    cpu_seconds: f64,
    /// CPU time of the sending threads.
    sender_cpu_seconds: f64,
    /// CPU time of the receiving threads.
    receiver_cpu_seconds: f64,
}

impl Ceiling {
    /// Decimal GB (1e9 bytes) per second.
    fn gb_per_s(&self) -> f64 {
        self.bytes as f64 / self.seconds / 1e9
    }
}

trait Stream: Read + Write + Send + 'static {}
impl<T: Read + Write + Send + 'static> Stream for T {}

fn connected_pair(unix: bool) -> io::Result<(Box<dyn Stream>, Box<dyn Stream>)> {
    if unix {
        let (a, b) = UnixStream::pair()?;
        return Ok((Box::new(a), Box::new(b)));
    }
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let sender = TcpStream::connect(listener.local_addr()?)?;
    let (receiver, _) = listener.accept()?;
    sender.set_nodelay(true)?;
    Ok((Box::new(sender), Box::new(receiver)))
}

fn cpu_seconds(clock: rustix::time::ClockId) -> f64 {
    let now = rustix::time::clock_gettime(clock);
    now.tv_sec as f64 + now.tv_nsec as f64 * 1e-9
}

fn process_cpu_seconds() -> f64 {
    cpu_seconds(rustix::time::ClockId::ProcessCPUTime)
}

fn thread_cpu_seconds() -> f64 {
    cpu_seconds(rustix::time::ClockId::ThreadCPUTime)
}

/// Moves about `total_bytes` (rounded up to whole blocks per pair) and times it. Each pair's
/// sender and receiver cycle through `working_set_bytes` of distinct blocks (at least one).
fn measure(
    pairs: usize,
    block_bytes: usize,
    total_bytes: u64,
    unix: bool,
    working_set_bytes: usize,
) -> io::Result<Ceiling> {
    if pairs == 0 || block_bytes == 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "pairs and block size must be at least 1"));
    }
    let blocks_per_pair = total_bytes.div_ceil(block_bytes as u64 * pairs as u64).max(1);
    let distinct = (working_set_bytes / block_bytes).max(1);
    // Every thread allocates its blocks, then all wait at `ready` (the main thread reads the
    // process's CPU time there, so the setup is not counted) and start together.
    let ready = Arc::new(Barrier::new(2 * pairs + 1));
    let start = Arc::new(Barrier::new(2 * pairs + 1));
    let mut senders = Vec::new();
    let mut receivers = Vec::new();
    for _ in 0..pairs {
        let (mut sender, mut receiver) = connected_pair(unix)?;
        let (set, go) = (ready.clone(), start.clone());
        senders.push(std::thread::spawn(move || -> io::Result<f64> {
            let blocks: Vec<Vec<u8>> = (0..distinct).map(|_| vec![0x5au8; block_bytes]).collect();
            set.wait();
            go.wait();
            let before = thread_cpu_seconds();
            for i in 0..blocks_per_pair as usize {
                sender.write_all(&blocks[i % distinct])?;
            }
            Ok(thread_cpu_seconds() - before)
        }));
        let (set, go) = (ready.clone(), start.clone());
        receivers.push(std::thread::spawn(move || -> io::Result<f64> {
            let mut buffers: Vec<Vec<u8>> = (0..distinct).map(|_| vec![1u8; block_bytes]).collect();
            let mut left = blocks_per_pair * block_bytes as u64;
            set.wait();
            go.wait();
            let before = thread_cpu_seconds();
            let (mut block, mut filled) = (0, 0);
            while left > 0 {
                let want = (left.min((block_bytes - filled) as u64)) as usize;
                let n = receiver.read(&mut buffers[block][filled..filled + want])?;
                if n == 0 {
                    return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "sender closed early"));
                }
                left -= n as u64;
                filled += n;
                if filled == block_bytes {
                    (block, filled) = ((block + 1) % distinct, 0);
                }
            }
            Ok(thread_cpu_seconds() - before)
        }));
    }
    ready.wait();
    let cpu_before = process_cpu_seconds();
    start.wait();
    let started = Instant::now();
    let join = |threads: Vec<std::thread::JoinHandle<io::Result<f64>>>| -> io::Result<f64> {
        let mut total = 0.0;
        for thread in threads {
            total += thread.join().map_err(|_| io::Error::other("a probe thread panicked"))??;
        }
        Ok(total)
    };
    let sender_cpu_seconds = join(senders)?;
    let receiver_cpu_seconds = join(receivers)?;
    Ok(Ceiling {
        seconds: started.elapsed().as_secs_f64(),
        bytes: blocks_per_pair * block_bytes as u64 * pairs as u64,
        cpu_seconds: process_cpu_seconds() - cpu_before,
        sender_cpu_seconds,
        receiver_cpu_seconds,
    })
}

/// Raw local stream throughput (no Redis): `{"seconds", "bytes", "gb_per_s", "cpu_seconds",
/// "sender_cpu_seconds", "receiver_cpu_seconds"}`. Each side cycles through `working_set_bytes`
/// of distinct blocks (0: one block, copied from and to cache).
#[pyfunction]
#[pyo3(signature = (pairs, block_bytes, total_bytes, unix=false, working_set_bytes=0))]
pub fn loopback_ceiling<'py>(
    py: Python<'py>,
    pairs: usize,
    block_bytes: usize,
    total_bytes: u64,
    unix: bool,
    working_set_bytes: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let result = py
        .detach(|| measure(pairs, block_bytes, total_bytes, unix, working_set_bytes))
        .map_err(|e| errors::invalid_input(format!("loopback ceiling probe failed: {e}")))?;
    let out = PyDict::new(py);
    out.set_item("seconds", result.seconds)?;
    out.set_item("bytes", result.bytes)?;
    out.set_item("gb_per_s", result.gb_per_s())?;
    out.set_item("cpu_seconds", result.cpu_seconds)?;
    out.set_item("sender_cpu_seconds", result.sender_cpu_seconds)?;
    out.set_item("receiver_cpu_seconds", result.receiver_cpu_seconds)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_every_byte_over_tcp_and_unix() {
        for unix in [false, true] {
            for working_set in [0, 256 * 1024] {
                let result = measure(2, 64 * 1024, 4 << 20, unix, working_set).unwrap();
                assert_eq!(result.bytes, 4 << 20);
                assert!(result.seconds > 0.0 && result.gb_per_s() > 0.0);
                assert!(result.sender_cpu_seconds > 0.0 && result.receiver_cpu_seconds > 0.0);
            }
        }
        assert!(measure(0, 1, 1, false, 0).is_err());
    }
}
