//! One write at a time per game, within this server, and the calls that
//! queued meanwhile written together (group commit).
//!
//! Two calls on one game that overlap between their read and their
//! compare-and-set write collide: one of them reads and writes again. Calls
//! through different servers can only find out in the database, but calls
//! through the same server can simply wait their turn here, which costs
//! nothing the collision would not have cost, and saves the database the
//! wasted read and write. The wait is in this process only: a server
//! stopped while holding a gate holds up no other server.
//!
//! Waiting is also the chance to write less: a call queues its job on its
//! game's gate, and the call that gets the gate takes the jobs queued so far
//! (its own among them, see [`take_batch`]) and writes them all in one
//! commit, then answers each. A job taken by another call is answered by
//! it; its own call only waits for the answer. If the taking call is
//! dropped before it answers (its deadline passed), the jobs it took are
//! answered with nothing ([`Turn::Dropped`]), and their calls queue again:
//! their outcome is unknown, which the retry by sequence number resolves.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedMutexGuard, oneshot};
use tokio::time::Instant;

use crate::metrics::{self, Metrics};

/// The gates of the games written through this server right now; `J` is a
/// queued job, `R` its answer.
pub(crate) struct Gates<J, R> {
    games: Mutex<HashMap<u64, Arc<GameGate<J, R>>>>,
    /// Numbers queued jobs, so a call finds its own in the queue.
    next_id: AtomicU64,
    /// Where the waits are counted, if anywhere.
    metrics: Option<Metrics>,
}

impl<J, R> Default for Gates<J, R> {
    fn default() -> Self {
        Gates {
            games: Mutex::default(),
            next_id: AtomicU64::new(0),
            metrics: None,
        }
    }
}

impl<J, R> std::fmt::Debug for Gates<J, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gates").finish_non_exhaustive()
    }
}

/// One game's gate and the jobs queued on it.
struct GameGate<J, R> {
    turn: Arc<tokio::sync::Mutex<()>>,
    queue: Mutex<VecDeque<Queued<J, R>>>,
}

impl<J, R> Default for GameGate<J, R> {
    fn default() -> Self {
        GameGate {
            turn: Arc::default(),
            queue: Mutex::default(),
        }
    }
}

/// A job waiting on its game's gate, with where its answer goes.
struct Queued<J, R> {
    id: u64,
    job: J,
    answer: oneshot::Sender<R>,
}

/// What a call got from [`Gates::turn`].
pub(crate) enum Turn<'a, J, R> {
    /// The gate: write `batch`'s jobs, then answer them.
    Lead(Batch<'a, J, R>),
    /// Another call wrote the job and answered it.
    Answered(R),
    /// Another call took the job and was dropped before it answered: the
    /// job may or may not have been written. Queue it again.
    Dropped,
}

/// The jobs a call holding the gate writes in one commit, oldest first.
pub(crate) struct Batch<'a, J, R> {
    jobs: Vec<Queued<J, R>>,
    /// The caller's own job, by id.
    own: u64,
    gate: Gate<'a, J, R>,
}

impl<J, R> Batch<'_, J, R> {
    /// The jobs, oldest first (the caller's own among them).
    pub(crate) fn jobs(&self) -> impl Iterator<Item = &J> {
        self.jobs.iter().map(|q| &q.job)
    }

    /// Answers each job with its answer (`answers` in the order of
    /// [`Batch::jobs`]), lets the next call in, and returns the caller's
    /// own answer. A job whose call is gone is answered into the void.
    pub(crate) fn answer(self, answers: impl IntoIterator<Item = R>) -> Option<R> {
        let mut own = None;
        for (queued, answer) in self.jobs.into_iter().zip(answers) {
            if queued.id == self.own {
                own = Some(answer);
            } else {
                let _ = queued.answer.send(answer);
            }
        }
        drop(self.gate);
        own
    }
}

/// Held while a call writes its game; the next call on the game through
/// this server enters when it is dropped.
struct Gate<'a, J, R> {
    gates: &'a Gates<J, R>,
    game_id: u64,
    game: Option<Arc<GameGate<J, R>>>,
    held: Option<OwnedMutexGuard<()>>,
}

/// A call waiting on its game's gate: removes the call's job from the
/// queue if the call is dropped before anyone took it.
struct Waiting<'a, J, R> {
    gates: &'a Gates<J, R>,
    game_id: u64,
    game: Option<Arc<GameGate<J, R>>>,
    id: u64,
}

impl<J, R> Waiting<'_, J, R> {
    fn game(&self) -> &Arc<GameGate<J, R>> {
        self.game.as_ref().expect("held until dropped")
    }
}

impl<J, R> Drop for Waiting<'_, J, R> {
    fn drop(&mut self) {
        if let Some(game) = self.game.take() {
            lock(&game.queue).retain(|q| q.id != self.id);
            drop(game);
        }
        self.gates.forget_if_idle(self.game_id);
    }
}

