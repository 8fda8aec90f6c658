//! Which client's keys go into the engine next, and how many: the relay's fairness, as a plain
//! type that takes numbers and returns decisions (no sockets, no engine, no clock of its own).
//!
//! - **Round-robin.** Each turn starts one client later, and every client sends at most one
//!   slice per round; rounds repeat until no one can send more.
//! - **Shares.** A client has at most its share in the engine at once, in value bytes and in
//!   keys. A slice is at most a quarter of the share (the share stays full while slices
//!   complete one by one, so a client alone keeps the server busy), so one client's flood adds
//!   at most one share of work ahead of another client's small batch.
//! - **Backlog.** A client whose completions wait past its outbox bound (it does not read them)
//!   gets no room: its batches wait in its own ring, not in the bridge's memory.
//! - **The engine's rings.** All clients together have at most the ring budget of descriptor
//!   bytes in flight (half the engine's rings: a slice's keys may all land in one worker's).
//!
//! A slice always carries at least one key when there is room at all, so a key larger than a
//! slice (a 16 MiB value against a 8 MiB slice) goes alone rather than never.
//!
//! The express lane (a small batch sent on a connection of its own, not behind a flood's
//! values) is the engine's; this decides only what enters it.

/// One client's share and backlog bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Share {
    /// Value bytes in the engine at once.
    pub(super) bytes: usize,
    /// Keys in the engine at once.
    pub(super) keys: usize,
    /// Completion bytes waiting for the client past which it is not served.
    pub(super) outbox_bytes: usize,
}

/// Slices a share is cut into at least.
pub(super) const SLICES: usize = 4;

/// What a client has out now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Load {
    pub(super) inflight_bytes: usize,
    pub(super) inflight_keys: usize,
    pub(super) outbox_bytes: usize,
}

/// How much one client may send as its next slice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Room {
    bytes: usize,
    keys: usize,
    ring: usize,
}

/// The keys a slice takes: how many, their value bytes and their ring bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Fit {
    pub(super) keys: usize,
    pub(super) bytes: usize,
    pub(super) ring: usize,
}

/// The relay's admission state: the shares, the ring budget and whose turn it is.
#[derive(Debug)]
pub(super) struct Admission {
    share: Share,
    ring_budget: usize,
    ring_used: usize,
    turn: usize,
}

impl Admission {
    pub(super) fn new(share: Share, ring_budget: usize) -> Admission {
        Admission { share, ring_budget, ring_used: 0, turn: 0 }
    }

    /// The order clients `0..clients` go in this turn: one later than the last turn's.
    pub(super) fn next_turn(&mut self, clients: usize) -> impl Iterator<Item = usize> + use<> {
        self.turn = if clients == 0 { 0 } else { (self.turn + 1) % clients };
        let first = self.turn;
        (0..clients).map(move |i| (first + i) % clients)
    }

    /// What a client with `load` may send now; None when nothing (its share is full, its
    /// completions wait past its bound, or the engine's rings are at their budget).
    pub(super) fn room(&self, load: &Load) -> Option<Room> {
        let share = &self.share;
        if load.outbox_bytes > share.outbox_bytes
            || load.inflight_bytes >= share.bytes
            || load.inflight_keys >= share.keys
            || self.ring_used >= self.ring_budget
        {
            return None;
        }
        Some(Room {
            bytes: (share.bytes - load.inflight_bytes).min(share.bytes / SLICES),
            keys: (share.keys - load.inflight_keys).min((share.keys / SLICES).max(1)),
            ring: self.ring_budget - self.ring_used,
        })
    }

    /// A slice of `ring` descriptor bytes went into the engine.
    pub(super) fn sent(&mut self, ring: usize) {
        self.ring_used += ring;
    }

    /// A slice of `ring` descriptor bytes came back.
    pub(super) fn finished(&mut self, ring: usize) {
        self.ring_used -= ring;
    }

    /// Descriptor bytes in the engine's rings now.
    #[cfg(test)]
    pub(super) fn ring_used(&self) -> usize {
        self.ring_used
    }
}

