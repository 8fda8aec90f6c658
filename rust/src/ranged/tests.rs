//! Ranged reads against a model server: each test queues GETs, lets the model answer every
//! request the reads send (in each connection's order, as one server thread would), and
//! changes the value between phases where a writer could.

use super::*;
use crate::memory::RawBuf;
use crate::op::Op;
use crate::resp::{Decoder, Reply};
use std::time::Duration;

const PIECE: usize = 1000;

/// A server holding one key, with WATCH as Redis has it: a write after a connection's WATCH
/// makes that connection's EXEC fail.
struct Model {
    value: Option<Vec<u8>>,
    /// Per connection: watching, and whether the key was written since.
    watch: HashMap<usize, bool>,
    /// Every command the model ran, as `conn: NAME args`.
    log: Vec<String>,
}

impl Model {
    fn write(&mut self, value: Option<Vec<u8>>) {
        self.value = value;
        for dirty in self.watch.values_mut() {
            *dirty = true;
        }
    }

    fn run(&mut self, conn: usize, request: &Request) -> Outcome {
        let args = command_args(&request.header);
        let name = String::from_utf8_lossy(&args[0]).to_string();
        self.log.push(format!("{conn}: {name}"));
        let len = self.value.as_ref().map_or(0, Vec::len);
        match name.as_str() {
            "WATCH" => {
                self.watch.insert(conn, false);
                Outcome::Reply(Reply::Simple(b"OK".to_vec()))
            }
            "UNWATCH" => {
                self.watch.remove(&conn);
                Outcome::Reply(Reply::Simple(b"OK".to_vec()))
            }
            "STRLEN" => Outcome::Reply(Reply::Integer(len as i64)),
            "MULTI" => {
                assert!(request.leaves_with_next, "a MULTI leaves its connection only with its EXEC");
                Outcome::Reply(Reply::Simple(b"OK".to_vec()))
            }
            "EXEC" => match self.watch.remove(&conn) {
                Some(true) => Outcome::Reply(Reply::NilArray),
                _ => Outcome::Reply(Reply::Array(Vec::new())),
            },
            "GETRANGE" => {
                let number = |i: usize| String::from_utf8_lossy(&args[i]).parse::<usize>().unwrap();
                let (start, end) = (number(2), number(3));
                let value = self.value.clone().unwrap_or_default();
                let bytes = &value[start.min(len)..(end + 1).min(len)];
                deliver(request, bytes)
            }
            "GET" => match self.value.clone() {
                None => Outcome::Miss,
                Some(value) => deliver(request, &value),
            },
            other => panic!("the model does not know {other}"),
        }
    }
}

/// What the connection does with a bulk reply: received into the destination when it fits
/// (exactly, for an exact-length request).
fn deliver(request: &Request, bytes: &[u8]) -> Outcome {
    let dest = request.destination().unwrap();
    let fits = bytes.len() == dest.len() || (bytes.len() < dest.len() && !request.exact_length);
    if fits {
        dest.write_at(0, bytes);
        Outcome::Hit(bytes.len())
    } else if request.exact_length {
        Outcome::Miss
    } else {
        Outcome::Failed(Error::value_too_large(bytes.len() as u64, dest.len() as u64))
    }
}

fn command_args(header: &[u8]) -> Vec<Vec<u8>> {
    let mut decoder = Decoder::default();
    match decoder.decode(header).unwrap().1 {
        Some(Reply::Array(items)) => items
            .into_iter()
            .map(|item| match item {
                Reply::Bulk(bytes) => bytes,
                other => panic!("{other:?}"),
            })
            .collect(),
        other => panic!("not a command: {other:?}"),
    }
}

/// Connections as a worker has them: `conns_of[node]`, each with its queue of requests.
struct FakeConns {
    conns_of: Vec<Vec<usize>>,
    queues: Vec<VecDeque<(Request, bool)>>,
    route_to: usize,
}

impl FakeConns {
    fn new(conns_of: Vec<Vec<usize>>) -> FakeConns {
        let count = conns_of.iter().flatten().count();
        FakeConns { conns_of, queues: (0..count).map(|_| VecDeque::new()).collect(), route_to: 0 }
    }
}

