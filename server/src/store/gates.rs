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
//!
//! A commit costs the database about the same whether it holds one call or
//! four, so the call that gets the gate may first wait a moment (at most
//! the gate's linger, a millisecond or two) for the game's other
//! callers, when they called recently and are not queued yet: like
//! PostgreSQL's `commit_delay`. Whether to wait, and for whom, is
//! [`Arrivals`]'s decision: it learns how long each caller takes to call
//! again after an answer, and the call holding the gate waits only for the
//! callers due back before the linger ends. In a closed loop, where the
//! game's players call again the moment they are answered, that is the
//! players answered with it. A paced game whose players call at their own
//! rhythm (every 50 ms at 20 Hz) is not held up at all: when one of them
//! will call is known only to within about the linger itself, and the
//! database work a wait for it saves is not short while nobody waits in
//! admission's line (see [`QUICK_RETURN`]).

use crate::store::tuning::*;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::{Notify, OwnedMutexGuard, oneshot};
use tokio::time::{Duration, Instant};

use crate::metrics::{self, Metrics};

/// The gates of the games written through this server right now; `J` is a
/// queued job, `R` its answer.
pub(crate) struct Gates<J, R> {
    games: Mutex<HashMap<u64, Arc<GameGate<J, R>>>>,
    /// Numbers queued jobs, so a call finds its own in the queue.
    next_id: AtomicU64,
    /// Where the waits are counted, if anywhere.
    metrics: Option<Metrics>,
    /// The longest the call holding a gate waits for the game's other
    /// callers before it takes its batch (zero: it never waits).
    linger: Duration,
    /// Who called each game lately, and whether waiting for them paid;
    /// kept apart from the gates, which are forgotten whenever idle (as
    /// between two commits that each took all of a game's calls).
    arrivals: Mutex<HashMap<u64, Arrivals>>,
    /// Whether other calls wait for a place in this server's admission
    /// (set once the server's admission control exists): the call holding
    /// a gate then does not linger, since its game's place would be held
    /// with nothing of it in the database while others wait for one.
    crowded: OnceLock<Crowded>,
}

/// Tells whether calls wait in line for admission right now.
pub(crate) type Crowded = Box<dyn Fn() -> bool + Send + Sync>;

