//! A bridge client written against the wire format alone, not through the client library: it
//! does what any process that can connect to the socket can do, hostile or not.

use lmcache_resp_core::arena::Arena;
use lmcache_resp_core::bridge::channel;
use lmcache_resp_core::bridge::signal::SignalEnd;
use lmcache_resp_core::bridge::wire::{Control, KeyEntry, PROTOCOL_VERSION, Submission, decode_completion_record};
use lmcache_resp_core::conn::Outcome;
use lmcache_resp_core::op::Op;
use lmcache_resp_core::ring::{Consumer, Producer, PushError};
use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One attached raw client: its control socket, its rings, its signal end and its region.
pub struct RawClient {
    pub control: UnixStream,
    pub submit: Producer,
    pub collect: Consumer,
    pub signal: SignalEnd,
    pub region: Arc<Arena>,
    /// Outcomes of batches not yet complete, by batch id (records may come in pieces).
    partial: HashMap<u64, Vec<Outcome>>,
    record: Vec<u8>,
}

impl RawClient {
    /// Attaches with the bridge's default ring size; the refusal's reason as the error.
    pub fn attach(path: &Path) -> Result<RawClient, String> {
        RawClient::attach_asking(path, 0)
    }

    /// Attaches asking for a submission ring of `ring_bytes` (0: the bridge's default).
    pub fn attach_asking(path: &Path, ring_bytes: u32) -> Result<RawClient, String> {
        let control = UnixStream::connect(path).map_err(|e| format!("connect: {e}"))?;
        // The pid a client claims is whatever it likes: the bridge must ask the kernel.
        let hello = Control::Hello { version: PROTOCOL_VERSION, pid: 1, submission_ring_bytes: ring_bytes };
        // A refusal may close the socket before the hello is written: read it all the same.
        let sent = channel::send(&control, &hello, &[]);
        let answer = channel::receive(&control).map_err(|e| e.to_string());
        let (welcome, fds) = match (sent, answer) {
            (_, Ok(Some(answer))) => answer,
            (Err(err), _) => return Err(format!("hello: {err}")),
            (Ok(()), answer) => return Err(answer.map_or_else(|e| e, |_| "closed".into())),
        };
        match welcome {
            Control::Welcome(_) => {}
            Control::Refused { reason, .. } => return Err(reason),
            other => return Err(format!("answered {other:?}")),
        }
        let [region, signal]: [OwnedFd; 2] = fds.try_into().map_err(|_| "not two fds".to_string())?;
        let region = Arc::new(Arena::attach(region).map_err(|e| e.to_string())?);
        let (sub, sub_len, comp, comp_len) = region.ring_region(0);
        let owner: Arc<dyn std::any::Any + Send + Sync> = region.clone();
        // SAFETY: the bridge initialized both rings before its welcome; this client is the
        // producer of the first and the consumer of the second, as a client is.
        let (submit, collect) = unsafe {
            (Producer::attach(sub, sub_len, owner.clone()).unwrap(), Consumer::attach(comp, comp_len, owner).unwrap())
        };
        Ok(RawClient {
            control,
            submit,
            collect,
            signal: SignalEnd::from_owned(signal),
            region,
            partial: HashMap::new(),
            record: Vec::new(),
        })
    }

    /// One control request and its answer.
    pub fn call(&self, request: &Control) -> Control {
        channel::send(&self.control, request, &[]).expect("send a control request");
        channel::receive(&self.control).expect("a control answer").expect("the bridge answered").0
    }

    /// `count` pages of this client's region, as (index, generation).
    pub fn allocate(&self, count: u32) -> Vec<(u32, u32)> {
        match self.call(&Control::Allocate { count }) {
            Control::Pages { pages } => pages,
            other => panic!("allocate {count}: {other:?}"),
        }
    }

    /// The bytes of page `index` of this client's region.
    pub fn page(&mut self, index: u32) -> &mut [u8] {
        let ptr = self.region.page_ptr(index as usize);
        // SAFETY: the page lies inside this client's mapping of its region, `page_size` long;
        // tests touch a page only while no batch of theirs uses it, so nothing else writes it.
        unsafe { std::slice::from_raw_parts_mut(ptr, self.region.page_size()) }
    }

    /// Pushes one batch without waiting; false if the ring has no room for it now.
    pub fn try_submit(&mut self, submission: &Submission<'_>) -> bool {
        let mut record = Vec::new();
        submission.encode(&mut record);
        match self.submit.try_push(&[&record]) {
            Ok(()) => {
                self.submit.publish();
                self.signal.signal();
                true
            }
            Err(PushError::Full) => false,
            Err(err) => panic!("push: {err:?}"),
        }
    }