/// Which of the `queued` jobs (their ids, oldest first) the call holding
/// the gate writes in one commit: the oldest, at most `max`, and always its
/// own (`own`), in queue order. Returns their positions in the queue.
pub(crate) fn take_batch(queued: &[u64], own: u64, max: usize) -> Vec<usize> {
    let max = max.max(1);
    let mut taken: Vec<usize> = (0..queued.len().min(max)).collect();
    if let Some(at) = queued.iter().position(|&id| id == own)
        && at >= max
    {
        taken.pop();
        taken.push(at);
    }
    taken
}

impl<J, R> Gates<J, R> {
    /// Queues `job` on `game_id`'s gate and waits until the call gets the
    /// gate (calls that came before first), then takes up to `max` queued
    /// jobs to write with its own; or until another call that got the gate
    /// took the job and answered it.
    pub(crate) async fn turn(&self, game_id: u64, job: J, max: usize) -> Turn<'_, J, R> {
        let game = self.map().entry(game_id).or_default().clone();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (answer, mut answered) = oneshot::channel();
        lock(&game.queue).push_back(Queued { id, job, answer });
        // The call's one handle on the game's gate from here on: whatever
        // way the call leaves, dropping it forgets an idle game.
        let waiting = Waiting {
            gates: self,
            game_id,
            game: Some(game),
            id,
        };
        let asked = Instant::now();
        let turn = waiting.game().turn.clone().lock_owned();
        tokio::pin!(turn);
        let held = tokio::select! {
            biased;
            answer = &mut answered => {
                self.waited(asked);
                return match answer {
                    Ok(answer) => Turn::Answered(answer),
                    Err(_) => Turn::Dropped,
                };
            }
            held = &mut turn => held,
        };
        self.waited(asked);
        let gate = Gate {
            gates: self,
            game_id,
            game: Some(waiting.game().clone()),
            held: Some(held),
        };
        let jobs = {
            let mut queue = lock(&waiting.game().queue);
            let ids: Vec<u64> = queue.iter().map(|q| q.id).collect();
            if !ids.contains(&id) {
                // Taken by the call before, which has answered (it let the
                // gate go only after) or was dropped.
                drop(queue);
                drop(gate);
                return match answered.try_recv() {
                    Ok(answer) => Turn::Answered(answer),
                    Err(_) => Turn::Dropped,
                };
            }
            let taken = take_batch(&ids, id, max);
            let mut jobs = Vec::with_capacity(taken.len());
            // From the back, so the positions stay valid.
            for &at in taken.iter().rev() {
                if let Some(q) = queue.remove(at) {
                    jobs.push(q);
                }
            }
            jobs.reverse();
            jobs
        };
        drop(waiting);
        Turn::Lead(Batch {
            jobs,
            own: id,
            gate,
        })
    }

    /// Forgets `game_id` once no call holds, awaits or queues on its gate
    /// (each holds a clone); new callers clone under the map's lock, so
    /// none is missed.
    fn forget_if_idle(&self, game_id: u64) {
        let mut map = self.map();
        if map
            .get(&game_id)
            .is_some_and(|gate| Arc::strong_count(gate) == 1)
        {
            map.remove(&game_id);
        }
    }

    /// Gates whose waits are counted in `metrics`.
    pub(crate) fn observed(metrics: Metrics) -> Gates<J, R> {
        Gates {
            metrics: Some(metrics),
            ..Gates::default()
        }
    }

    fn waited(&self, asked: Instant) {
        if let Some(m) = &self.metrics {
            let waited = asked.elapsed();
            m.gate_waited(waited);
            metrics::calls::note_gate_wait(waited);
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<GameGate<J, R>>>> {
        lock(&self.games)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map().len()
    }

    /// Jobs queued on `game_id`'s gate, not taken yet.
    #[cfg(test)]
    pub(crate) fn queued(&self, game_id: u64) -> usize {
        self.map()
            .get(&game_id)
            .map_or(0, |game| lock(&game.queue).len())
    }
}

/// A std mutex's guard; a panic while it was held leaves what it guards
/// consistent here (every change is one push, remove or retain).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<J, R> Drop for Gate<'_, J, R> {
    fn drop(&mut self) {
        drop(self.held.take());
        drop(self.game.take());
        self.gates.forget_if_idle(self.game_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;
    use std::time::Duration;

    #[test]
    fn a_batch_takes_the_oldest_jobs_up_to_the_limit_and_always_the_callers_own() {
        assert_eq!(take_batch(&[4, 5, 6], 5, 8), vec![0, 1, 2]);
        assert_eq!(take_batch(&[4, 5, 6], 4, 2), vec![0, 1]);
        // The caller's own job is past the limit: it replaces the newest.
        assert_eq!(take_batch(&[4, 5, 6, 7], 7, 2), vec![0, 3]);
        assert_eq!(take_batch(&[9], 9, 0), vec![0], "a limit of 0 is 1");
    }

    #[tokio::test]
    async fn calls_on_one_game_take_turns_and_others_pass() {
        let gates: Arc<Gates<u32, u32>> = Arc::new(Gates::default());
        let inside = Arc::new(AtomicU32::new(0));
        let mut tasks = Vec::new();
        for i in 0..8u32 {
            let (gates, inside) = (gates.clone(), inside.clone());
            tasks.push(tokio::spawn(async move {
                match gates.turn(7, i, 1).await {
                    Turn::Lead(batch) => {
                        assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "call {i}");
                        let jobs: Vec<u32> = batch.jobs().copied().collect();
                        assert_eq!(jobs, vec![i], "a limit of one takes the own job only");
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        inside.fetch_sub(1, Ordering::SeqCst);
                        batch.answer(jobs).unwrap()
                    }
                    Turn::Answered(_) | Turn::Dropped => panic!("call {i} was taken"),
                }
            }));
        }
        // Another game is not held up by game 7.
        let other = tokio::time::timeout(Duration::from_millis(5), gates.turn(8, 99, 1)).await;
        assert!(matches!(other, Ok(Turn::Lead(_))));
        drop(other);
        for (i, t) in tasks.into_iter().enumerate() {
            assert_eq!(t.await.unwrap(), i as u32, "each call gets its own answer");
        }
        assert_eq!(gates.len(), 0, "finished games are forgotten");
    }

    /// Jobs queued while a call holds the gate are taken, in arrival order,
    /// by the next call that gets it, and each is answered with its own
    /// answer.
    #[tokio::test]
    async fn jobs_queued_behind_the_gate_are_written_together() {
        let gates: Arc<Gates<u32, u32>> = Arc::new(Gates::default());
        let Turn::Lead(first) = gates.turn(1, 0, 8).await else {
            panic!("the first call gets the gate");
        };
        let mut tasks = Vec::new();
        for i in 1..=4u32 {
            let gates = gates.clone();
            tasks.push(tokio::spawn(async move {
                match gates.turn(1, i, 8).await {
                    Turn::Lead(batch) => {
                        let jobs: Vec<u32> = batch.jobs().copied().collect();
                        let answers: Vec<u32> = jobs.iter().map(|j| j * 10).collect();
                        (Some(jobs), batch.answer(answers).unwrap())
                    }
                    Turn::Answered(answer) => (None, answer),
                    Turn::Dropped => panic!("nobody was dropped"),
                }
            }));
        }
        // Wait until all four are queued behind the held gate (the first
        // call's own job left the queue with it).
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let queued = gates.map().get(&1).map_or(0, |g| lock(&g.queue).len());
            if queued == 4 {
                break;
            }
            assert!(Instant::now() < deadline, "four calls never queued");
            tokio::task::yield_now().await;
        }
        // The first call took only its own job: it came before the others.
        assert_eq!(first.jobs().copied().collect::<Vec<_>>(), vec![0]);
        assert_eq!(first.answer([0]), Some(0));
        let mut leaders = Vec::new();
        for (i, t) in tasks.into_iter().enumerate() {
            let (led, answer) = t.await.unwrap();
            assert_eq!(
                answer,
                (i as u32 + 1) * 10,
                "call {} got its own answer",
                i + 1
            );
            leaders.extend(led);
        }
        assert_eq!(leaders, vec![vec![1, 2, 3, 4]], "one call wrote all four");
        assert_eq!(gates.len(), 0);
    }

    /// A call that took others' jobs and was dropped before answering sends
    /// them back to queue again; a waiting call dropped leaves no job.
    #[tokio::test]
    async fn jobs_of_a_dropped_batch_are_queued_again() {
        let gates: Arc<Gates<u32, u32>> = Arc::new(Gates::default());
        let Turn::Lead(first) = gates.turn(1, 0, 8).await else {
            panic!("the first call gets the gate");
        };
        let gone = tokio::time::timeout(Duration::from_millis(1), gates.turn(1, 9, 8)).await;
        assert!(gone.is_err(), "job 9 waits behind the gate");
        let queued = |gates: &Gates<u32, u32>| -> Vec<u32> {
            gates.map().get(&1).map_or(Vec::new(), |g| {
                lock(&g.queue).iter().map(|q| q.job).collect()
            })
        };
        assert_eq!(
            queued(&gates),
            Vec::<u32>::new(),
            "a dropped call's job is gone"
        );
        let mut tasks = Vec::new();
        for i in 1..=2u32 {
            let shared = gates.clone();
            tasks.push(tokio::spawn(async move {
                match shared.turn(1, i, 8).await {
                    // Dropped without answering: its deadline passed.
                    Turn::Lead(batch) => Some(batch.jobs().copied().collect::<Vec<_>>()),
                    Turn::Dropped => None,
                    Turn::Answered(_) => panic!("nobody answered"),
                }
            }));
            let deadline = Instant::now() + Duration::from_secs(5);
            while queued(&gates).len() < i as usize {
                assert!(Instant::now() < deadline, "call {i} never queued");
                tokio::task::yield_now().await;
            }
        }
        drop(first);
        let mut outcomes = Vec::new();
        for t in tasks {
            outcomes.push(t.await.unwrap());
        }
        outcomes.sort();
        assert_eq!(outcomes, vec![None, Some(vec![1, 2])]);
        assert_eq!(gates.len(), 0);
    }
}
