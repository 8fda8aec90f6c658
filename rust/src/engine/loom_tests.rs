//! Loom models of the engine's two wake-up protocols: the batch counter with its futex waiter
//! flag, and the completion eventfd's drain order. The counter rules are `counter.rs`'s and
//! the ring is the real one; the futex and the eventfd are modelled by what the kernel
//! guarantees (futex: sleep only while the word still holds the expected value, checked under
//! the same lock `wake` takes; eventfd: its counter changes under its own lock, so `write`
//! sets it and `read` clears it as one step each).
//! A lost wake-up shows up as a deadlock (every thread blocked), which loom reports.

use super::counter::{self, Wake};
use crate::ring::test_mem::new_ring;
use loom::sync::atomic::{AtomicU32, Ordering};
use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;

#[derive(Default)]
struct Futex {
    bucket: Mutex<()>,
    sleepers: Condvar,
}

impl Futex {
    fn wait(&self, word: &AtomicU32, expected: u32) {
        let guard = self.bucket.lock().unwrap();
        if word.load(Ordering::SeqCst) == expected {
            drop(self.sleepers.wait(guard).unwrap());
        }
    }

    fn wake_all(&self) {
        let _guard = self.bucket.lock().unwrap();
        self.sleepers.notify_all();
    }
}

/// Two workers each finish one key of a two-key batch that a thread waits for (as
/// `Engine::wait` does: look for the result, then sleep on the counter while keys are open).
#[test]
fn the_waiting_thread_always_wakes_for_its_finished_batch() {
    // Three preemptions cover every way the last count-off can interleave with the waiter's
    // look-then-sleep; unbounded, the two workers' mutex traffic takes minutes to explore.
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(3);
    model.check(|| {
        let counter = Arc::new(AtomicU32::new(0));
        let filed = Arc::new(Mutex::new(0u32));
        let futex = Arc::new(Futex::default());
        counter.store(counter::armed(2, true), Ordering::Release);
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let (counter, filed, futex) = (counter.clone(), filed.clone(), futex.clone());
                thread::spawn(move || {
                    // Publish the completion, then count it off (worker/mod.rs: post_completions).
                    *filed.lock().unwrap() += 1;
                    let before = counter.fetch_sub(1, Ordering::AcqRel);
                    match counter::wake_for(before, 1) {
                        Wake::Waiter => futex.wake_all(),
                        Wake::Drainers => panic!("a waited-for batch woke the drainers"),
                        Wake::Nobody => {}
                    }
                })
            })
            .collect();
        loop {
            if *filed.lock().unwrap() == 2 {
                break;
            }
            let value = counter.load(Ordering::Acquire);
            if !counter::is_open(value) {
                // Counted off to zero: the last completion was filed before that.
                assert_eq!(*filed.lock().unwrap(), 2, "the count reached zero before every completion was filed");
                break;
            }
            futex.wait(&counter, value);
        }
        for worker in workers {
            worker.join().unwrap();
        }
    });
}

/// A worker publishes a completion and signals the eventfd while a drainer drains (reset the
/// eventfd, then collect: `Engine::drain`'s order). Whatever the interleaving, the completion
/// is collected by this drain or the eventfd stays set for the next one: never both missed.
#[test]
fn a_drain_never_clears_the_signal_of_a_completion_it_did_not_collect() {
    loom::model(|| {
        let (mut producer, mut consumer) = new_ring(64);
        let eventfd = Arc::new(Mutex::new(0u64));
        let signal = eventfd.clone();
        let worker = thread::spawn(move || {
            producer.try_push(&[b"done"]).unwrap();
            producer.publish();
            *signal.lock().unwrap() += 1;
        });
        let was = std::mem::take(&mut *eventfd.lock().unwrap());
        let mut record = Vec::new();
        let collected = consumer.try_pop_into(&mut record).unwrap();
        worker.join().unwrap();
        assert!(
            collected || *eventfd.lock().unwrap() > 0,
            "the completion was neither collected nor left announced (eventfd held {was} at the reset)"
        );
        if collected {
            assert_eq!(record, b"done");
        }
    });
}

/// A worker posts the last completion of a drained batch and then counts it off; meanwhile the
/// front-end files that completion (which frees the batch's slot) and a submitter opens a new
/// batch. The new batch may take the slot only once its counter is back at zero
/// (`Batches::open`'s `counted_off`), or the worker's late count-off lands on the new batch's
/// counter and the drained batch's wake-up is lost.
#[test]
fn a_reused_slot_never_swallows_the_previous_batch_s_wake_up() {
    loom::model(|| {
        let (mut producer, mut consumer) = new_ring(64);
        let counter = Arc::new(AtomicU32::new(counter::armed(1, false)));
        let eventfd = Arc::new(Mutex::new(0u64));
        let worker = {
            let (counter, eventfd) = (counter.clone(), eventfd.clone());
            thread::spawn(move || {
                producer.try_push(&[b"last key"]).unwrap();
                producer.publish();
                match counter::wake_for(counter.fetch_sub(1, Ordering::AcqRel), 1) {
                    Wake::Drainers => *eventfd.lock().unwrap() += 1,
                    Wake::Waiter => panic!("the count-off landed on the next batch's counter"),
                    Wake::Nobody => panic!("the last key of the batch did not close it"),
                }
            })
        };
        let mut record = Vec::new();
        while !consumer.try_pop_into(&mut record).unwrap() {
            thread::yield_now();
        }
        // The batch is complete and its slot free: a new waited-for batch wants a slot.
        let counted_off = !counter::is_open(counter.load(Ordering::Acquire));
        if counted_off {
            counter.store(counter::armed(1, true), Ordering::Release);
        }
        worker.join().unwrap();
        assert_eq!(*eventfd.lock().unwrap(), 1, "the drained batch's completion was never announced");
    });
}
