//! The machine's own limit for moving blocks through a local stream socket, with no Redis in
//! the path: the ceiling the benchmark reports its results against.
//!
//! `pairs` sender/receiver thread pairs, one connection each. Senders write one preallocated
//! block again and again; receivers read into one preallocated block-sized buffer. Measured
//! from the moment all threads are released until the last byte arrives.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Barrier};
use std::time::Instant;

/// What one [`loopback_ceiling`] run measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ceiling {
    /// Wall-clock seconds from the threads' release until every receiver had all its bytes.
    pub seconds: f64,
    /// Bytes moved, over all pairs.
    pub bytes: u64,
    /// User plus system CPU time of the whole process over the measurement.
    pub cpu_seconds: f64,
}

impl Ceiling {
    /// Decimal GB (1e9 bytes) per second.
    pub fn gb_per_s(&self) -> f64 {
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

fn process_cpu_seconds() -> f64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    now.tv_sec as f64 + now.tv_nsec as f64 * 1e-9
}

/// Moves about `total_bytes` (rounded up to whole blocks per pair) and times it.
pub fn loopback_ceiling(pairs: usize, block_bytes: usize, total_bytes: u64, unix: bool) -> io::Result<Ceiling> {
    if pairs == 0 || block_bytes == 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "pairs and block size must be at least 1"));
    }
    let blocks_per_pair = total_bytes.div_ceil(block_bytes as u64 * pairs as u64).max(1);
    let start = Arc::new(Barrier::new(2 * pairs + 1));
    let mut threads = Vec::new();
    for _ in 0..pairs {
        let (mut sender, mut receiver) = connected_pair(unix)?;
        let go = start.clone();
        threads.push(std::thread::spawn(move || -> io::Result<()> {
            let block = vec![0x5au8; block_bytes];
            go.wait();
            for _ in 0..blocks_per_pair {
                sender.write_all(&block)?;
            }
            Ok(())
        }));
        let go = start.clone();
        threads.push(std::thread::spawn(move || -> io::Result<()> {
            let mut buffer = vec![0u8; block_bytes];
            let mut left = blocks_per_pair * block_bytes as u64;
            go.wait();
            while left > 0 {
                let want = (left.min(block_bytes as u64)) as usize;
                let n = receiver.read(&mut buffer[..want])?;
                if n == 0 {
                    return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "sender closed early"));
                }
                left -= n as u64;
            }
            Ok(())
        }));
    }
    let cpu_before = process_cpu_seconds();
    start.wait();
    let started = Instant::now();
    for thread in threads {
        thread.join().map_err(|_| io::Error::other("a probe thread panicked"))??;
    }
    Ok(Ceiling {
        seconds: started.elapsed().as_secs_f64(),
        bytes: blocks_per_pair * block_bytes as u64 * pairs as u64,
        cpu_seconds: process_cpu_seconds() - cpu_before,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_every_byte_over_tcp_and_unix() {
        for unix in [false, true] {
            let result = loopback_ceiling(2, 64 * 1024, 4 << 20, unix).unwrap();
            assert_eq!(result.bytes, 4 << 20);
            assert!(result.seconds > 0.0 && result.gb_per_s() > 0.0);
        }
        assert!(loopback_ceiling(0, 1, 1, false).is_err());
    }
}