    /// Every batch that completed since the last call, as (batch id, outcomes in key order).
    pub fn completed(&mut self) -> Vec<(u64, Vec<Outcome>)> {
        let mut done = Vec::new();
        let mut took = false;
        while self.collect.try_pop_into(&mut self.record).unwrap() {
            took = true;
            let record = decode_completion_record(&self.record).unwrap();
            let outcomes = self.partial.entry(record.batch).or_default();
            assert_eq!(record.start as usize, outcomes.len(), "the records of batch {} in order", record.batch);
            outcomes.extend(record.outcomes);
            if outcomes.len() == record.total as usize {
                done.push((record.batch, self.partial.remove(&record.batch).unwrap()));
            }
        }
        if took {
            self.collect.release();
        }
        let _ = self.signal.drain();
        done
    }

    /// Submits one batch and waits (up to `timeout`) for its outcomes.
    pub fn run_within(&mut self, submission: &Submission<'_>, timeout: Duration) -> Vec<Outcome> {
        let deadline = Instant::now() + timeout;
        while !self.try_submit(submission) {
            assert!(Instant::now() < deadline, "no room in the submission ring");
            std::thread::sleep(Duration::from_millis(1));
        }
        loop {
            if let Some((_, outcomes)) = self.completed().into_iter().find(|(batch, _)| *batch == submission.batch) {
                return outcomes;
            }
            assert!(Instant::now() < deadline, "batch {} did not complete within {timeout:?}", submission.batch);
            self.wait_signal(Duration::from_millis(5));
        }
    }

    /// Submits one batch and waits up to 10 s for its outcomes.
    pub fn run(&mut self, submission: &Submission<'_>) -> Vec<Outcome> {
        self.run_within(submission, Duration::from_secs(10))
    }

    /// Waits until the bridge signals (or `timeout` passes).
    pub fn wait_signal(&self, timeout: Duration) {
        let mut fds = [rustix::event::PollFd::new(&self.signal, rustix::event::PollFlags::IN)];
        let timeout = rustix::event::Timespec { tv_sec: 0, tv_nsec: timeout.as_nanos().min(999_999_999) as i64 };
        let _ = rustix::event::poll(&mut fds, Some(&timeout));
    }

    /// Whether the bridge has closed this client's control socket (waiting up to `timeout`),
    /// with the last message it sent first, if any.
    pub fn dropped_within(&self, timeout: Duration) -> Option<Option<Control>> {
        let deadline = Instant::now() + timeout;
        self.control.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let mut last = None;
        while Instant::now() < deadline {
            match channel::receive(&self.control) {
                Ok(Some((message, _))) => last = Some(message),
                Ok(None) => return Some(last),
                Err(err) if err.kind() == lmcache_resp_core::ErrorKind::Timeout => {}
                Err(_) => return Some(last),
            }
        }
        None
    }
}

impl AsFd for RawClient {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.control.as_fd()
    }
}

/// A batch of keys only (EXISTS, DEL).
pub fn keys_batch<'a>(batch: u64, op: Op, keys: &'a [Vec<u8>]) -> Submission<'a> {
    let entries = keys.iter().map(|key| KeyEntry { key, page: u32::MAX, generation: 0, len: 0 }).collect();
    Submission { batch, op, exact_length: false, keys: entries }
}

/// A batch naming `pages` (index, generation), `len` bytes each.
pub fn paged_batch<'a>(batch: u64, op: Op, keys: &'a [Vec<u8>], pages: &[(u32, u32)], len: u64) -> Submission<'a> {
    let entries =
        keys.iter().zip(pages).map(|(key, &(page, generation))| KeyEntry { key, page, generation, len }).collect();
    Submission { batch, op, exact_length: false, keys: entries }
}

/// A bridge in this process on a socket in a temp dir.
pub struct TestBridge {
    pub path: std::path::PathBuf,
    pub server: lmcache_resp_core::bridge::BridgeServer,
    _dir: tempfile::TempDir,
}

impl TestBridge {
    /// A bridge for `settings` with `num_pages` pages of `page_size` bytes in all, within `limits`.
    pub fn start(
        settings: lmcache_resp_core::settings::Settings,
        limits: lmcache_resp_core::bridge::BridgeLimits,
        page_size: usize,
        num_pages: usize,
    ) -> TestBridge {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bridge.sock");
        let mut config = lmcache_resp_core::engine::EngineConfig::new(settings);
        config.page_size = page_size;
        config.num_pages = num_pages;
        let server = lmcache_resp_core::bridge::BridgeServer::start(config, &path, limits).unwrap();
        TestBridge { path, server, _dir: dir }
    }

    /// An honest client, through the client library.
    pub fn attach(&self) -> lmcache_resp_core::front::BridgedPageStore {
        lmcache_resp_core::front::BridgedPageStore::attach(&self.path, Duration::from_secs(5)).unwrap()
    }

    /// Waits (up to 5 s) until `n` clients are attached.
    pub fn await_clients(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.server.clients() != n {
            assert!(Instant::now() < deadline, "{} clients attached, not {n}", self.server.clients());
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
