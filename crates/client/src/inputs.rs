//! The player's inputs on their way to the server: sequence numbers, the
//! queue of inputs not acknowledged yet, and when to send a call.
//!
//! A key press becomes an [`Input`] with the next sequence number and joins
//! the queue at once. Every `Act` carries the queue from its oldest input
//! (at most [`MAX_INPUTS_PER_ACT`] of them), so a call that is lost, late
//! or answered out of order costs nothing: the next one carries the same
//! inputs again, and the server applies each exactly once (those above the
//! session's last applied seq). The client does not wait for a reply
//! before it sends the next key: up to [`MAX_IN_FLIGHT`] calls travel at
//! once, so a player far from the servers gets every key applied at the
//! rate it was pressed. A reply's `ack` (the highest seq the server
//! applied) drops the inputs it covers; how long each waited, key to ack,
//! is the input-to-apply latency.
//!
//! Pure bookkeeping, no I/O: [`crate::session::GameSession`] carries the
//! calls out.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use borbaman_proto::{MAX_INPUTS_PER_ACT, pb};

/// Most `Act` calls of one player in flight at once. With one per key, a
/// player at 20 keys/s and 300 ms round trips has 6 out; more than this
/// only happens when the servers answer slowly, and then the inputs still
/// go out, in the next call that leaves.
pub const MAX_IN_FLIGHT: usize = 8;

/// How long to wait, after a call failed, before the inputs it carried are
/// sent again with no new key to carry them: the pool has already tried
/// every server it could within the call, so the next try can wait a
/// moment rather than hammer.
pub const RESEND_AFTER_FAILURE: Duration = Duration::from_millis(100);

/// One key press, numbered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Input {
    pub seq: u64,
    pub action: pb::Action,
    /// When the key was pressed (the input-to-apply latency runs from here).
    pub pressed: Instant,
}

/// An input the server acknowledged, and how long it took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Acked {
    pub seq: u64,
    pub action: pb::Action,
    /// From the key press to the reply that acknowledged it.
    pub latency: Duration,
}

/// The unacknowledged inputs of one session and the calls carrying them.
#[derive(Clone, Debug)]
pub struct InputQueue {
    next_seq: u64,
    /// The first and the newest input's seq, once there is one.
    first: Option<u64>,
    newest: u64,
    /// Sent or waiting to be, not acknowledged; oldest first.
    unacked: VecDeque<Input>,
    /// The highest seq the server acknowledged.
    acked: u64,
    /// The newest seq some call has carried.
    carried: u64,
    in_flight: usize,
    /// When the last call failed, if no call succeeded since.
    failed_at: Option<Instant>,
    sent: u64,
    applied: u64,
}

impl InputQueue {
    /// A queue whose first input gets `next_seq` (the server's last applied
    /// seq + 1, from the join).
    pub fn new(next_seq: u64) -> InputQueue {
        InputQueue {
            next_seq,
            first: None,
            newest: 0,
            unacked: VecDeque::new(),
            acked: next_seq.saturating_sub(1),
            carried: next_seq.saturating_sub(1),
            in_flight: 0,
            failed_at: None,
            sent: 0,
            applied: 0,
        }
    }