impl Room {
    /// The next keys that fit, from `costs` (each key's value bytes and ring bytes, in order):
    /// at least one if there is any.
    pub(super) fn fit(&self, costs: impl IntoIterator<Item = (usize, usize)>) -> Fit {
        let mut fit = Fit::default();
        for (bytes, ring) in costs {
            let fits = fit.bytes + bytes <= self.bytes && fit.keys < self.keys && fit.ring + ring <= self.ring;
            if fit.keys > 0 && !fits {
                break;
            }
            fit = Fit { keys: fit.keys + 1, bytes: fit.bytes + bytes, ring: fit.ring + ring };
        }
        fit
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::time::{Duration, Instant};

    const MIB: usize = 1 << 20;

    fn share() -> Share {
        Share { bytes: 32 * MIB, keys: 4096, outbox_bytes: 4 * MIB }
    }

    #[test]
    fn a_slice_is_at_most_a_quarter_of_the_share_and_never_more_than_what_is_left_of_it() {
        let admission = Admission::new(share(), 1 << 30);
        let room = admission.room(&Load::default()).unwrap();
        let fit = room.fit(std::iter::repeat_n((MIB, 64), 100));
        assert_eq!(fit, Fit { keys: 8, bytes: 8 * MIB, ring: 8 * 64 }, "a quarter of 32 MiB");
        let room = admission.room(&Load { inflight_bytes: 29 * MIB, ..Load::default() }).unwrap();
        assert_eq!(room.fit(std::iter::repeat_n((MIB, 64), 100)).keys, 3, "what is left of the share");
        let room = admission.room(&Load { inflight_keys: 4000, ..Load::default() }).unwrap();
        assert_eq!(room.fit(std::iter::repeat_n((0, 64), 5000)).keys, 96, "keys are a share too");
        let room = admission.room(&Load::default()).unwrap();
        assert_eq!(room.fit(std::iter::repeat_n((0, 64), 5000)).keys, 1024, "a quarter of the keys");
    }

    #[test]
    fn a_full_share_a_backlog_past_its_bound_or_full_engine_rings_give_no_room() {
        let mut admission = Admission::new(share(), 4096);
        assert!(admission.room(&Load { inflight_bytes: 32 * MIB, ..Load::default() }).is_none());
        assert!(admission.room(&Load { inflight_keys: 4096, ..Load::default() }).is_none());
        assert!(admission.room(&Load { outbox_bytes: 4 * MIB + 1, ..Load::default() }).is_none());
        assert!(admission.room(&Load { outbox_bytes: 4 * MIB, ..Load::default() }).is_some(), "at the bound");
        admission.sent(4096);
        assert!(admission.room(&Load::default()).is_none(), "the engine's rings are at their budget");
        admission.finished(96);
        let room = admission.room(&Load::default()).unwrap();
        assert_eq!(room.fit(std::iter::repeat_n((0, 64), 10)).ring, 64, "96 ring bytes left: one key of 64");
    }

    #[test]
    fn a_key_larger_than_a_slice_goes_alone_rather_than_never() {
        let admission = Admission::new(share(), 4096);
        let room = admission.room(&Load::default()).unwrap();
        assert_eq!(room.fit([(16 * MIB, 8192), (1, 64)]), Fit { keys: 1, bytes: 16 * MIB, ring: 8192 });
        assert_eq!(room.fit([]), Fit::default(), "nothing to send: an empty slice");
    }

    #[test]
    fn each_turn_starts_one_client_later() {
        let mut admission = Admission::new(share(), 4096);
        let orders: Vec<Vec<usize>> = (0..4).map(|_| admission.next_turn(3).collect()).collect();
        assert_eq!(orders, vec![vec![1, 2, 0], vec![2, 0, 1], vec![0, 1, 2], vec![1, 2, 0]]);
        assert_eq!(admission.next_turn(0).count(), 0);
    }

    /// A client in the simulation: batches of keys waiting, and what it has in the engine.
    struct Tenant {
        queue: VecDeque<(u64, VecDeque<usize>)>,
        load: Load,
        done: Vec<(u64, Instant)>,
    }

    /// The relay's loop against a model engine that moves `rate` bytes per millisecond in the
    /// order slices entered it, under a clock the test moves: every millisecond, admission
    /// rounds until no one sends, then the engine works.
    struct Sim {
        admission: Admission,
        tenants: Vec<Tenant>,
        /// (tenant, batch, keys, bytes, bytes left to move), in arrival order.
        engine: VecDeque<(usize, u64, usize, usize, usize)>,
        now: Instant,
        rate: usize,
    }

    impl Sim {
        fn new(tenants: usize, rate: usize) -> Sim {
            let tenants =
                (0..tenants).map(|_| Tenant { queue: VecDeque::new(), load: Load::default(), done: vec![] }).collect();
            Sim {
                admission: Admission::new(share(), 1 << 30),
                tenants,
                engine: VecDeque::new(),
                now: Instant::now(),
                rate,
            }
        }

        fn admit(&mut self) {
            loop {
                let mut sent = false;
                for i in self.admission.next_turn(self.tenants.len()).collect::<Vec<_>>() {
                    let tenant = &mut self.tenants[i];
                    let Some(room) = self.admission.room(&tenant.load) else { continue };
                    let Some((batch, keys)) = tenant.queue.front_mut() else { continue };
                    let fit = room.fit(keys.iter().map(|&bytes| (bytes, 64)));
                    keys.drain(..fit.keys);
                    let batch = *batch;
                    if keys.is_empty() {
                        tenant.queue.pop_front();
                    }
                    tenant.load.inflight_bytes += fit.bytes;
                    tenant.load.inflight_keys += fit.keys;
                    self.admission.sent(fit.ring);
                    self.engine.push_back((i, batch, fit.keys, fit.bytes, fit.bytes.max(1)));
                    sent = true;
                }
                if !sent {
                    return;
                }
            }
        }

        fn tick(&mut self) {
            self.admit();
            self.now += Duration::from_millis(1);
            let mut budget = self.rate;
            while let Some(front) = self.engine.front_mut() {
                let moved = front.4.min(budget);
                front.4 -= moved;
                budget -= moved;
                if front.4 > 0 {
                    break;
                }
                let (i, batch, keys, bytes, _) = self.engine.pop_front().unwrap();
                let tenant = &mut self.tenants[i];
                tenant.load.inflight_bytes -= bytes;
                tenant.load.inflight_keys -= keys;
                self.admission.finished(keys * 64);
                if !tenant.queue.iter().any(|(b, _)| *b == batch) && !self.engine.iter().any(|s| s.1 == batch) {
                    tenant.done.push((batch, self.now));
                }
            }
        }
    }

    #[test]
    fn a_neighbours_flood_adds_at_most_one_share_to_a_small_batch() {
        // 1 MiB per millisecond; the flood keeps 16 batches of 16 MiB queued (8 shares), the
        // prober sends one 4 KiB key at a time, each after the last completed.
        let rate = MIB;
        let mut sim = Sim::new(2, rate);
        for batch in 0..16 {
            sim.tenants[0].queue.push_back((batch, std::iter::repeat_n(4 * MIB, 4).collect()));
        }
        let share_time = Duration::from_millis((share().bytes / rate) as u64);
        let mut waits = Vec::new();
        for probe in 0..20u64 {
            let id = 1000 + probe;
            sim.tenants[1].queue.push_back((id, VecDeque::from([4096])));
            let sent_at = sim.now;
            while !sim.tenants[1].done.iter().any(|(batch, _)| *batch == id) {
                sim.tick();
                assert!(sim.now - sent_at < Duration::from_secs(1), "probe {probe} never completed");
            }
            waits.push(sim.now - sent_at);
            // The flood stays deep.
            let next = 100 + probe;
            sim.tenants[0].queue.push_back((next, std::iter::repeat_n(4 * MIB, 4).collect()));
        }
        let slowest = *waits.iter().max().unwrap();
        assert!(
            slowest <= share_time + Duration::from_millis(2),
            "a probe waited {slowest:?}, a share takes {share_time:?}"
        );
        assert!(sim.tenants[0].done.len() >= 2, "the flood progressed meanwhile");
        // Served in arrival order, a probe would wait for the flood's whole queue: 8 shares.
        assert!(slowest < share_time * 2);
    }

    #[test]
    fn a_client_that_does_not_read_stops_being_served_and_the_others_are_not() {
        let mut sim = Sim::new(2, MIB);
        for batch in 0..4 {
            sim.tenants[0].queue.push_back((batch, VecDeque::from([1024; 16])));
            sim.tenants[1].queue.push_back((batch, VecDeque::from([1024; 16])));
        }
        sim.tenants[0].load.outbox_bytes = 4 * MIB + 1;
        for _ in 0..10 {
            sim.tick();
        }
        assert!(sim.tenants[0].done.is_empty() && sim.tenants[0].queue.len() == 4, "the deaf client waits");
        assert_eq!(sim.tenants[1].done.len(), 4, "the other is served");
        sim.tenants[0].load.outbox_bytes = 0;
        for _ in 0..10 {
            sim.tick();
        }
        assert_eq!(sim.tenants[0].done.len(), 4, "once it reads, it is served");
        assert_eq!(sim.admission.ring_used(), 0);
    }
}