impl<J, R> Default for Gates<J, R> {
    fn default() -> Self {
        Gates {
            games: Mutex::default(),
            next_id: AtomicU64::new(0),
            metrics: None,
            linger: Duration::ZERO,
            arrivals: Mutex::default(),
            crowded: OnceLock::new(),
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
    /// Woken whenever a job is queued (for a call lingering at the gate).
    queued: Notify,
}

impl<J, R> Default for GameGate<J, R> {
    fn default() -> Self {
        GameGate {
            turn: Arc::default(),
            queue: Mutex::default(),
            queued: Notify::new(),
        }
    }
}

impl<J, R> GameGate<J, R> {
    /// The different callers with a job queued.
    fn callers_queued(&self) -> Vec<u64> {
        let queue = lock(&self.queue);
        let mut callers: Vec<u64> = queue.iter().map(|q| q.caller).collect();
        callers.sort_unstable();
        callers.dedup();
        callers
    }
}

/// A job waiting on its game's gate, with where its answer goes.
struct Queued<J, R> {
    id: u64,
    /// Who sent it (a player; its copies share the number).
    caller: u64,
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
        self.gate
            .gates
            .answered(self.gate.game_id, self.jobs.iter().map(|q| q.caller));
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

/// A game's recent callers at its gate, and when each is due to call
/// again: the pure part of the gate's wait for more calls (see the module
/// doc).
#[derive(Debug, Default)]
pub(crate) struct Arrivals {
    seen: Vec<Seen>,
}

/// One recent caller of a game.
#[derive(Clone, Copy, Debug)]
struct Seen {
    caller: u64,
    /// When it last queued a job.
    at: Instant,
    /// When its last job was answered, if it was and the caller has not
    /// called since.
    answered: Option<Instant>,
    /// How long it took to call again after its last answers: in a
    /// closed loop the network and the client's turn, at 20 Hz most of
    /// 50 ms.
    gaps: Gaps,
}

impl Seen {
    /// Whether it is due to queue a job by `until`, when it has no job
    /// queued: answered and expected back by then, calling again quickly
    /// ([`QUICK_RETURN`]); or answered, and how soon it calls again not
    /// known yet. A caller with a job out and not answered is not waited
    /// for.
    fn due_by(&self, until: Instant) -> bool {
        match (self.answered, self.gaps.typical()) {
            (Some(answered), Some(gap)) => gap <= QUICK_RETURN && answered + gap <= until,
            (Some(_), None) => true,
            (None, _) => false,
        }
    }
}

/// A caller's last gaps between an answer and its next call, and the
/// typical one: their median. A closed loop's gaps are short with a tail
/// (a client or a server that did not get the CPU at once), and a mean
/// follows the tail past the wait and stops the waits that pay; a paced
/// player's gaps are most of its interval, with a short one now and then
/// (a call answered late, a client behind its schedule), and a minimum
/// follows those and makes the game wait for a player who is not coming.
#[derive(Clone, Copy, Debug, Default)]
struct Gaps {
    last: [Duration; GAPS_KEPT],
    /// How many of `last` are filled (they fill from the front).
    len: usize,
    /// Where the next goes once all are filled.
    next: usize,
}

impl Gaps {
    fn push(&mut self, gap: Duration) {
        if self.len < GAPS_KEPT {
            self.last[self.len] = gap;
            self.len += 1;
        } else {
            self.last[self.next] = gap;
            self.next = (self.next + 1) % GAPS_KEPT;
        }
    }

    /// The median of the gaps kept (of two, the longer); `None` before
    /// the first.
    fn typical(&self) -> Option<Duration> {
        let mut gaps = self.last;
        let gaps = &mut gaps[..self.len];
        gaps.sort_unstable();
        gaps.get(self.len / 2).copied()
    }
}

impl Arrivals {
    /// `caller` queued a job at `now`.
    pub(crate) fn arrived(&mut self, caller: u64, now: Instant) {
        let mut gaps = Gaps::default();
        self.seen.retain(|seen| {
            if seen.caller == caller {
                gaps = seen.gaps;
                if let Some(answered) = seen.answered {
                    gaps.push(now.saturating_duration_since(answered));
                }
                return false;
            }
            now.duration_since(seen.at) < SEEN_FOR
        });
        if self.seen.len() >= SEEN_MAX {
            self.seen.remove(0);
        }
        self.seen.push(Seen {
            caller,
            at: now,
            answered: None,
            gaps,
        });
    }

    /// `caller`'s job was answered at `now`.
    pub(crate) fn answered(&mut self, caller: u64, now: Instant) {
        if let Some(seen) = self.seen.iter_mut().find(|seen| seen.caller == caller) {
            seen.answered = Some(now);
        }
    }

    /// The game's callers at `now`: those that called within [`SEEN_FOR`].
    pub(crate) fn expected(&self, now: Instant) -> usize {
        self.seen
            .iter()
            .filter(|seen| now.duration_since(seen.at) < SEEN_FOR)
            .count()
    }

    /// How many of the game's recent callers at `now` with no job queued
    /// (`queued` holds those with one) are due to call again by `until`:
    /// the call about to commit waits for them, and for no one when none
    /// is. A paced player answered a moment ago is not due for most of
    /// its interval; a closed loop's player is due about when the others
    /// answered with it come back.
    pub(crate) fn due(&self, queued: &[u64], now: Instant, until: Instant) -> usize {
        self.seen
            .iter()
            .filter(|seen| now.duration_since(seen.at) < SEEN_FOR)
            .filter(|seen| !queued.contains(&seen.caller))
            .filter(|seen| seen.due_by(until))
            .count()
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
    /// Queues `job` of `caller` on `game_id`'s gate and waits until the
    /// call gets the gate (calls that came before first), lingers for the
    /// game's other callers if that has been paying (see [`Arrivals`]),
    /// then takes up to `max` queued jobs to write with its own; or until
    /// another call that got the gate took the job and answered it.
    pub(crate) async fn turn(
        &self,
        game_id: u64,
        caller: u64,
        job: J,
        max: usize,
    ) -> Turn<'_, J, R> {
        let game = self.map().entry(game_id).or_default().clone();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (answer, mut answered) = oneshot::channel();
        lock(&game.queue).push_back(Queued {
            id,
            caller,
            job,
            answer,
        });
        self.arrived(game_id, caller);
        game.queued.notify_waiters();
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
        if !lock(&waiting.game().queue).iter().any(|q| q.id == id) {
            // Taken by the call before, which has answered (it let the gate
            // go only after) or was dropped.
            drop(gate);
            return match answered.try_recv() {
                Ok(answer) => Turn::Answered(answer),
                Err(_) => Turn::Dropped,
            };
        }
        // Holding the gate, the job still queued: only the holder takes
        // jobs, and the job leaves the queue otherwise only if this call
        // is dropped (then nothing of it is left to do).
        self.linger(game_id, waiting.game()).await;
        let jobs = {
            let mut queue = lock(&waiting.game().queue);
            let ids: Vec<u64> = queue.iter().map(|q| q.id).collect();
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

    /// Waits, at most the gates' linger, until the recent callers of
    /// `game` due to call again within it have a job queued (see
    /// [`Arrivals::due`]); not at all when none is due.
    async fn linger(&self, game_id: u64, game: &GameGate<J, R>) {
        if self.linger.is_zero() || self.crowded.get().is_some_and(|crowded| crowded()) {
            return;
        }
        let start = Instant::now();
        let deadline = start + self.linger;
        let queued_before = game.callers_queued();
        let before = queued_before.len();
        let due = lock(&self.arrivals)
            .get(&game_id)
            .map_or(0, |arrivals| arrivals.due(&queued_before, start, deadline));
        if due == 0 {
            return;
        }
        let expected = before + due;
        let mut queued = before;
        loop {
            let notified = game.queued.notified();
            tokio::pin!(notified);
            // Registered before the queue is looked at, so a job queued
            // in between still wakes it.
            notified.as_mut().enable();
            queued = queued.max(game.callers_queued().len());
            if queued >= expected || tokio::time::timeout_at(deadline, notified).await.is_err() {
                break;
            }
        }
        if let Some(m) = &self.metrics {
            m.gate_lingered(queued > before);
        }
    }

    /// The jobs of `callers` on `game_id` were answered now.
    fn answered(&self, game_id: u64, callers: impl Iterator<Item = u64>) {
        if self.linger.is_zero() {
            return;
        }
        let now = Instant::now();
        if let Some(arrivals) = lock(&self.arrivals).get_mut(&game_id) {
            for caller in callers {
                arrivals.answered(caller, now);
            }
        }
    }

    /// `caller` queued a job on `game_id` now. Games not heard from for
    /// [`SEEN_FOR`] are forgotten once many are remembered.
    fn arrived(&self, game_id: u64, caller: u64) {
        if self.linger.is_zero() {
            return;
        }
        let now = Instant::now();
        let mut all = lock(&self.arrivals);
        if all.len() >= ARRIVALS_KEPT && !all.contains_key(&game_id) {
            all.retain(|_, arrivals| arrivals.expected(now) > 0);
        }
        all.entry(game_id).or_default().arrived(caller, now);
    }

    /// These gates, with the call holding one waiting at most `linger` for
    /// the game's other callers (see [`Arrivals`]).
    pub(crate) fn lingering(self, linger: Duration) -> Gates<J, R> {
        Gates { linger, ..self }
    }

    /// From now on the call holding a gate does not linger while
    /// `crowded` says calls wait for admission. Set once; later calls are
    /// ignored.
    pub(crate) fn not_lingering_when(&self, crowded: Crowded) {
        let _ = self.crowded.set(crowded);
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
    use std::sync::atomic::{AtomicBool, AtomicU32};
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
                match gates.turn(7, u64::from(i), i, 1).await {
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
        let other = tokio::time::timeout(Duration::from_millis(5), gates.turn(8, 99, 99, 1)).await;
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
        let Turn::Lead(first) = gates.turn(1, 0, 0, 8).await else {
            panic!("the first call gets the gate");
        };
        let mut tasks = Vec::new();
        for i in 1..=4u32 {
            let gates = gates.clone();
            tasks.push(tokio::spawn(async move {
                match gates.turn(1, u64::from(i), i, 8).await {
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
        let Turn::Lead(first) = gates.turn(1, 0, 0, 8).await else {
            panic!("the first call gets the gate");
        };
        let gone = tokio::time::timeout(Duration::from_millis(1), gates.turn(1, 9, 9, 8)).await;
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
                match shared.turn(1, u64::from(i), i, 8).await {
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

    #[test]
    fn a_games_callers_are_those_heard_from_lately_each_once() {
        let t0 = Instant::now();
        let mut arrivals = Arrivals::default();
        arrivals.arrived(1, t0);
        arrivals.arrived(2, t0);
        arrivals.arrived(1, t0 + Duration::from_millis(1));
        assert_eq!(
            arrivals.expected(t0 + Duration::from_millis(1)),
            2,
            "a copy is the same caller"
        );
        arrivals.arrived(3, t0 + Duration::from_millis(60));
        assert_eq!(arrivals.expected(t0 + Duration::from_millis(60)), 3);
        assert_eq!(
            arrivals.expected(t0 + SEEN_FOR + Duration::from_millis(2)),
            1,
            "callers silent for longer than SEEN_FOR are not waited for"
        );
        for caller in 10..30 {
            arrivals.arrived(caller, t0 + Duration::from_millis(70));
        }
        assert_eq!(arrivals.expected(t0 + Duration::from_millis(70)), SEEN_MAX);
    }

    #[test]
    fn a_callers_typical_gap_is_the_median_of_its_last_ones() {
        let ms = Duration::from_millis;
        let mut gaps = Gaps::default();
        assert_eq!(gaps.typical(), None);
        gaps.push(ms(7));
        assert_eq!(gaps.typical(), Some(ms(7)));
        gaps.push(ms(1));
        assert_eq!(gaps.typical(), Some(ms(7)), "of two, the longer");
        // A closed loop with a slow return in five stays at 1 ms.
        let mut closed = Gaps::default();
        for round in 0..50 {
            closed.push(if round % 5 == 4 { ms(20) } else { ms(1) });
            if round >= 2 {
                assert_eq!(closed.typical(), Some(ms(1)), "round {round}");
            }
        }
        // A paced player with a short gap in five (a late answer, a client
        // behind) stays at its interval.
        let mut paced = Gaps::default();
        for round in 0..50 {
            paced.push(if round % 5 == 2 { ms(1) } else { ms(48) });
            assert_eq!(paced.typical(), Some(ms(48)), "round {round}");
        }
        // Only the last five count.
        for _ in 0..3 {
            paced.push(ms(2));
        }
        assert_eq!(paced.typical(), Some(ms(2)));
    }

    #[test]
    fn a_commit_waits_only_for_callers_due_back_within_the_linger() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        // A closed loop: the four players answered together call again
        // about 2 ms after their answer.
        let mut closed = Arrivals::default();
        for caller in 1..=4 {
            closed.arrived(caller, t0);
            closed.answered(caller, t0 + ms(1));
        }
        assert_eq!(
            closed.due(&[1], t0 + ms(1), t0 + ms(3)),
            3,
            "answered, how soon they call again not known yet: due"
        );
        for caller in 1..=4 {
            closed.arrived(caller, t0 + ms(3));
            closed.answered(caller, t0 + ms(4));
        }
        closed.arrived(1, t0 + ms(6));
        assert_eq!(closed.due(&[1], t0 + ms(6), t0 + ms(8)), 3);
        assert_eq!(closed.due(&[1, 2, 3, 4], t0 + ms(6), t0 + ms(8)), 0);
        assert_eq!(
            closed.due(&[1], t0 + ms(4), t0 + ms(5)),
            0,
            "callers due back after the wait's end are not waited for"
        );
        // A caller whose job is out, not answered yet, is not waited for.
        closed.arrived(2, t0 + ms(6));
        assert_eq!(closed.due(&[1], t0 + ms(6), t0 + ms(8)), 2);
        // A paced game: each player calls 50 ms after its answer.
        let mut paced = Arrivals::default();
        for caller in 1..=4 {
            paced.arrived(caller, t0);
            paced.answered(caller, t0 + ms(1));
            paced.arrived(caller, t0 + ms(51));
            paced.answered(caller, t0 + ms(52));
        }
        paced.arrived(1, t0 + ms(62));
        assert_eq!(
            paced.due(&[1], t0 + ms(62), t0 + ms(64)),
            0,
            "nobody is due back within the wait: no wait"
        );
        assert_eq!(
            paced.due(&[1], t0 + ms(101), t0 + ms(103)),
            0,
            "nor near the end of their interval: a paced return is not waited for"
        );
        // A caller whose gaps turn into a closed loop's is waited for
        // again, once they are most of its last five.
        let mut at = 102;
        for quick in 0..=3 {
            paced.arrived(2, t0 + ms(at));
            paced.answered(2, t0 + ms(at + 1));
            assert_eq!(
                paced.due(&[1], t0 + ms(at + 1), t0 + ms(at + 3)),
                usize::from(quick == 3),
                "after {quick} quick returns"
            );
            at += 2;
        }
    }

    /// The call that gets the gate waits for the game's other recent
    /// callers and writes their jobs with its own; it stops waiting as
    /// soon as they are all queued, not at the linger's end.
    #[tokio::test]
    async fn the_call_holding_the_gate_waits_for_the_games_other_callers() {
        let linger = Duration::from_secs(10);
        let gates: Arc<Gates<u32, u32>> = Arc::new(Gates::default().lingering(linger));
        // Callers 1 and 2 were heard from, and answered.
        gates.arrived(1, 1);
        gates.arrived(1, 2);
        gates.answered(1, [1, 2].into_iter());
        let started = Instant::now();
        let second = {
            let gates = gates.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(3)).await;
                match gates.turn(1, 2, 20, 8).await {
                    Turn::Answered(answer) => answer,
                    _ => panic!("caller 2's job was written by caller 1's commit"),
                }
            })
        };
        let Turn::Lead(batch) = gates.turn(1, 1, 10, 8).await else {
            panic!("caller 1 gets the gate");
        };
        assert_eq!(batch.jobs().copied().collect::<Vec<_>>(), vec![10, 20]);
        assert!(
            started.elapsed() < linger / 2,
            "the wait ended when caller 2 queued, not at the linger's end"
        );
        assert_eq!(batch.answer([100, 200]), Some(100));
        assert_eq!(second.await.unwrap(), 200);
        assert_eq!(gates.len(), 0);
    }

    /// While calls wait for admission the call holding the gate takes its
    /// batch at once: its game's place is not held idle for the others.
    #[tokio::test]
    async fn the_call_holding_the_gate_does_not_wait_while_calls_wait_for_admission() {
        let gates: Arc<Gates<u32, u32>> =
            Arc::new(Gates::default().lingering(Duration::from_secs(10)));
        let crowded = Arc::new(AtomicBool::new(true));
        let flag = crowded.clone();
        gates.not_lingering_when(Box::new(move || flag.load(Ordering::Relaxed)));
        gates.arrived(1, 1);
        gates.arrived(1, 2);
        gates.answered(1, [1, 2].into_iter());
        let Ok(Turn::Lead(batch)) =
            tokio::time::timeout(Duration::from_secs(5), gates.turn(1, 1, 10, 8)).await
        else {
            panic!("caller 1 waited for caller 2 although calls wait for admission");
        };
        assert_eq!(batch.jobs().copied().collect::<Vec<_>>(), vec![10]);
        assert_eq!(batch.answer([100]), Some(100));
        assert_eq!(gates.len(), 0);
    }

    /// A call dropped while it waits at the gate for more calls leaves the
    /// jobs queued meanwhile for the next call: none is lost, none taken
    /// twice.
    #[tokio::test]
    async fn a_call_dropped_while_lingering_leaves_the_others_jobs_queued() {
        let gates: Arc<Gates<u32, u32>> =
            Arc::new(Gates::default().lingering(Duration::from_millis(300)));
        for caller in 1..=3 {
            gates.arrived(1, caller);
        }
        gates.answered(1, 1..=3);
        // Caller 1 gets the gate and lingers for callers 2 and 3; caller 2
        // queues, then caller 1's deadline passes before caller 3 comes.
        let lingering = {
            let gates = gates.clone();
            tokio::spawn(async move {
                tokio::time::timeout(Duration::from_millis(100), gates.turn(1, 1, 10, 8))
                    .await
                    .is_err()
            })
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        while gates.queued(1) == 0 {
            assert!(Instant::now() < deadline, "caller 1 never queued");
            tokio::task::yield_now().await;
        }
        let second = {
            let gates = gates.clone();
            tokio::spawn(async move {
                match gates.turn(1, 2, 20, 8).await {
                    Turn::Lead(batch) => {
                        let jobs: Vec<u32> = batch.jobs().copied().collect();
                        batch.answer(jobs.clone());
                        jobs
                    }
                    _ => panic!("caller 2's job was left for it"),
                }
            })
        };
        assert!(
            lingering.await.unwrap(),
            "caller 1 was dropped while it lingered"
        );
        assert_eq!(
            second.await.unwrap(),
            vec![20],
            "caller 1's job left with it"
        );
        assert_eq!(gates.len(), 0);
    }
}