    /// Numbers a key press and queues it; returns its seq.
    pub fn push(&mut self, action: pb::Action, pressed: Instant) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.first.get_or_insert(seq);
        self.newest = seq;
        self.unacked.push_back(Input {
            seq,
            action,
            pressed,
        });
        self.sent += 1;
        seq
    }

    /// Takes the sequence number for a call that is not an input (a
    /// Leave): it follows every input queued so far.
    pub fn take_seq(&mut self) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }

    /// Whether to start a call now: there is an input no call carried yet
    /// and room in flight, or inputs wait with nothing in flight and no
    /// failure in the last [`RESEND_AFTER_FAILURE`] (a call that failed
    /// left them behind).
    pub fn send_due(&self, now: Instant) -> bool {
        let newest = self.unacked.back().map_or(0, |i| i.seq);
        if newest == 0 || self.in_flight >= MAX_IN_FLIGHT {
            return false;
        }
        newest > self.carried
            || (self.in_flight == 0
                && self
                    .failed_at
                    .is_none_or(|at| now.saturating_duration_since(at) >= RESEND_AFTER_FAILURE))
    }

    /// The inputs of the next call (the oldest unacknowledged, at most
    /// [`MAX_INPUTS_PER_ACT`]), counted as in flight. Empty when nothing
    /// waits.
    pub fn start_call(&mut self) -> Vec<pb::Input> {
        let batch: Vec<pb::Input> = self
            .unacked
            .iter()
            .take(MAX_INPUTS_PER_ACT)
            .map(|i| pb::Input {
                seq: i.seq,
                action: i.action as i32,
            })
            .collect();
        if let Some(last) = batch.last() {
            self.carried = self.carried.max(last.seq);
            self.in_flight += 1;
        }
        batch
    }

    /// A call answered with `ack`: the inputs it covers are applied.
    pub fn answered(&mut self, ack: u64, now: Instant) -> Vec<Acked> {
        self.in_flight = self.in_flight.saturating_sub(1);
        self.failed_at = None;
        self.acked = self.acked.max(ack);
        let mut done = Vec::new();
        while let Some(input) = self.unacked.front().copied() {
            if input.seq > self.acked {
                break;
            }
            self.unacked.pop_front();
            self.applied += 1;
            done.push(Acked {
                seq: input.seq,
                action: input.action,
                latency: now.saturating_duration_since(input.pressed),
            });
        }
        done
    }

    /// A call failed: its inputs stay queued, for the next call.
    pub fn failed(&mut self, now: Instant) {
        self.in_flight = self.in_flight.saturating_sub(1);
        self.failed_at = Some(now);
    }

    /// Inputs not acknowledged yet, oldest first.
    pub fn unacked(&self) -> impl ExactSizeIterator<Item = &Input> {
        self.unacked.iter()
    }
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }
    /// The seq the next input or leave gets.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }
    /// The highest seq the server acknowledged.
    pub fn acked(&self) -> u64 {
        self.acked
    }
    /// Inputs queued (key presses), and of them acknowledged as applied.
    pub fn counts(&self) -> (u64, u64) {
        (self.sent, self.applied)
    }
    /// The sequence numbers of the inputs queued, first to newest (every
    /// one between: inputs are numbered in a row), if any was.
    pub fn sent_seqs(&self) -> Option<(u64, u64)> {
        Some((self.first?, self.newest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys pressed faster than replies come back all go out at once, each
    /// call carrying every unacknowledged input; acks drop what they cover.
    #[test]
    fn keys_go_out_without_waiting_and_acks_drop_them() {
        let t0 = Instant::now();
        let mut q = InputQueue::new(5);
        assert!(!q.send_due(t0), "nothing to send");
        q.push(pb::Action::Up, t0);
        assert!(q.send_due(t0));
        let first = q.start_call();
        assert_eq!(first.iter().map(|i| i.seq).collect::<Vec<_>>(), [5]);
        assert!(!q.send_due(t0), "input 5 is on its way");
        q.push(pb::Action::Bomb, t0);
        assert!(q.send_due(t0), "a new key goes out before any reply");
        let second = q.start_call();
        assert_eq!(second.iter().map(|i| i.seq).collect::<Vec<_>>(), [5, 6]);
        assert_eq!(q.in_flight(), 2);

        // The second call's reply comes first: both are applied.
        let later = t0 + Duration::from_millis(200);
        let acked = q.answered(6, later);
        assert_eq!(acked.len(), 2);
        assert_eq!(acked[0].latency, Duration::from_millis(200));
        // The first's (ack 5) changes nothing more.
        assert!(q.answered(5, later).is_empty());
        assert_eq!(q.counts(), (2, 2));
        assert_eq!((q.in_flight(), q.acked(), q.unacked().len()), (0, 6, 0));
        assert!(!q.send_due(later));
    }

    #[test]
    fn a_failed_call_leaves_its_inputs_for_the_next_one() {
        let t0 = Instant::now();
        let mut q = InputQueue::new(1);
        q.push(pb::Action::Left, t0);
        q.start_call();
        q.failed(t0);
        assert!(!q.send_due(t0), "not at once after a failure");
        let soon = t0 + RESEND_AFTER_FAILURE;
        assert!(q.send_due(soon), "sent again after a moment");
        // A new key goes out at once, carrying the old one too.
        q.push(pb::Action::Right, t0);
        assert!(q.send_due(t0));
        let batch = q.start_call();
        assert_eq!(batch.iter().map(|i| i.seq).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(q.take_seq(), 3, "a leave follows the inputs");
        assert_eq!(q.sent_seqs(), Some((1, 2)));
    }

    #[test]
    fn calls_in_flight_and_inputs_per_call_are_bounded() {
        let t0 = Instant::now();
        let mut q = InputQueue::new(1);
        for _ in 0..MAX_IN_FLIGHT {
            q.push(pb::Action::Idle, t0);
            assert!(q.send_due(t0));
            q.start_call();
        }
        q.push(pb::Action::Idle, t0);
        assert!(!q.send_due(t0), "{MAX_IN_FLIGHT} calls out already");
        for _ in 0..40 {
            q.push(pb::Action::Idle, t0);
        }
        q.failed(t0);
        assert!(q.send_due(t0), "a slot came free");
        let batch = q.start_call();
        assert_eq!(batch.len(), MAX_INPUTS_PER_ACT);
        assert_eq!(batch[0].seq, 1, "the oldest first: none is skipped");
    }
}
