//! Server-side cost of one invocation against bare PostgreSQL round trips
//! of the same shapes, measured side by side in one run.
//!
//! Starts a private PostgreSQL with fsync on, then in interleaved rounds:
//! - floor: `BEGIN; SELECT state ... FOR UPDATE; UPDATE ...; COMMIT` on a
//!   ~200-byte row, one client (4 round trips; the shape game calls had
//!   before they became compare-and-set writes, kept so runs compare);
//! - the same on a connection held outside the pool: the difference is what
//!   the pool costs per call (sqlx pings a connection, one more round trip,
//!   in a spawned task each time one is released);
//! - CAS floor: `SELECT state, version ...` then `UPDATE ... WHERE version
//!   = $read`, both autocommitted, on one pooled connection (2 round trips,
//!   the shape of an `Act` now);
//! - `Store::act`: the exact function the gRPC `Act` runs, in-process;
//! - `Store::state`: the read-only `GetState` path;
//! - gRPC `Ping` (no database) and gRPC `Act` against an in-process server.
//!
//! Prints p50/p99 per path, the ratio to the floor, bytes per call (row
//! sizes read and written, and WAL bytes per commit), and heap allocations
//! and bytes allocated per call (a counting global allocator; process-wide,
//! so a gRPC round trip counts client and server, and the floors show what
//! sqlx and tonic cost on their own).
//!
//! `cargo bench -p borbaman-server --bench invocation`
//! (`BENCH_ROUNDS`, `BENCH_CALLS` override the defaults.)

use std::time::{Duration, Instant};

use borbaman_cluster::{LocalPostgres, PgOptions};
use borbaman_game::{Action, Dir};
use borbaman_proto::pb;
use borbaman_server::admission::AdmissionLimits;
use borbaman_server::incoming::ConnectionLimits;
use borbaman_server::limits::CallLimits;
use borbaman_server::seating::SeatingLimits;
use borbaman_server::server::{self, ServerConfig};
use borbaman_server::store::retention::RetentionOptions;
use borbaman_server::store::{ActCall, Identity, Input, Store, StoreOptions};
use borbaman_server::token;
use hdrhistogram::Histogram;
use sqlx::{PgConnection, PgPool, Row};

#[path = "support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::{Allocated, CountingAlloc};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const WARMUP_CALLS: usize = 200;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Path {
    name: &'static str,
    hist: Histogram<u64>,
    allocated: Allocated,
    /// CPU time over the measured calls.
    cpu: Cpu,
}

impl Path {
    fn new(name: &'static str) -> Self {
        Path {
            name,
            hist: Histogram::new_with_bounds(1, 60_000_000, 3).unwrap(),
            allocated: Allocated::default(),
            cpu: Cpu::default(),
        }
    }

    /// Records one call that started at `started` when the allocation
    /// counters read `before`.
    fn record(&mut self, started: Instant, before: Allocated) {
        let took = started.elapsed();
        self.allocated.add(Allocated::since(before));
        self.hist.saturating_record(took.as_micros().max(1) as u64);
    }
}

/// Starts timing and counting one call.
fn start() -> (Instant, Allocated) {
    (Instant::now(), Allocated::now())
}

/// CPU time (user + system) used so far by this process and by the
/// PostgreSQL cluster (the postmaster and its children, from /proc, in
/// clock ticks of usually 10 ms: meaningful summed over many calls). Read
/// around a batch of calls, not each call, so it stays out of the timings.
#[derive(Clone, Copy, Debug, Default)]
struct Cpu {
    ours: Duration,
    postgres: Duration,
}

impl Cpu {
    fn now(postmaster: u32) -> Cpu {
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: getrusage only writes the struct we pass.
        unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
        let tv = |t: libc::timeval| {
            Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
        };
        Cpu {
            ours: tv(usage.ru_utime) + tv(usage.ru_stime),
            postgres: cluster_cpu(postmaster),
        }
    }

    fn add_since(&mut self, earlier: Cpu, postmaster: u32) {
        let now = Cpu::now(postmaster);
        self.ours += now.ours.saturating_sub(earlier.ours);
        self.postgres += now.postgres.saturating_sub(earlier.postgres);
    }
}

