//! Every number the pool's decisions are tuned with, in one place
//! ([`Tuning`], in [`PoolConfig::tuning`](super::PoolConfig::tuning)),
//! each with the reason it has its value. The defaults are what the
//! figures in `docs/results.md` were measured with; a test or a
//! measurement may change one, a player need not.

use std::time::Duration;

/// The pool's tuning. `Tuning::default()` is [`Tuning::DEFAULT`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tuning {
    // --- How far a server is (`pool::rtt`) ---
    /// A call deadline is never shorter: on loopback a healthy server sits
    /// in database stalls of up to ~100 ms under load, and 150 ms is what
    /// the loopback failover figures were measured with.
    pub deadline_floor: Duration,
    /// What a deadline allows above the server's own round trip: a
    /// database stall every server shares (checkpoints, WAL flushes) lasts
    /// up to ~100 ms.
    pub stall_allowance: Duration,
    /// No server is given longer: beyond this it is unusable for a
    /// real-time game whatever its excuse.
    pub deadline_cap: Duration,
    /// The deadline once every server is slow together is never shorter.
    pub slow_deadline_floor: Duration,
    /// Once every server is slow together (the cause is shared), a call
    /// waits this many of its usual deadlines.
    pub slow_deadline_factor: u32,
    /// The shortest hedge delay: a loopback cluster whose p95 is under a
    /// millisecond must not hedge every scheduling hiccup.
    pub hedge_floor: Duration,
    /// How far above the network's RTO the hedge delay may go: the
    /// loopback cap of 40 ms, counted above the round trip, so a far
    /// server is never hedged before its answer could arrive and a hung
    /// near one costs ≤ 40 ms.
    pub hedge_headroom: Duration,
    /// The percentile of a server's answered calls that is its hedge
    /// delay ("The Tail at Scale": hedge the slowest 5 %).
    pub hedge_percentile: usize,
    /// A call is not late while it is within its server's usual answer
    /// (the window's median) and this many times the window's spread
    /// above it (p95 − p50): a far link's jitter is a band every call falls
    /// in, and the p95 lies inside it (`pool::rtt`, "the jitter band")...
    pub jitter_band: u32,
    /// ...a band counted at most this share of the network's round trip
    /// (tenths): on loopback the variation is the machine's scheduling,
    /// not a link's, and must not raise the hedge delay.
    pub jitter_band_tenths: u32,
    /// Slack over the network RTO before a health probe is called
    /// unanswered: a loaded two-core machine can hold a healthy process's
    /// task for tens of milliseconds.
    pub probe_slack: Duration,
    /// A probe is never given less: on loopback under load a healthy
    /// server can take tens of milliseconds to be scheduled, and a wrong
    /// "hung" drops its connection.
    pub probe_floor: Duration,
    /// Answered calls remembered per server for the hedge delay.
    pub window: usize,
    /// Answers needed before the window's percentile is trusted.
    pub min_samples: usize,
    /// The percentile is recomputed after this many new samples (a sort of
    /// the window costs a few microseconds; calls come every few
    /// milliseconds).
    pub recompute_every: usize,

    // --- Is a late server hung or slow (`pool::probe`, `pool::decide`) ---
    /// How much longer than the other server (and than its own usual
    /// round trip) the late server may take to answer its probe before it
    /// is silent: a health check is answered without database work, so
    /// two live servers on one machine answer within a few milliseconds of
    /// each other even under load.
    pub silent_slack: Duration,
    /// How many of the late server's probe deadlines a probe waits for the
    /// other server's answer before calling everyone slow.
    pub probe_patience: u32,

    // --- Shared stalls and busy servers (`pool::decide`) ---
    /// How long a shared stall stops copies before one late call may send
    /// one anyway. The stall ends only when a call is answered on time; a
    /// client whose game sits on a server that alone turned slow gets no
    /// such answer while every copy is stopped (a loopback `slow` run: one
    /// client latched into a "stall" for the two seconds a server was
    /// slow, each call waiting out its 204 ms). At 100 ms, a call late on
    /// a server turned slow 46 ms after such a moment waited 59 ms for its
    /// copy, against 3–12 ms for the other clients'. Each try that does
    /// not end the stall doubles the wait for the next (a circuit
    /// breaker's half-open backoff).
    pub stall_trial_after: Duration,
    /// The longest wait between two tries of a shared stall.
    pub stall_trial_longest: Duration,
    /// A copy counts as late (the sign of a shared stall) only past this
    /// many of its server's hedge delays, and not before it has waited as
    /// long as its first call had when copied: when a server turns slow,
    /// every player of its games copies to the same next server at once,
    /// and the copies queue at their game's gate there (a copy 6.1 ms long
    /// beside a hedge delay of about 3 ms latched its client into a shared
    /// stall, and its next late call held its copy back for 65 ms).
    pub copy_late_delays: u32,
    /// How long a server that said it queues calls for the database
    /// (`borbaman-busy`) is believed busy: its late calls are not hedged,
    /// and at their deadline they wait rather than leave. Under overload
    /// nearly every answer says so again; once the queue is gone its late
    /// calls are hedged again within this.
    pub busy_hold: Duration,
    /// A call on a busy server is excused its hedge delay and this many
    /// times the queue its server last reported: a copy would queue on
    /// another server the same way, but only as long (a `slow` run's server
    /// answered 200 ms late after queueing 2–7 ms, and a client told "busy"
    /// sent it no copy for six calls in a row).
    pub busy_queue_factor: u32,
    /// Copies one suspicion covers with its single token: a player has at
    /// most this many calls in flight (`inputs::MAX_IN_FLIGHT`), and all
    /// of them wait on the same server.
    pub copies_per_suspicion: u32,

    // --- Where a player's calls go (`pool::decide`, `pool::state`) ---
    /// How long a server that lost a hedge race (or was left) is kept out
    /// of its game's choice before its calls go back to it.
    pub slow_cool_off: Duration,
    /// How soon after a copy beat a server a second win over it must come
    /// to move calls away from it: one win is what a moment of machine-wide
    /// slowness gives as often as a slow server, and moving on it split
    /// games over two servers in 24–36 % of a fault-free run's windows.
    pub second_win_within: Duration,
    /// How soon after an answer that said a player was alone sent it back
    /// to its game's server another may: a server slow for this player
    /// alone beats it again, and it then stays where its calls are
    /// answered.
    pub alone_return_every: Duration,
    /// How long a server must have been live in a pool before a running
    /// game's calls go back to it: a server just (re)connected has passed
    /// one health check at most, and its connections are still cold.
    pub settle: Duration,
    /// The beat of the wall clock on which the players of a game go back
    /// to its server: each player's pool learns of a fault on its own, up
    /// to a call interval apart (50 ms at 20 Hz); on the wall clock's beat
    /// they go back together instead of one by one, their commits racing
    /// for the game's row in between.
    pub beat: Duration,

    // --- The budget (`pool::budget`) ---
    /// Tokens a quiet pool holds: the hedges and retries it may spend at
    /// once.
    pub max_tokens: u32,
    /// Share of a token each call earns, in thousandths: hedges and
    /// retries stay under a tenth of the calls. (Thousandths, not a float:
    /// ten calls earn exactly one token.)
    pub token_ratio_milli: u32,
    /// Tokens only a call that stays late may spend: a burst of copies at
    /// the hedge delay (a moment of machine-wide slowness) had emptied a
    /// client's bucket just before its server turned slow, and its next
    /// seven calls each waited out the slow server's 200 ms.
    pub reserve_tokens: u32,
    /// How many of its server's hedge delays a call is late before it may
    /// spend the reserve: a moment's slowness is over by then (the calls it
    /// made late took 3–9 ms beside a hedge delay of about 3), a server
    /// turned slow is not.
    pub stays_late: u32,
    /// First backoff cap.
    pub backoff_base: Duration,
    /// Longest backoff while the budget lasts. A database that comes back
    /// is found, on average, within half of it.
    pub backoff_cap: Duration,
    /// Longest backoff once the budget is spent: the call still goes on,
    /// slowly.
    pub throttled_cap: Duration,

    // --- The background task (`pool::background`) ---
    /// Every this many background refreshes (2 s at the default 500 ms),
    /// the pool health-checks every connection and asks the registry,
    /// however things stand; in between only the servers that answered no
    /// call. At 256 clients the background work was otherwise 2 000 calls
    /// a second beside ~2 000 game calls.
    pub full_check_every: u64,
    /// For this long after the pool dropped a server, each refresh tries
    /// its address again directly, one connection at a time, besides the
    /// registry's list: a server that hung and resumed answers at once, and
    /// going through the registry took its clients 0.5–3.4 s at 150 ms
    /// (a refresh, a registry call, then a connection), so a client whose
    /// next server hung in that time had none to copy its calls to.
    pub return_watch: Duration,
    /// Background refresh interval while no server is live: each look is
    /// one refused connection per known address, cheap enough.
    pub no_server_refresh: Duration,
    /// The background task's pause after a refresh a failure woke it for,
    /// so that it does not spin if the failure keeps coming.
    pub woken_pause: Duration,
    /// A background health check or registry call is given this many of
    /// its server's network RTOs (at least `PoolConfig::health_timeout`).
    pub health_check_rtos: u32,
    /// HTTP/2 keep-alive: a PING after this long without a frame from the
    /// server, on idle connections too.
    pub keepalive_interval: Duration,
    /// A new connection waits for a PING's answer this many of the
    /// farthest known network RTOs before it is closed...
    pub keepalive_timeout_rtos: u32,
    /// ...and never less than this...
    pub keepalive_timeout_floor: Duration,
    /// ...nor more than this.
    pub keepalive_timeout_cap: Duration,
}