impl Conns for FakeConns {
    fn conns_of(&self, node: usize) -> &[usize] {
        &self.conns_of[node]
    }

    fn load(&self, conn: usize) -> usize {
        self.queues[conn].len()
    }

    fn push(&mut self, conn: usize, request: Request, asking: bool) {
        self.queues[conn].push_back((request, asking));
    }

    fn route(&mut self, _key: &[u8]) -> Result<usize, Error> {
        Ok(self.route_to)
    }

    fn read_shape(&self, _node: usize) -> ReadShape {
        ReadShape::Pieces(PIECE)
    }
}

struct Rig {
    reads: RangedReads,
    conns: FakeConns,
    model: Model,
    out: Vec<Completion>,
    now: Instant,
    pages: Vec<Box<[u8]>>,
}

impl Rig {
    fn new(value: Option<Vec<u8>>, conns_of: Vec<Vec<usize>>) -> Rig {
        Rig {
            reads: RangedReads::new(),
            conns: FakeConns::new(conns_of),
            model: Model { value, watch: HashMap::new(), log: Vec::new() },
            out: Vec::new(),
            now: Instant::now(),
            pages: Vec::new(),
        }
    }

    /// Starts a GET of up to `capacity` bytes (exactly that many with `exact`); returns the
    /// tag and the page's index.
    fn get(&mut self, tag: u64, capacity: usize, exact: bool) -> usize {
        let mut page = vec![0x5au8; capacity].into_boxed_slice();
        // SAFETY: the page lives in the rig until the test ends; only the reads write it.
        let dest = unsafe { RawBuf::new(page.as_mut_ptr(), page.len()) };
        self.pages.push(page);
        let request =
            Request::new(Op::Get, b"key", Some(dest), tag, self.now + Duration::from_secs(5)).with_exact_length(exact);
        assert!(RangedReads::takes(&request, self.conns.read_shape(0)));
        self.reads.start(request, b"key", 0, &mut self.conns);
        self.pages.len() - 1
    }

    /// Runs one request from every connection that has one, in connection order, and hands
    /// the answers back to the reads. False when nothing was queued.
    fn step(&mut self, between: &mut impl FnMut(&mut Model, &str)) -> bool {
        let mut ran = false;
        for conn in 0..self.conns.queues.len() {
            let Some((request, _asking)) = self.conns.queues[conn].pop_front() else { continue };
            ran = true;
            let name = String::from_utf8_lossy(&command_args(&request.header)[0]).to_string();
            between(&mut self.model, &name);
            let outcome = self.model.run(conn, &request);
            self.out.push(request.completion(outcome));
            self.reads.route_completions(&mut self.out, &mut self.conns, self.now);
        }
        ran
    }

    fn run(&mut self, mut between: impl FnMut(&mut Model, &str)) {
        while self.step(&mut between) {}
        assert!(self.reads.is_empty(), "every read ended");
    }

    /// Runs the reads, `value` replacing the key's just before the `nth` piece (from 1) reaches
    /// the model.
    fn run_writing_before_piece(&mut self, nth: usize, value: Option<Vec<u8>>) {
        let mut pieces = 0;
        self.run(move |model, name| {
            if name == "GETRANGE" {
                pieces += 1;
                if pieces == nth {
                    model.write(value.clone());
                }
            }
        });
    }

    fn outcome(&mut self, tag: u64) -> Outcome {
        let at = self.out.iter().position(|c| c.tag == tag).unwrap_or_else(|| panic!("no completion for {tag}"));
        self.out.remove(at).outcome
    }
}