/// CPU used by the postmaster `pid` and its live children.
fn cluster_cpu(pid: u32) -> Duration {
    // SAFETY: sysconf has no preconditions.
    let ticks_per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let mut ticks = 0u64;
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Duration::ZERO;
    };
    for entry in dir.flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // Fields after the command name (which may hold spaces): state,
        // ppid, ..., utime (12th), stime (13th).
        let Some((head, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let own_pid: u32 = head
            .split('(')
            .next()
            .unwrap_or("")
            .trim()
            .parse()
            .unwrap_or(0);
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ppid: u32 = fields.get(1).and_then(|f| f.parse().ok()).unwrap_or(0);
        if own_pid == pid || ppid == pid {
            let field = |i: usize| {
                fields
                    .get(i)
                    .and_then(|f| f.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            ticks += field(11) + field(12);
        }
    }
    Duration::from_secs_f64(ticks as f64 / ticks_per_s)
}

/// The postmaster's pid, from the first line of `postmaster.pid`.
fn postmaster_pid(pg: &LocalPostgres) -> u32 {
    std::fs::read_to_string(pg.data_dir().join("postmaster.pid"))
        .ok()
        .and_then(|s| s.lines().next().and_then(|l| l.trim().parse().ok()))
        .unwrap_or(0)
}

/// One of four seated players, as the bench drives it.
struct Seat {
    token: Vec<u8>,
    game_id: u64,
    seat: u8,
    seq: u64,
}

fn main() {
    let rounds = env_usize("BENCH_ROUNDS", 5);
    let calls = env_usize("BENCH_CALLS", 400);
    let pg = LocalPostgres::start_temp(PgOptions {
        fsync: true,
        port: None,
    })
    .expect("start PostgreSQL");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    // The brief's setting (every commit waits for its WAL flush), then the
    // same with commits not waiting: the CPU side alone, far less noisy on
    // a shared disk.
    let async_url = format!("{}?options=-c%20synchronous_commit%3Doff", pg.url());
    let pg_pid = postmaster_pid(&pg);
    runtime.block_on(run(&pg.url(), "fsync on", rounds, calls, pg_pid));
    runtime.block_on(run(
        &async_url,
        "synchronous_commit off",
        rounds,
        calls,
        pg_pid,
    ));
}

async fn run(url: &str, label: &str, rounds: usize, calls: usize, pg_pid: u32) {
    let store = Store::connect(url, &StoreOptions::default()).unwrap();
    store.migrate().await.unwrap();
    let pool = store.pool().clone();
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS floor_rows \
         (id int PRIMARY KEY, state bytea NOT NULL, version bigint NOT NULL DEFAULT 1)",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query("INSERT INTO floor_rows VALUES (1, $1) ON CONFLICT DO NOTHING")
        .bind(vec![7u8; 200])
        .execute(&pool)
        .await
        .unwrap();

    // Two games: one for the in-process store path, one for gRPC.
    let mut direct = seat_four(&store, "d").await;
    let server = server::start(ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        advertise: None,
        database_url: url.to_string(),
        server_id: None,
        store: StoreOptions::default(),
        db_clusters: Vec::new(),
        heartbeat: Duration::from_millis(250),
        server_ttl: Duration::from_millis(1000),
        startup_timeout: Duration::from_secs(10),
        slow: Default::default(),
        call_limits: CallLimits::NONE,
        admission: AdmissionLimits::NONE,
        seating: SeatingLimits::OPEN,
        connection_limits: ConnectionLimits::NONE,
        tls: None,
        retention: RetentionOptions::new(Duration::from_secs(3 * 86_400)),
        metrics_listen: None,
        operator_token: None,
    })
    .await
    .unwrap();
    let mut client = pb::game_client::GameClient::connect(format!("http://{}", server.addr))
        .await
        .unwrap();
    let mut remote = seat_four(&store, "r").await;

    let mut floor = Path::new("bare txn (floor)");
    let mut held_floor = Path::new("bare txn, held conn");
    let mut held = pool.acquire().await.unwrap().detach();
    let mut cas_floor = Path::new("bare CAS (floor)");
    let mut act = Path::new("Store::act");
    let mut state = Path::new("Store::state (read)");
    let mut ping = Path::new("gRPC Ping (floor)");
    let mut grpc_act = Path::new("gRPC Act");
    let mut grpc_state = Path::new("gRPC GetState");

    let moves = [
        Action::Move(Dir::Left),
        Action::Move(Dir::Right),
        Action::Idle,
        Action::Move(Dir::Up),
        Action::Move(Dir::Down),
    ];
    let wal_floor = WalMeter::new();
    let wal_cas = WalMeter::new();
    let wal_act = WalMeter::new();
    for round in 0..=rounds {
        // Round 0 is the warm-up, recorded nowhere.
        let n = if round == 0 { WARMUP_CALLS } else { calls };
        let keep = round > 0;
        let wal = wal_floor.start(&pool).await;
        let cpu = Cpu::now(pg_pid);
        for _ in 0..n {
            let (t, a) = start();
            floor_txn(&pool).await;
            if keep {
                floor.record(t, a);
            }
        }
        if keep {
            floor.cpu.add_since(cpu, pg_pid);
        }
        wal_floor.stop(&pool, wal, n, keep).await;

        let cpu = Cpu::now(pg_pid);
        for _ in 0..n {
            let (t, a) = start();
            floor_txn_on(&mut held).await;
            if keep {
                held_floor.record(t, a);
            }
        }
        if keep {
            held_floor.cpu.add_since(cpu, pg_pid);
        }

        let wal = wal_cas.start(&pool).await;
        let cpu = Cpu::now(pg_pid);
        for _ in 0..n {
            let (t, a) = start();
            floor_cas(&pool).await;
            if keep {
                cas_floor.record(t, a);
            }
        }
        if keep {
            cas_floor.cpu.add_since(cpu, pg_pid);
        }
        wal_cas.stop(&pool, wal, n, keep).await;

        let wal = wal_act.start(&pool).await;
        let cpu = Cpu::now(pg_pid);
        for i in 0..n {
            let s = &mut direct[i % 4];
            s.seq += 1;
            let call = ActCall {
                token_hash: token::hash(&s.token),
                game_id: s.game_id,
                seat: s.seat,
                inputs: vec![Input {
                    seq: s.seq,
                    action: moves[(i / 4) % moves.len()],
                }],
                batch: false,
            };
            let (t, a) = start();
            store.act(&call).await.unwrap();
            if keep {
                act.record(t, a);
            }
        }
        if keep {
            act.cpu.add_since(cpu, pg_pid);
        }
        wal_act.stop(&pool, wal, n, keep).await;

        let cpu = Cpu::now(pg_pid);
        for i in 0..n {
            let s = &direct[i % 4];
            let hash = token::hash(&s.token);
            let (t, a) = start();
            store.state(&hash, s.game_id).await.unwrap();
            if keep {
                state.record(t, a);
            }
        }
        if keep {
            state.cpu.add_since(cpu, pg_pid);
        }

        let cpu = Cpu::now(pg_pid);
        for _ in 0..n {
            let (t, a) = start();
            client
                .ping(pb::PingRequest {
                    payload: vec![0; 16],
                })
                .await
                .unwrap();
            if keep {
                ping.record(t, a);
            }
        }
        if keep {
            ping.cpu.add_since(cpu, pg_pid);
        }

        let cpu = Cpu::now(pg_pid);
        for i in 0..n {
            let s = &mut remote[i % 4];
            s.seq += 1;
            let request = pb::ActRequest {
                token: s.token.clone(),
                game_id: s.game_id,
                seat: u32::from(s.seat),
                seq: s.seq,
                action: pb::Action::Idle as i32,
                inputs: Vec::new(),
            };
            let (t, a) = start();
            client.act(request).await.unwrap();
            if keep {
                grpc_act.record(t, a);
            }
        }
        if keep {
            grpc_act.cpu.add_since(cpu, pg_pid);
        }

        let cpu = Cpu::now(pg_pid);
        for i in 0..n {
            let s = &remote[i % 4];
            let request = pb::GetStateRequest {
                token: s.token.clone(),
                game_id: s.game_id,
            };
            let (t, a) = start();
            client.get_state(request).await.unwrap();
            if keep {
                grpc_state.record(t, a);
            }
        }
        if keep {
            grpc_state.cpu.add_since(cpu, pg_pid);
        }
    }

    let floor_p50 = floor.hist.value_at_quantile(0.5) as f64;
    let floor_p99 = floor.hist.value_at_quantile(0.99) as f64;
    println!();
    println!(
        "per-invocation latency, one client, {label} ({rounds} interleaved rounds x {calls} calls, {WARMUP_CALLS}-call warm-up excluded)"
    );
    println!(
        "{:<22} {:>7} {:>8} {:>8} {:>8} {:>8} {:>10} {:>10}",
        "path", "n", "p50 us", "p90 us", "p99 us", "max us", "p50/floor", "p99/floor"
    );
    let paths = [
        &floor,
        &held_floor,
        &cas_floor,
        &act,
        &state,
        &ping,
        &grpc_act,
        &grpc_state,
    ];
    for p in paths {
        let h = &p.hist;
        println!(
            "{:<22} {:>7} {:>8} {:>8} {:>8} {:>8} {:>10.2} {:>10.2}",
            p.name,
            h.len(),
            h.value_at_quantile(0.5),
            h.value_at_quantile(0.9),
            h.value_at_quantile(0.99),
            h.max(),
            h.value_at_quantile(0.5) as f64 / floor_p50,
            h.value_at_quantile(0.99) as f64 / floor_p99,
        );
    }
    let overhead_us = act.hist.value_at_quantile(0.5) as f64 - floor_p50;
    println!(
        "server-side overhead of Store::act over the floor at p50: {overhead_us:.0} us ({:.0}% of the floor)",
        100.0 * overhead_us / floor_p50
    );
    let cas_p50 = cas_floor.hist.value_at_quantile(0.5) as f64;
    let overhead_us = act.hist.value_at_quantile(0.5) as f64 - cas_p50;
    println!(
        "server-side overhead of Store::act over the CAS floor at p50: {overhead_us:.0} us ({:.0}% of it); \
         compare-and-set retries: {}",
        100.0 * overhead_us / cas_p50,
        store.cas_retries()
    );

    println!();
    println!(
        "per call: heap allocations and CPU in this process (a gRPC call counts client and \
         server), CPU in PostgreSQL"
    );
    println!(
        "{:<22} {:>10} {:>10} {:>10} {:>10}",
        "path", "allocs", "bytes", "CPU us", "PG CPU us"
    );
    for p in paths {
        let n = p.hist.len().max(1) as f64;
        let (allocs, bytes) = p.allocated.per_op(p.hist.len());
        let cpu_us = p.cpu.ours.as_secs_f64() * 1e6 / n;
        let pg_us = p.cpu.postgres.as_secs_f64() * 1e6 / n;
        println!(
            "{:<22} {allocs:>10.1} {bytes:>10.0} {cpu_us:>10.1} {pg_us:>10.1}",
            p.name
        );
    }

    let sizes = row_sizes(&pool, direct[0].game_id).await;
    println!();
    println!("bytes per call");
    println!(
        "{:<22} {:>10} {:>10} {:>12}",
        "path", "read", "written", "WAL/commit"
    );
    println!(
        "{:<22} {:>10} {:>10} {:>12.0}",
        floor.name,
        sizes.floor_row,
        sizes.floor_row,
        wal_floor.per_call()
    );
    println!(
        "{:<22} {:>10} {:>10} {:>12.0}",
        cas_floor.name,
        sizes.floor_row,
        sizes.floor_row,
        wal_cas.per_call()
    );
    // An Act reads the session row, its newest log row and the game row,
    // and writes a new game row and one log row (and locks the session
    // row for its write).
    let read = sizes.session_row + sizes.action_row + sizes.game_row;
    let written = sizes.game_row + sizes.action_row;
    println!(
        "{:<22} {:>10} {:>10} {:>12.0}",
        act.name,
        read,
        written,
        wal_act.per_call()
    );
    println!(
        "  state blob {} B; rows: game {} B, session {} B, action log {} B \
         (read = session + newest log row + game; written = game + log row)",
        sizes.state, sizes.game_row, sizes.session_row, sizes.action_row
    );
    server.shutdown().await.unwrap();
    let _ = sqlx::Connection::close(held).await;
    store.close().await;
}

async fn floor_txn(pool: &PgPool) {
    let tx = pool.begin().await.unwrap();
    floor_statements(tx).await;
}

async fn floor_txn_on(conn: &mut PgConnection) {
    let tx = sqlx::Connection::begin(conn).await.unwrap();
    floor_statements(tx).await;
}

/// The compare-and-set floor: read the row and its version, write it back
/// if the version is unchanged; two autocommitted statements on one
/// connection.
async fn floor_cas(pool: &PgPool) {
    let mut conn = pool.acquire().await.unwrap();
    let (state, version): (Vec<u8>, i64) =
        sqlx::query_as("SELECT state, version FROM floor_rows WHERE id = $1")
            .bind(1)
            .fetch_one(&mut *conn)
            .await
            .unwrap();
    let mut next = state;
    next[0] = next[0].wrapping_add(1);
    let written = sqlx::query(
        "UPDATE floor_rows SET state = $2, version = version + 1 WHERE id = $1 AND version = $3",
    )
    .bind(1)
    .bind(next)
    .bind(version)
    .execute(&mut *conn)
    .await
    .unwrap();
    assert_eq!(written.rows_affected(), 1);
}

async fn floor_statements(mut tx: sqlx::Transaction<'_, sqlx::Postgres>) {
    let state: Vec<u8> =
        sqlx::query_scalar("SELECT state FROM floor_rows WHERE id = $1 FOR UPDATE")
            .bind(1)
            .fetch_one(&mut *tx)
            .await
            .unwrap();
    let mut next = state;
    next[0] = next[0].wrapping_add(1);
    sqlx::query("UPDATE floor_rows SET state = $2 WHERE id = $1")
        .bind(1)
        .bind(next)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
}

async fn seat_four(store: &Store, prefix: &str) -> Vec<Seat> {
    // Tokens as the servers issue them (signed with the cluster's session
    // key): a server refuses any other as a session it did not issue.
    let key = store.session_key().await.unwrap();
    let mut seats = Vec::new();
    for i in 0..4 {
        let token = key.issue(&token::draw());
        let hash = token::hash(&token);
        let joined = store
            .join(
                &hash,
                &Identity::session_only(&hash),
                &format!("{prefix}{i}"),
                None,
            )
            .await
            .unwrap();
        seats.push(Seat {
            token,
            game_id: joined.game_id,
            seat: joined.seat,
            seq: joined.last_seq,
        });
    }
    assert!(seats.iter().all(|s| s.game_id == seats[0].game_id));
    seats
}

/// WAL bytes written per call, summed over the measured rounds.
struct WalMeter {
    bytes: std::sync::atomic::AtomicU64,
    calls: std::sync::atomic::AtomicU64,
}

impl WalMeter {
    fn new() -> Self {
        WalMeter {
            bytes: 0.into(),
            calls: 0.into(),
        }
    }

    async fn start(&self, pool: &PgPool) -> String {
        sqlx::query_scalar("SELECT pg_current_wal_insert_lsn()::text")
            .fetch_one(pool)
            .await
            .unwrap()
    }

    async fn stop(&self, pool: &PgPool, from: String, calls: usize, keep: bool) {
        let bytes: f64 = sqlx::query_scalar(
            "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)::float8",
        )
        .bind(from)
        .fetch_one(pool)
        .await
        .unwrap();
        if keep {
            use std::sync::atomic::Ordering::Relaxed;
            self.bytes.fetch_add(bytes as u64, Relaxed);
            self.calls.fetch_add(calls as u64, Relaxed);
        }
    }

    fn per_call(&self) -> f64 {
        use std::sync::atomic::Ordering::Relaxed;
        self.bytes.load(Relaxed) as f64 / self.calls.load(Relaxed).max(1) as f64
    }
}

struct RowSizes {
    floor_row: i64,
    state: i64,
    game_row: i64,
    session_row: i64,
    action_row: i64,
}

async fn row_sizes(pool: &PgPool, game_id: u64) -> RowSizes {
    let row = sqlx::query(
        "SELECT (SELECT pg_column_size(f.*) FROM floor_rows f WHERE id = 1)::int8, \
                (SELECT octet_length(state) FROM games WHERE id = $1)::int8, \
                (SELECT pg_column_size(g.*) FROM games g WHERE id = $1)::int8, \
                (SELECT avg(pg_column_size(s.*)) FROM sessions s WHERE game_id = $1)::int8, \
                (SELECT avg(pg_column_size(a.*)) FROM actions a WHERE game_id = $1)::int8",
    )
    .bind(game_id as i64)
    .fetch_one(pool)
    .await
    .unwrap();
    RowSizes {
        floor_row: row.get(0),
        state: row.get(1),
        game_row: row.get(2),
        session_row: row.get(3),
        action_row: row.get(4),
    }
}