impl Tuning {
    /// The values the pool's figures were measured with.
    pub const DEFAULT: Tuning = Tuning {
        deadline_floor: Duration::from_millis(150),
        stall_allowance: Duration::from_millis(100),
        deadline_cap: Duration::from_secs(5),
        slow_deadline_floor: Duration::from_secs(1),
        slow_deadline_factor: 4,
        hedge_floor: Duration::from_millis(2),
        hedge_headroom: Duration::from_millis(40),
        hedge_percentile: 95,
        jitter_band: 2,
        jitter_band_tenths: 1,
        probe_slack: Duration::from_millis(50),
        probe_floor: Duration::from_millis(100),
        window: 128,
        min_samples: 16,
        recompute_every: 8,
        silent_slack: Duration::from_millis(10),
        probe_patience: 2,
        stall_trial_after: Duration::from_millis(50),
        stall_trial_longest: Duration::from_millis(1600),
        copy_late_delays: 2,
        busy_hold: Duration::from_millis(500),
        busy_queue_factor: 2,
        copies_per_suspicion: crate::inputs::MAX_IN_FLIGHT as u32,
        slow_cool_off: Duration::from_secs(1),
        second_win_within: Duration::from_millis(500),
        alone_return_every: Duration::from_secs(5),
        settle: Duration::from_secs(1),
        beat: Duration::from_millis(250),
        max_tokens: 10,
        token_ratio_milli: 100,
        reserve_tokens: 5,
        stays_late: 4,
        backoff_base: Duration::from_millis(10),
        backoff_cap: Duration::from_millis(200),
        throttled_cap: Duration::from_secs(1),
        full_check_every: 4,
        return_watch: Duration::from_secs(30),
        no_server_refresh: Duration::from_millis(100),
        woken_pause: Duration::from_millis(50),
        health_check_rtos: 2,
        keepalive_interval: Duration::from_secs(1),
        keepalive_timeout_rtos: 4,
        keepalive_timeout_floor: Duration::from_secs(1),
        keepalive_timeout_cap: Duration::from_secs(10),
    };
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning::DEFAULT
    }
}