fn value(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

#[test]
fn a_value_is_probed_read_in_pieces_and_verified() {
    let stored = value(2500, 1);
    let mut rig = Rig::new(Some(stored.clone()), vec![vec![0]]);
    let page = rig.get(7, 4096, false);
    rig.run(|_, _| {});
    assert_eq!(rig.outcome(7), Outcome::Hit(2500));
    assert_eq!(&rig.pages[page][..2500], &stored[..]);
    assert!(rig.pages[page][2500..].iter().all(|b| *b == 0x5a));
    let log: Vec<&str> = rig.model.log.iter().map(String::as_str).collect();
    assert_eq!(
        log,
        ["0: WATCH", "0: STRLEN", "0: GETRANGE", "0: GETRANGE", "0: GETRANGE", "0: MULTI", "0: EXEC"],
        "the probe, three pieces (1000 + 1000 + 500), the check"
    );
}

#[test]
fn pieces_spread_over_the_server_s_connections() {
    let stored = value(4000, 2);
    let mut rig = Rig::new(Some(stored.clone()), vec![vec![0, 1]]);
    let page = rig.get(7, 4000, true);
    rig.run(|_, _| {});
    assert_eq!(rig.outcome(7), Outcome::Hit(4000));
    assert_eq!(&rig.pages[page][..], &stored[..]);
    let on = |conn: char| rig.model.log.iter().filter(|l| l.starts_with(conn) && l.ends_with("GETRANGE")).count();
    assert_eq!((on('0'), on('1')), (2, 2), "{:?}", rig.model.log);
}

#[test]
fn a_value_of_another_length_or_too_large_or_missing_leaves_the_page_untouched() {
    // Exact-length GET, another length: a miss.
    let mut rig = Rig::new(Some(value(3000, 3)), vec![vec![0]]);
    let page = rig.get(1, 4000, true);
    rig.run(|_, _| {});
    assert_eq!(rig.outcome(1), Outcome::Miss);
    assert!(rig.pages[page].iter().all(|b| *b == 0x5a));
    assert!(!rig.model.log.iter().any(|l| l.ends_with("GETRANGE")), "no piece is read: {:?}", rig.model.log);
    assert!(rig.model.log.last().unwrap().ends_with("UNWATCH"));

    // Larger than the page: refused.
    let mut rig = Rig::new(Some(value(5000, 3)), vec![vec![0]]);
    let page = rig.get(2, 4000, false);
    rig.run(|_, _| {});
    match rig.outcome(2) {
        Outcome::Failed(err) => assert_eq!(err.kind(), ErrorKind::ValueTooLarge),
        other => panic!("{other:?}"),
    }
    assert!(rig.pages[page].iter().all(|b| *b == 0x5a));

    // No such key: STRLEN says 0, and GET tells a missing key from an empty one.
    let mut rig = Rig::new(None, vec![vec![0]]);
    let page = rig.get(3, 4000, false);
    rig.run(|_, _| {});
    assert_eq!(rig.outcome(3), Outcome::Miss);
    assert!(rig.pages[page].iter().all(|b| *b == 0x5a));
}

#[test]
fn a_value_that_fits_one_piece_is_one_plain_get() {
    let stored = value(800, 4);
    let mut rig = Rig::new(Some(stored.clone()), vec![vec![0]]);
    let page = rig.get(4, 4000, false);
    rig.run(|_, _| {});
    assert_eq!(rig.outcome(4), Outcome::Hit(800));
    assert_eq!(&rig.pages[page][..800], &stored[..]);
    let log: Vec<&str> = rig.model.log.iter().map(String::as_str).collect();
    assert_eq!(log, ["0: WATCH", "0: STRLEN", "0: GET", "0: UNWATCH"]);
}

#[test]
fn a_value_replaced_between_pieces_is_read_again_whole() {
    let (old, new) = (value(2500, 5), value(2500, 6));
    let mut rig = Rig::new(Some(old), vec![vec![0]]);
    let page = rig.get(5, 2500, true);
    rig.run_writing_before_piece(2, Some(new.clone()));
    assert_eq!(rig.outcome(5), Outcome::Hit(2500));
    assert_eq!(&rig.pages[page][..], &new[..], "the page holds one version, the new one");
    assert_eq!(rig.model.log.iter().filter(|l| l.ends_with("WATCH") && !l.ends_with("UNWATCH")).count(), 2);
}

#[test]
fn a_value_that_keeps_changing_is_a_partial_read_never_a_mixed_hit() {
    let mut rig = Rig::new(Some(value(2500, 7)), vec![vec![0]]);
    rig.get(6, 2500, true);
    let mut version = 0u8;
    rig.run(move |model, name| {
        if name == "GETRANGE" {
            version = version.wrapping_add(1);
            model.write(Some(value(2500, 100 + version)));
        }
    });
    match rig.outcome(6) {
        Outcome::Failed(err) => {
            assert_eq!(err.kind(), ErrorKind::PartialRead);
            assert!(err.message().contains("replaced or deleted while it was read in pieces, 3 times"), "{err}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_value_deleted_mid_read_is_a_partial_read_not_a_miss() {
    let mut rig = Rig::new(Some(value(2500, 8)), vec![vec![0]]);
    rig.get(8, 4000, false);
    rig.run_writing_before_piece(1, None);
    match rig.outcome(8) {
        Outcome::Failed(err) => assert_eq!(err.kind(), ErrorKind::PartialRead, "{err}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_value_replaced_by_a_shorter_one_mid_read_is_a_partial_read_never_a_hit_over_old_bytes() {
    // Pieces of the 2500-byte value went into the page; the retry finds a shorter one, in
    // pieces (1500) or in one GET (800): past its end the page would hold the old value.
    for shorter in [1500, 800] {
        let mut rig = Rig::new(Some(value(2500, 12)), vec![vec![0]]);
        rig.get(14, 4000, false);
        rig.run_writing_before_piece(2, Some(value(shorter, 13)));
        match rig.outcome(14) {
            Outcome::Failed(err) => {
                assert_eq!(err.kind(), ErrorKind::PartialRead, "{err}");
                let says = format!("replaced by a shorter one ({shorter} bytes) while it was read in pieces");
                assert!(err.message().contains(&says), "{err}");
            }
            other => panic!("{shorter} bytes: {other:?}"),
        }
        let after_retry = rig.model.log.iter().rposition(|l| l.ends_with("STRLEN")).unwrap();
        assert!(
            rig.model.log[after_retry..].iter().all(|l| !l.ends_with("GET") && !l.ends_with("GETRANGE")),
            "nothing more is read once the value is known to be shorter: {:?}",
            rig.model.log
        );
    }
    // A longer one is a hit, and the page past its end is as it was.
    let longer = value(3000, 14);
    let mut rig = Rig::new(Some(value(2500, 12)), vec![vec![0]]);
    let page = rig.get(15, 4000, false);
    rig.run_writing_before_piece(2, Some(longer.clone()));
    assert_eq!(rig.outcome(15), Outcome::Hit(3000));
    assert_eq!(&rig.pages[page][..3000], &longer[..]);
    assert!(rig.pages[page][3000..].iter().all(|b| *b == 0x5a));
}

#[test]
fn reads_sharing_a_home_connection_take_turns_at_watching() {
    let stored = value(2000, 9);
    let mut rig = Rig::new(Some(stored.clone()), vec![vec![0]]);
    let first = rig.get(10, 2000, true);
    let second = rig.get(11, 2000, true);
    rig.run(|_, _| {});
    assert_eq!((rig.outcome(10), rig.outcome(11)), (Outcome::Hit(2000), Outcome::Hit(2000)));
    assert_eq!(&rig.pages[first][..], &stored[..]);
    assert_eq!(&rig.pages[second][..], &stored[..]);
    let log: Vec<&str> = rig.model.log.iter().map(String::as_str).collect();
    let exec = log.iter().position(|l| *l == "0: EXEC").unwrap();
    let second_watch = log.iter().rposition(|l| *l == "0: WATCH").unwrap();
    assert!(second_watch > exec, "the second WATCH goes after the first EXEC: {log:?}");
}

#[test]
fn a_dropped_home_connection_starts_the_read_over() {
    let stored = value(2500, 10);
    let mut rig = Rig::new(Some(stored.clone()), vec![vec![0]]);
    let page = rig.get(12, 2500, true);
    // The home connection drops with the probe on the wire: its bound commands fail.
    let (watch, _) = rig.conns.queues[0].pop_front().unwrap();
    let (strlen, _) = rig.conns.queues[0].pop_front().unwrap();
    let lost = Error::connection_lost(&"10.0.0.5:6379", "reset");
    rig.out.push(watch.completion(Outcome::Failed(lost.clone())));
    rig.out.push(strlen.completion(Outcome::Failed(lost)));
    rig.reads.route_completions(&mut rig.out, &mut rig.conns, rig.now);
    rig.run(|_, _| {});
    assert_eq!(rig.outcome(12), Outcome::Hit(2500));
    assert_eq!(&rig.pages[page][..], &stored[..]);
}

#[test]
fn a_moved_key_is_read_again_where_it_lives_now() {
    let stored = value(2500, 11);
    let mut rig = Rig::new(Some(stored.clone()), vec![vec![0], vec![1]]);
    let page = rig.get(13, 2500, true);
    let (watch, _) = rig.conns.queues[0].pop_front().unwrap();
    let (strlen, _) = rig.conns.queues[0].pop_front().unwrap();
    rig.conns.route_to = 1;
    let moved = crate::cluster::Redirect {
        kind: crate::cluster::RedirectKind::Moved,
        slot: 12539,
        node: crate::cluster::NodeAddr::new("10.0.0.6".to_string(), 7001),
    };
    rig.reads.on_handoff(watch, Handoff::Redirect(moved.clone()), None, &mut rig.conns, rig.now, &mut rig.out);
    rig.reads.on_handoff(strlen, Handoff::Redirect(moved), None, &mut rig.conns, rig.now, &mut rig.out);
    rig.run(|_, _| {});
    assert_eq!(rig.outcome(13), Outcome::Hit(2500));
    assert_eq!(&rig.pages[page][..], &stored[..]);
    let log: Vec<&str> = rig.model.log.iter().map(String::as_str).collect();
    assert_eq!(log[0], "0: UNWATCH", "the old node's WATCH is let go");
    assert!(log[1..].iter().all(|l| l.starts_with('1')), "the read itself on the new node: {log:?}");
}

/// A read begun on a replica (node 0) whose piece fails there (a connection cut in the middle
/// of it; `-LOADING` and `-MASTERDOWN` come back the same way) starts over where the map says
/// the key lives, its primary (node 1), not on the replica again; each attempt reads every
/// piece from the node that answered its `WATCH`.
#[test]
fn a_read_a_replica_failed_starts_over_on_the_primary_with_every_piece_there() {
    let stored = value(4500, 12);
    let mut rig = Rig::new(Some(stored.clone()), vec![vec![0], vec![1]]);
    let page = rig.get(14, 4500, true);
    rig.conns.route_to = 1;
    let mut cut = false;
    while let Some((conn, request)) = (0..2).find_map(|c| rig.conns.queues[c].pop_front().map(|(r, _)| (c, r))) {
        let outcome = match &command_args(&request.header)[0][..] {
            b"GETRANGE" if !cut => {
                cut = true;
                Outcome::Failed(Error::connection_lost(&"10.0.0.5:6379", "reset"))
            }
            _ => rig.model.run(conn, &request),
        };
        rig.out.push(request.completion(outcome));
        rig.reads.route_completions(&mut rig.out, &mut rig.conns, rig.now);
    }
    assert!(rig.reads.is_empty() && cut);
    assert_eq!(rig.outcome(14), Outcome::Hit(4500));
    assert_eq!(&rig.pages[page][..], &stored[..]);
    let log: Vec<&str> = rig.model.log.iter().map(String::as_str).collect();
    let ended = log.iter().position(|l| *l == "0: UNWATCH").expect("the replica's WATCH is let go");
    assert!(log[..ended].iter().all(|l| l.starts_with('0')), "the first attempt on the replica alone: {log:?}");
    assert!(log[ended + 1..].iter().all(|l| l.starts_with('1')), "the second on the primary alone: {log:?}");
    assert_eq!(log[ended + 1..].iter().filter(|l| l.ends_with("GETRANGE")).count(), 5, "{log:?}");
}

#[test]
fn internal_tags_carry_session_attempt_and_part() {
    let tag = internal_tag(0x7fff_fffe, 2, Part::Exec);
    assert_eq!(parse_tag(tag), Some((0x7fff_fffe, 2, Part::Exec)));
    assert_eq!(parse_tag(tag & !INTERNAL_TAG), None, "a tag without the bit is a caller's");
}
