//! Moving a partition to another cluster while its games play
//! (`borbaman db move`).
//!
//! PostgreSQL moves the rows: `COPY` of the partition's rows as of one
//! snapshot, then a publication on the source with a row filter on the
//! partition and a subscription on the target that streams every change
//! after that snapshot (not the subscription's own initial copy: see
//! [`copy_rows`] for why). The cut-over is a fence in the writes
//! themselves (`partition_fence`, see [`moves`](super::moves)):
//!
//! 1. `copying`: the partition is made read-only on the target (nobody
//!    sends it a write yet; this keeps it so), what the target has of the
//!    partition from an earlier move is deleted, the publication and its
//!    slot are made, the rows copied (the partition read-only on the
//!    source for the few milliseconds of taking the snapshot), and the
//!    subscription made; the mover waits until the target streams (has
//!    received the source's WAL up to where it was then).
//! 2. `fencing` → `fenced`: on the source, the partition is made
//!    read-only; once every transaction that began before that commit has
//!    ended (a write that began after saw the fence), a mark is written.
//!    From here no cluster takes a write for the partition; the servers'
//!    calls for its games wait. (See [`fence`] for how.)
//! 3. `flipped`: once the mark reached the target (so did every write the
//!    source took before it), the partition is made writable there and the
//!    map sends it there (its version bumped); the calls that waited go
//!    there within [`MOVED_POLL`](super::moves::MOVED_POLL). Players in its
//!    running games are placed on the target (a join they retry finds
//!    their game).
//! 4. `done`: the subscription, the slot and the publication are dropped,
//!    and, once every server has had time to read the new map, the
//!    source's copy is deleted in batches of games.
//!
//! Each step is recorded at home (`partition_moves`) before the next
//! starts, and each is idempotent, so a mover killed anywhere is finished
//! by running the move again. A partition is writable on at most one
//! cluster at any moment: the source until step 2 commits, the target
//! from step 3; between the two (and if the mover dies there, until it is
//! run again) on none. If the source's replication slot is gone (a
//! Patroni failover does not carry it) the copy is made again: while the
//! partition is read-only on the source, a fresh copy is complete.

use std::time::Duration;

use anyhow::{Context, bail};
use serde::Serialize;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio::time::Instant;

use super::partitions::{HOME, PARTITIONS, crash_point};

/// Tables holding a partition's rows, with the row filter of each: only
/// columns of its replica identity (see migration `partition_moves`).
/// Children first: the order rows are deleted in.
const TABLES: &[(&str, &str)] = &[
    ("actions", "game_id"),
    ("seat_log", "game_id"),
    ("seats", "game_id"),
    ("results", "game_id"),
    ("sessions", "game_id"),
    ("games", "id"),
];

/// Games whose rows one delete statement of the clean-up removes.
const DELETE_BATCH: i64 = 200;

/// How long after the map moved the source's copy is kept: servers read
/// the map every 500 ms, so a server with the old map finds the fence
/// (and is answered "moved"), not an empty partition.
const KEEP_SOURCE_COPY: Duration = Duration::from_secs(2);

/// How long the fence waits for the writes in flight on the source before
/// it gives up and tries again: while it waits, every write on the source
/// queues behind it.
const FENCE_LOCK_TIMEOUT_MS: u32 = 5;

/// How long a copy may keep failing (a worker's error, retried by
/// PostgreSQL) before the mover gives up and says so.
const COPY_ERRORS_FOR: Duration = Duration::from_secs(30);

/// A server whose heartbeat is older than this is not waited for by a
/// move (servers beat every 250 ms and are unlisted after 1 s by default).
const SERVER_LIVE_WITHIN: Duration = Duration::from_secs(2);

/// How long a move waits for the live servers to open its target before
/// it gives up, the partition still on its source.
const SERVERS_OPEN_WITHIN: Duration = Duration::from_secs(60);

/// The move's steps, in order, as `partition_moves.step` names them.
const STEPS: &[&str] = &["copying", "fencing", "fenced", "flipped", "done"];

/// What `db move` reports.
#[derive(Clone, Debug, Serialize)]
pub struct MoveReport {
    pub partition: u16,
    pub source: String,
    pub target: String,
    /// The partition was on the target already: nothing was done.
    pub already_there: bool,
    /// The move was resumed at this step (a mover ended before it).
    pub resumed_at: Option<String>,
    /// How long the copy took (publication to streaming), ms.
    pub copy_ms: Option<f64>,
    /// How long the partition was read-only on the source while the
    /// copy's snapshot was taken, ms (its games' calls waited).
    pub copy_read_only_ms: Option<f64>,
    /// How long no cluster took writes for the partition, ms: the stall
    /// of its games' calls at the cut-over.
    pub read_only_ms: Option<f64>,
    /// Of that, how long the target took to apply the source's last
    /// writes (the mark's way), ms.
    pub catch_up_ms: Option<f64>,
    /// Games deleted from the source afterwards.
    pub source_games_deleted: u64,
    /// The whole move, ms.
    pub total_ms: f64,
}

/// A cluster as the mover reaches it.
struct Reached {
    name: String,
    /// The URL of its primary.
    url: String,
    pool: PgPool,
}

/// Moves `partition` to cluster `target` (see the module docs), telling
/// `say` each step. `home_url`: the home cluster, as servers are given it.
pub async fn move_partition(
    home_url: &str,
    partition: u16,
    target: &str,
    say: &mut (dyn FnMut(String) + Send),
) -> anyhow::Result<MoveReport> {
    if u64::from(partition) >= PARTITIONS {
        bail!(
            "no partition {partition}: partitions are 0 to {}",
            PARTITIONS - 1
        );
    }
    let started = Instant::now();
    let home = connect(home_url).await.context("home cluster")?;
    let owner: String =
        sqlx::query_scalar("SELECT cluster FROM partition_map WHERE partition = $1")
            .bind(partition as i16)
            .fetch_one(&home)
            .await?;
    let known: Option<String> = sqlx::query_scalar("SELECT name FROM db_clusters WHERE name = $1")
        .bind(target)
        .fetch_optional(&home)
        .await?;
    if known.is_none() {
        bail!("no cluster named {target:?} (see `borbaman db clusters`)");
    }
    let open: Option<(i64, String, String, String)> = sqlx::query_as(
        "SELECT id, source, target, step FROM partition_moves \
         WHERE partition = $1 AND step <> 'done'",
    )
    .bind(partition as i16)
    .fetch_optional(&home)
    .await?;
    let mut report = MoveReport {
        partition,
        source: owner.clone(),
        target: target.to_string(),
        already_there: false,
        resumed_at: None,
        copy_ms: None,
        copy_read_only_ms: None,
        read_only_ms: None,
        catch_up_ms: None,
        source_games_deleted: 0,
        total_ms: 0.0,
    };
    let (id, source, mut step) = match open {
        Some((id, source, moving_to, step)) => {
            if moving_to != target {
                bail!(
                    "partition {partition} is moving from {source} to {moving_to} ({step}); \
                     finish that first: borbaman db move {partition} --to {moving_to}"
                );
            }
            say(format!(
                "partition {partition}: resuming its move from {source} to {target} at `{step}`"
            ));
            report.resumed_at = Some(step.clone());
            (id, source, step)
        }
        None if owner == target => {
            say(format!("partition {partition} is on {target} already"));
            report.already_there = true;
            home.close().await;
            return Ok(report);
        }
        None => {
            let id: i64 = sqlx::query_scalar(
                "INSERT INTO partition_moves (partition, id, source, target, step) \
                 VALUES ($1, nextval('partition_move_ids'), $2, $3, 'copying') \
                 ON CONFLICT (partition) DO UPDATE SET id = excluded.id, source = excluded.source, \
                   target = excluded.target, step = excluded.step, started_at = now(), \
                   fenced_at = NULL, flipped_at = NULL, done_at = NULL \
                 RETURNING id",
            )
            .bind(partition as i16)
            .bind(&owner)
            .bind(target)
            .fetch_one(&home)
            .await?;
            say(format!(
                "partition {partition}: moving from {owner} to {target}"
            ));
            crash_point("move-started");
            (id, owner.clone(), "copying".to_string())
        }
    };
    report.source = source.clone();
    let names = Names::of(partition);
    let src = reach(&home, home_url, &source).await?;
    let dst = reach(&home, home_url, target).await?;
    let mut fenced_at = None;
    while step != "done" {
        step = match step.as_str() {
            "copying" => {
                let copy = Instant::now();
                report.copy_read_only_ms =
                    prepare(&src, &dst, partition, &names, true, say).await?;
                report.copy_ms = Some(ms(copy.elapsed()));
                record(&home, partition, "fencing", "").await?;
                crash_point("move-copied");
                "fencing".into()
            }
            "fencing" => {
                // Read-only from the fence's commit, the wait for the
                // transactions older than it included.
                await_servers(&home, partition, target, say).await?;
                let fencing = Instant::now();
                fence(&src, partition, Some(id)).await?;
                fenced_at = Some(fencing);
                let since = format!(
                    ", fenced_at = now() - interval '{:.3} milliseconds'",
                    ms(fencing.elapsed())
                );
                record(&home, partition, "fenced", &since).await?;
                say(format!("partition {partition}: read-only on {source}"));
                crash_point("move-fenced");
                "fenced".into()
            }
            "fenced" => {
                let catch_up = Instant::now();
                await_mark(&src, &dst, partition, id, &names, say).await?;
                report.catch_up_ms = Some(ms(catch_up.elapsed()));
                flip(&home, &dst, partition, &source, target).await?;
                let read_only = match fenced_at {
                    Some(at) => ms(at.elapsed()),
                    None => read_only_ms(&home, partition).await?,
                };
                report.read_only_ms = Some(read_only);
                say(format!(
                    "partition {partition}: writable on {target}, the map sends its games there \
                     (read-only for {read_only:.1} ms)"
                ));
                crash_point("move-flipped");
                "flipped".into()
            }
            "flipped" => {
                drop_replication(&src, &dst, &names).await?;
                let since: f64 = sqlx::query_scalar(
                    "SELECT extract(epoch FROM now() - flipped_at)::float8 \
                     FROM partition_moves WHERE partition = $1",
                )
                .bind(partition as i16)
                .fetch_one(&home)
                .await?;
                let kept: bool =
                    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM games WHERE (id % 64) = $1)")
                        .bind(i64::from(partition))
                        .fetch_one(&src.pool)
                        .await?;
                if kept {
                    // Nothing to find there otherwise: no wait.
                    let wait =
                        KEEP_SOURCE_COPY.saturating_sub(Duration::from_secs_f64(since.max(0.0)));
                    tokio::time::sleep(wait).await;
                }
                report.source_games_deleted = delete_partition(&src, partition, say).await?;
                record(&home, partition, "done", ", done_at = now()").await?;
                say(format!(
                    "partition {partition}: done; {} games deleted from {source}",
                    report.source_games_deleted
                ));
                "done".into()
            }
            other => bail!("partition {partition}'s move is at an unknown step {other:?}"),
        };
    }
    if report.read_only_ms.is_none() {
        report.read_only_ms = read_only_ms(&home, partition).await.ok();
    }
    for pool in [&home, &src.pool, &dst.pool] {
        pool.close().await;
    }
    report.total_ms = ms(started.elapsed());
    Ok(report)
}

/// The moves (partition, target) that spread the partitions evenly over
/// `clusters`: each cluster ends with 64 / n of them, the first 64 % n
/// clusters (in number order) one more; partitions leave the fullest
/// clusters first, highest numbers first, and go to the emptiest.
pub fn plan_rebalance(clusters: &[super::partitions::ClusterRow]) -> Vec<(u16, String)> {
    let n = clusters.len();
    if n == 0 {
        return Vec::new();
    }
    let mut order: Vec<&super::partitions::ClusterRow> = clusters.iter().collect();
    order.sort_by_key(|c| c.number);
    let share = |i: usize| PARTITIONS as usize / n + usize::from(i < PARTITIONS as usize % n);
    let mut held: Vec<Vec<u16>> = order.iter().map(|c| c.partitions.clone()).collect();
    let mut moves = Vec::new();
    loop {
        let over = (0..n)
            .filter(|&i| held[i].len() > share(i))
            .max_by_key(|&i| held[i].len() - share(i));
        let under = (0..n)
            .filter(|&i| held[i].len() < share(i))
            .max_by_key(|&i| share(i) - held[i].len());
        let (Some(from), Some(to)) = (over, under) else {
            return moves;
        };
        held[from].sort_unstable();
        let partition = held[from]
            .pop()
            .expect("an over-full cluster holds partitions");
        held[to].push(partition);
        moves.push((partition, order[to].name.clone()));
    }
}

/// The names of a partition's publication, slot and subscription.
struct Names {
    publication: String,
    slot: String,
    subscription: String,
}

impl Names {
    fn of(partition: u16) -> Names {
        let name = format!("borbaman_move_{partition}");
        Names {
            publication: name.clone(),
            slot: name.clone(),
            subscription: name,
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn connect(url: &str) -> anyhow::Result<PgPool> {
    let pool = PgPoolOptions::new()
        .max_connections(3)
        .acquire_timeout(Duration::from_secs(10))
        .connect(url)
        .await
        .with_context(|| format!("cannot connect to {url}"))?;
    Ok(pool)
}

/// Cluster `name`'s primary, from home's list (its Patroni members asked
/// for the leader when it has them).
async fn reach(home: &PgPool, home_url: &str, name: &str) -> anyhow::Result<Reached> {
    let (url, patroni): (Option<String>, Vec<String>) =
        sqlx::query_as("SELECT url, patroni FROM db_clusters WHERE name = $1")
            .bind(name)
            .fetch_one(home)
            .await?;
    let mut url = url.unwrap_or_else(|| home_url.to_string());
    if name != HOME || !patroni.is_empty() {
        url = primary_url(&url, &patroni).await?;
    }
    let pool = connect(&url)
        .await
        .with_context(|| format!("cluster {name}"))?;
    // A cluster whose fence was never set from the map (the servers set
    // it when they first open a cluster) gets it now, before any step.
    let held: Vec<i16> =
        sqlx::query_scalar("SELECT partition FROM partition_map WHERE cluster = $1")
            .bind(name)
            .fetch_all(home)
            .await?;
    sqlx::query(super::partitions::SET_FENCE)
        .bind(&held)
        .execute(&pool)
        .await?;
    Ok(Reached {
        name: name.to_string(),
        url,
        pool,
    })
}

/// `url` with the host and port of the Patroni leader of `members` (as
/// is when there are none).
async fn primary_url(url: &str, members: &[String]) -> anyhow::Result<String> {
    if members.is_empty() {
        return Ok(url.to_string());
    }
    let mut last = None;
    for member in members {
        let member: crate::patroni::Member = member.parse().map_err(anyhow::Error::msg)?;
        match crate::patroni::leader_address(&member, Duration::from_secs(2)).await {
            Ok(leader) => return Ok(with_address(url, &leader.host, leader.port)),
            Err(err) => last = Some(err),
        }
    }
    bail!(
        "no Patroni member named a leader: {}",
        last.map(|e| e.to_string()).unwrap_or_default()
    )
}

/// `url` (`postgres://[user[:password]@]host[:port][/db][?options]`) with
/// its host and port replaced.
fn with_address(url: &str, host: &str, port: u16) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("postgres", url));
    let (user, rest) = match rest.rfind('@') {
        Some(at) => (&rest[..=at], &rest[at + 1..]),
        None => ("", rest),
    };
    let tail = rest.find(['/', '?']).map_or("", |at| &rest[at..]);
    format!("{scheme}://{user}{host}:{port}{tail}")
}

async fn record(home: &PgPool, partition: u16, step: &str, extra: &str) -> anyhow::Result<()> {
    debug_assert!(STEPS.contains(&step));
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE partition_moves SET step = $2{extra} WHERE partition = $1"
    )))
    .bind(partition as i16)
    .bind(step)
    .execute(home)
    .await?;
    Ok(())
}

async fn read_only_ms(home: &PgPool, partition: u16) -> anyhow::Result<f64> {
    let ms: Option<f64> = sqlx::query_scalar(
        "SELECT (extract(epoch FROM flipped_at - fenced_at) * 1000)::float8 \
         FROM partition_moves WHERE partition = $1",
    )
    .bind(partition as i16)
    .fetch_one(home)
    .await?;
    Ok(ms.unwrap_or(0.0))
}

/// Step 1: the target fenced and emptied of the partition, the
/// publication and slot made, the rows copied ([`copy_rows`]), the
/// subscription made to stream the rest. `reopen`: whether the source
/// takes the partition's writes again once the copy's snapshot is taken
/// (not when the move is past its fence).
async fn prepare(
    src: &Reached,
    dst: &Reached,
    partition: u16,
    names: &Names,
    reopen: bool,
    say: &mut (dyn FnMut(String) + Send),
) -> anyhow::Result<Option<f64>> {
    if src.name == dst.name {
        bail!("the source and the target are the same cluster");
    }
    sqlx::query("UPDATE partition_fence SET writable = false WHERE partition = $1")
        .bind(partition as i16)
        .execute(&dst.pool)
        .await?;
    let subscribed: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_subscription WHERE subname = $1)")
            .bind(&names.subscription)
            .fetch_one(&dst.pool)
            .await?;
    let slot: bool = slot_exists(&src.pool, &names.slot).await?;
    if subscribed && !slot {
        say(format!(
            "partition {partition}: the source's slot is gone (a failover?): copying again"
        ));
        drop_subscription(&dst.pool, &names.subscription).await?;
    }
    if !subscribed || !slot {
        // An earlier move's mark and rows, which the copy would clash with.
        sqlx::query("DELETE FROM move_marks WHERE partition = $1")
            .bind(partition as i16)
            .execute(&dst.pool)
            .await?;
        let deleted = delete_partition(dst, partition, &mut |_| {}).await?;
        if deleted > 0 {
            say(format!(
                "partition {partition}: {deleted} games of an earlier copy deleted from {}",
                dst.name
            ));
        }
    }
    publish(&src.pool, partition, names).await?;
    let mut read_only_ms = None;
    if !subscribed || !slot {
        // A fresh slot: its start must come before the copy's snapshot.
        drop_slot(src, &names.slot).await?;
        sqlx::query("SELECT pg_create_logical_replication_slot($1, 'pgoutput')")
            .bind(&names.slot)
            .execute(&src.pool)
            .await
            .context("creating the replication slot on the source (wal_level = logical?)")?;
        say(format!(
            "partition {partition}: copying from {} to {}",
            src.name, dst.name
        ));
        let copied = copy_rows(src, dst, partition, names, reopen).await?;
        say(format!(
            "partition {partition}: {} rows copied (read-only on {} for {:.1} ms to read them \
             whole); streaming the rest",
            copied.rows, src.name, copied.read_only_ms
        ));
        read_only_ms = Some(copied.read_only_ms);
        crash_point("move-rows-copied");
        // Not a bind parameter: CREATE SUBSCRIPTION takes none.
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "CREATE SUBSCRIPTION {} CONNECTION {} PUBLICATION {} \
             WITH (create_slot = false, slot_name = {}, copy_data = false)",
            names.subscription,
            quote_literal(&src.url),
            names.publication,
            quote_literal(&names.slot)
        )))
        .execute(&dst.pool)
        .await
        .context("creating the subscription on the target")?;
    }
    // Streaming means the target has received the source's WAL up to
    // here: the fence that follows then waits only for what came after,
    // not for the subscription's worker to start and read the WAL written
    // during the copy.
    let point: String = sqlx::query_scalar("SELECT pg_current_wal_lsn()::text")
        .fetch_one(&src.pool)
        .await?;
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut last_said = Instant::now();
    let mut failing = CopyFailing::above(0);
    loop {
        let errors = copy_errors(dst, names).await?;
        if failing.too_long(errors) {
            bail!(
                "partition {partition}: the copy to {} keeps failing ({errors} errors); \
                 see that cluster's PostgreSQL log, then run the move again",
                dst.name
            );
        }
        let (ready, tables): (i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE r.srsubstate = 'r'), count(*) \
             FROM pg_subscription_rel r JOIN pg_subscription s ON s.oid = r.srsubid \
             WHERE s.subname = $1",
        )
        .bind(&names.subscription)
        .fetch_one(&dst.pool)
        .await?;
        let received: Option<Option<bool>> = sqlx::query_scalar(
            "SELECT received_lsn >= $2::pg_lsn FROM pg_stat_subscription \
             WHERE subname = $1 AND relid IS NULL AND pid IS NOT NULL",
        )
        .bind(&names.subscription)
        .bind(&point)
        .fetch_optional(&dst.pool)
        .await?;
        let streaming = received.flatten() == Some(true);
        if tables > 0 && ready == tables && streaming {
            return Ok(read_only_ms);
        }
        if last_said.elapsed() >= Duration::from_secs(2) {
            say(format!(
                "partition {partition}: copying, {ready} of {tables} tables ready, {}",
                if streaming {
                    "streaming"
                } else {
                    "the target not streaming the source's changes yet"
                }
            ));
            last_said = Instant::now();
        }
        if Instant::now() >= deadline {
            bail!(
                "partition {partition}: the copy to {} did not finish within 10 minutes \
                 ({ready} of {tables} tables); see the target's PostgreSQL log",
                dst.name
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Tables a move copies: the partition's rows ([`TABLES`]), parents
/// first, and the move marks (a later fence's mark then finds its row).
fn copied_tables(partition: u16) -> Vec<(&'static str, String)> {
    TABLES
        .iter()
        .rev()
        .map(|(table, column)| (*table, format!("({column} % 64) = {partition}")))
        .chain(std::iter::once((
            "move_marks",
            format!("partition = {partition}"),
        )))
        .collect()
}

/// What [`copy_rows`] did.
struct Copied {
    rows: u64,
    /// How long the partition was read-only on the source for it, ms.
    read_only_ms: f64,
}

/// The partition's rows copied from the source to the target as of one
/// ordinary snapshot, and the slot advanced to that snapshot's point in
/// the source's WAL, so the subscription streams exactly the changes the
/// copy lacks.
///
/// Not PostgreSQL's own initial copy (`copy_data = true`): its table
/// synchronisation reads under a snapshot built by logical decoding, which
/// can count a transaction committed before the commit log says so, and
/// then marks that transaction's rows dead for good on the source (a race
/// in PostgreSQL itself, reported on pgsql-hackers in January 2026, and
/// seen here: a game's row one version behind its log, on a partition not
/// even moving; see `docs/scaling.md`). An ordinary snapshot has no such
/// moment. To tie it to a point in the WAL, the partition is read-only on
/// the source while the snapshot is taken (every write of it that began
/// earlier has ended): its commits are then all before the point, and the
/// next all after. That costs the partition's games a few milliseconds;
/// the copy itself runs with the partition writable again (`reopen`).
async fn copy_rows(
    src: &Reached,
    dst: &Reached,
    partition: u16,
    names: &Names,
    reopen: bool,
) -> anyhow::Result<Copied> {
    let fenced = Instant::now();
    fence(src, partition, None).await?;
    crash_point("move-snapshot");
    let taken = async {
        let mut from = src.pool.begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *from)
            .await?;
        // The snapshot is taken at this first statement; every commit it
        // sees was logged before the position read.
        let point: String = sqlx::query_scalar("SELECT pg_current_wal_insert_lsn()::text")
            .fetch_one(&mut *from)
            .await?;
        Ok::<_, sqlx::Error>((from, point))
    }
    .await;
    if reopen {
        // Whether or not the snapshot was taken: a move that fails here is
        // run again, and its games need not wait for that.
        sqlx::query("UPDATE partition_fence SET writable = true WHERE partition = $1")
            .bind(partition as i16)
            .execute(&src.pool)
            .await?;
    }
    let (mut from, point) = taken.context("taking the copy's snapshot on the source")?;
    let read_only_ms = ms(fenced.elapsed());
    let mut into = dst.pool.begin().await?;
    let mut rows = 0;
    for (table, filter) in copied_tables(partition) {
        // Generated columns are computed by each database.
        let columns: String = sqlx::query_scalar(
            "SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) FROM pg_attribute \
             WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped \
               AND attgenerated = ''",
        )
        .bind(table)
        .fetch_one(&mut *into)
        .await?;
        let mut sink = into
            .copy_in_raw(&format!(
                "COPY {table} ({columns}) FROM STDIN (FORMAT binary)"
            ))
            .await
            .with_context(|| format!("copying {table} into {}", dst.name))?;
        {
            let mut chunks = from
                .copy_out_raw(&format!(
                    "COPY (SELECT {columns} FROM {table} WHERE {filter}) TO STDOUT (FORMAT binary)"
                ))
                .await
                .with_context(|| format!("copying {table} from {}", src.name))?;
            while let Some(chunk) = tokio_stream::StreamExt::next(&mut chunks).await {
                sink.send(chunk?).await?;
            }
        }
        rows += sink.finish().await?;
    }
    into.commit().await?;
    from.commit().await?;
    sqlx::query("SELECT pg_replication_slot_advance($1, $2::pg_lsn)")
        .bind(&names.slot)
        .bind(&point)
        .execute(&src.pool)
        .await
        .context("advancing the replication slot to the copy's snapshot")?;
    Ok(Copied { rows, read_only_ms })
}

/// Drops replication slot `slot` on the source if it is there.
async fn drop_slot(src: &Reached, slot: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // A walsender that has not noticed its subscriber is gone still
        // holds the slot for a moment.
        let dropped = sqlx::query(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots \
             WHERE slot_name = $1",
        )
        .bind(slot)
        .execute(&src.pool)
        .await;
        match dropped {
            Ok(_) => return Ok(()),
            Err(err) if Instant::now() < deadline => {
                tracing::debug!(error = %err, "the slot is still in use");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(err) => return Err(err).context("dropping the replication slot on the source"),
        }
    }
}

/// The errors the subscription's workers have met so far (each one
/// retried by PostgreSQL): the copy of a table, or a change applied.
async fn copy_errors(dst: &Reached, names: &Names) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT coalesce(sum(sync_error_count + apply_error_count), 0)::bigint \
         FROM pg_stat_subscription_stats WHERE subname = $1",
    )
    .bind(&names.subscription)
    .fetch_one(&dst.pool)
    .await?)
}

/// A subscription's error counter watched from a starting count: failing
/// once it rose above it, too long once that lasted [`COPY_ERRORS_FOR`].
struct CopyFailing {
    before: i64,
    since: Option<Instant>,
}

impl CopyFailing {
    fn above(before: i64) -> CopyFailing {
        CopyFailing {
            before,
            since: None,
        }
    }

    /// Takes the counter's latest value; whether the copy has been failing
    /// for [`COPY_ERRORS_FOR`].
    fn too_long(&mut self, errors: i64) -> bool {
        if errors > self.before && self.since.is_none() {
            self.since = Some(Instant::now());
        }
        self.since.is_some_and(|at| at.elapsed() >= COPY_ERRORS_FOR)
    }
}

async fn slot_exists(pool: &PgPool, slot: &str) -> anyhow::Result<bool> {
    Ok(sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)",
    )
    .bind(slot)
    .fetch_one(pool)
    .await?)
}

/// The source's publication of the partition's rows and its mark.
async fn publish(pool: &PgPool, partition: u16, names: &Names) -> anyhow::Result<()> {
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)")
            .bind(&names.publication)
            .fetch_one(pool)
            .await?;
    if exists {
        return Ok(());
    }
    let tables: Vec<String> = TABLES
        .iter()
        .map(|(table, column)| format!("{table} WHERE (({column} % 64) = {partition})"))
        .chain(std::iter::once(format!(
            "move_marks WHERE (partition = {partition})"
        )))
        .collect();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE PUBLICATION {} FOR TABLE {}",
        names.publication,
        tables.join(", ")
    )))
    .execute(pool)
    .await
    .context("creating the publication on the source")?;
    Ok(())
}

/// Step 2: the partition read-only on the source, then, once no write
/// that could have read the fence before is still in flight, the mark
/// of move `id` (none for the copy's moment of [`copy_rows`]).
///
/// Without blocking anyone: the fence commits, then the mover waits for
/// every transaction on the database that began before that commit to
/// end (`pg_stat_activity`): a write that began later saw the fence. Where
/// the mover cannot see the other sessions' transactions (neither
/// superuser, nor the servers' role, nor `pg_read_all_stats`), it takes
/// the fence table's lock instead, which waits for them the same way but
/// holds every write on that cluster behind it meanwhile
/// ([`fence_under_lock`]).
async fn fence(src: &Reached, partition: u16, id: Option<i64>) -> anyhow::Result<()> {
    let unseen: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
         AND backend_type = 'client backend' AND state IS NULL",
    )
    .fetch_one(&src.pool)
    .await?;
    if unseen > 0 {
        return fence_under_lock(src, partition, id).await;
    }
    let fenced_at: i64 = {
        let mut tx = src.pool.begin().await?;
        sqlx::query("UPDATE partition_fence SET writable = false WHERE partition = $1")
            .bind(partition as i16)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        // Read after the commit: a transaction that began at or after it
        // began after the fence was in.
        sqlx::query_scalar("SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint")
            .fetch_one(&src.pool)
            .await?
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let older: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
             AND backend_type = 'client backend' AND pid <> pg_backend_pid() \
             AND xact_start < to_timestamp($1::float8 / 1000000)",
        )
        .bind(fenced_at as f64)
        .fetch_one(&src.pool)
        .await?;
        if older == 0 {
            break;
        }
        if Instant::now() >= deadline {
            bail!(
                "partition {partition}: {older} transactions older than the fence still run on \
                 {} after 30 s; run the move again once they end",
                src.name
            );
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    match id {
        Some(id) => mark(&src.pool, partition, id).await,
        None => Ok(()),
    }
}

/// Writes the move's mark (`$1` partition, `$2` move id) on the source.
const MARK: &str = "INSERT INTO move_marks (partition, move_id) VALUES ($1, $2) \
     ON CONFLICT (partition) DO UPDATE SET move_id = excluded.move_id";

/// The move's mark, flushed at commit even where commits are not (a
/// cluster run with synchronous_commit off): the source sends the target
/// only WAL flushed, and every write before the mark is there.
async fn mark(pool: &PgPool, partition: u16, id: i64) -> anyhow::Result<()> {
    let mut tx = pool.begin().await?;
    sqlx::query("SET LOCAL synchronous_commit = on")
        .execute(&mut *tx)
        .await?;
    sqlx::query(MARK)
        .bind(partition as i16)
        .bind(id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

/// [`fence`] under the fence table's lock: the fence and the mark in one
/// transaction; retried while the writes in flight hold the lock past
/// [`FENCE_LOCK_TIMEOUT_MS`].
async fn fence_under_lock(src: &Reached, partition: u16, id: Option<i64>) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let attempt = async {
            let mut tx = src.pool.begin().await?;
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "SET LOCAL lock_timeout = '{FENCE_LOCK_TIMEOUT_MS}ms'"
            )))
            .execute(&mut *tx)
            .await?;
            sqlx::query("SET LOCAL synchronous_commit = on")
                .execute(&mut *tx)
                .await?;
            sqlx::query("LOCK TABLE partition_fence IN ACCESS EXCLUSIVE MODE")
                .execute(&mut *tx)
                .await?;
            sqlx::query("UPDATE partition_fence SET writable = false WHERE partition = $1")
                .bind(partition as i16)
                .execute(&mut *tx)
                .await?;
            if let Some(id) = id {
                sqlx::query(MARK)
                    .bind(partition as i16)
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            Ok::<_, sqlx::Error>(())
        }
        .await;
        match attempt {
            Ok(()) => return Ok(()),
            Err(sqlx::Error::Database(db))
                if db.code().as_deref() == Some("55P03") && Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(rand::random_range(5..20))).await;
            }
            Err(err) => return Err(err).context("fencing the partition on the source"),
        }
    }
}

/// Waits until every live server that reports its clusters (see
/// `servers.clusters`) has opened `target`, so that none of them keeps
/// sending the partition's games to the fenced source once it moves. The
/// partition stays writable on the source meanwhile; a wait that does not
/// end within [`SERVERS_OPEN_WITHIN`] ends the move, naming the servers.
async fn await_servers(
    home: &PgPool,
    partition: u16,
    target: &str,
    say: &mut (dyn FnMut(String) + Send),
) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut last_said = Instant::now();
    loop {
        let missing: Vec<String> = sqlx::query_scalar(
            "SELECT address FROM servers \
             WHERE heartbeat_at > clock_timestamp() - $2 * interval '1 millisecond' \
               AND clusters IS NOT NULL AND NOT ($1 = ANY (clusters)) \
             ORDER BY address",
        )
        .bind(target)
        .bind(SERVER_LIVE_WITHIN.as_millis() as f64)
        .fetch_all(home)
        .await?;
        if missing.is_empty() {
            return Ok(());
        }
        if started.elapsed() >= SERVERS_OPEN_WITHIN {
            bail!(
                "partition {partition}: the live servers {} have not opened {target} within \
                 {} s (the partition stays on its cluster); check that they reach {target}'s \
                 database, then run the move again",
                missing.join(", "),
                SERVERS_OPEN_WITHIN.as_secs()
            );
        }
        if last_said.elapsed() >= Duration::from_secs(2) {
            say(format!(
                "partition {partition}: waiting for {} to open {target}",
                missing.join(", ")
            ));
            last_said = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the target has the move's mark (and so every write the
/// source took for the partition). If the source's slot is gone, the copy
/// is made again (the partition is read-only on the source, so it is
/// complete).
async fn await_mark(
    src: &Reached,
    dst: &Reached,
    partition: u16,
    id: i64,
    names: &Names,
    say: &mut (dyn FnMut(String) + Send),
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut checked = Instant::now();
    let errors_before = copy_errors(dst, names).await.unwrap_or(0);
    let mut failing = CopyFailing::above(errors_before);
    loop {
        let mark: Option<i64> =
            sqlx::query_scalar("SELECT move_id FROM move_marks WHERE partition = $1")
                .bind(partition as i16)
                .fetch_optional(&dst.pool)
                .await?;
        if mark == Some(id) {
            return Ok(());
        }
        if checked.elapsed() >= Duration::from_secs(1) {
            checked = Instant::now();
            let subscribed: bool = sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM pg_subscription WHERE subname = $1)",
            )
            .bind(&names.subscription)
            .fetch_one(&dst.pool)
            .await?;
            if !subscribed || !slot_exists(&src.pool, &names.slot).await? {
                prepare(src, dst, partition, names, false, say).await?;
            } else {
                // A change the target cannot apply (a row it refuses) holds
                // the mark back for good: say so instead of waiting it out.
                let errors = copy_errors(dst, names).await?;
                if failing.too_long(errors) {
                    bail!(
                        "partition {partition}: {} keeps failing to apply the partition's \
                         changes ({} errors) while the partition is read-only on {}; see \
                         {}'s PostgreSQL log, then run the move again",
                        dst.name,
                        errors - errors_before,
                        src.name,
                        dst.name
                    );
                }
            }
        }
        if Instant::now() >= deadline {
            bail!(
                "partition {partition}: {} did not receive the move's mark within 10 minutes",
                dst.name
            );
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Step 3: writable on the target, the map sends the partition there, and
/// its running games' players are placed there.
async fn flip(
    home: &PgPool,
    dst: &Reached,
    partition: u16,
    source: &str,
    target: &str,
) -> anyhow::Result<()> {
    sqlx::query("UPDATE partition_fence SET writable = true WHERE partition = $1")
        .bind(partition as i16)
        .execute(&dst.pool)
        .await?;
    let mut tx = home.begin().await?;
    sqlx::query("UPDATE partition_map SET cluster = $2 WHERE partition = $1")
        .bind(partition as i16)
        .bind(target)
        .execute(&mut *tx)
        .await?;
    sqlx::query("UPDATE partition_map_version SET version = version + 1 WHERE id = 1")
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "UPDATE partition_moves SET step = 'flipped', flipped_at = now() WHERE partition = $1",
    )
    .bind(partition as i16)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    let playing: Vec<Vec<u8>> = sqlx::query_scalar(
        "SELECT s.token_hash FROM sessions s JOIN games g ON g.id = s.game_id \
         WHERE s.partition = $1 AND s.in_game AND g.phase IN (1, 2)",
    )
    .bind(partition as i16)
    .fetch_all(&dst.pool)
    .await?;
    sqlx::query("UPDATE placements SET cluster = $2 WHERE token_hash = ANY($1) AND cluster = $3")
        .bind(&playing)
        .bind(target)
        .bind(source)
        .execute(home)
        .await?;
    Ok(())
}

/// Step 4's first half: the subscription, its slot and the publication
/// dropped (the subscription first, so the source's deletes that follow
/// do not reach the target).
async fn drop_replication(src: &Reached, dst: &Reached, names: &Names) -> anyhow::Result<()> {
    drop_subscription(&dst.pool, &names.subscription).await?;
    drop_slot(src, &names.slot).await?;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP PUBLICATION IF EXISTS {}",
        names.publication
    )))
    .execute(&src.pool)
    .await?;
    Ok(())
}

/// Drops subscription `name` without touching its slot (the mover drops
/// that on the source itself: the source may be gone, or be this very
/// PostgreSQL, where a subscription dropping its own slot would wait on
/// itself).
async fn drop_subscription(pool: &PgPool, name: &str) -> anyhow::Result<()> {
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_subscription WHERE subname = $1)")
            .bind(name)
            .fetch_one(pool)
            .await?;
    if !exists {
        return Ok(());
    }
    for sql in [
        format!("ALTER SUBSCRIPTION {name} DISABLE"),
        format!("ALTER SUBSCRIPTION {name} SET (slot_name = NONE)"),
        format!("DROP SUBSCRIPTION {name}"),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
            .execute(pool)
            .await
            .with_context(|| sql.clone())?;
    }
    Ok(())
}

/// Deletes cluster `at`'s rows of `partition`, [`DELETE_BATCH`] games per
/// transaction; returns the games deleted.
async fn delete_partition(
    at: &Reached,
    partition: u16,
    say: &mut (dyn FnMut(String) + Send),
) -> anyhow::Result<u64> {
    let mut deleted = 0u64;
    let mut after = -1i64;
    let mut last_said = Instant::now();
    loop {
        let games: Vec<i64> = sqlx::query_scalar(
            "SELECT id FROM games WHERE (id % 64) = $1 AND id > $2 ORDER BY id LIMIT $3",
        )
        .bind(i64::from(partition))
        .bind(after)
        .bind(DELETE_BATCH)
        .fetch_all(&at.pool)
        .await?;
        let Some(&last) = games.last() else {
            return Ok(deleted);
        };
        after = last;
        let mut tx = at.pool.begin().await?;
        for (table, column) in TABLES {
            if *table == "games" || *table == "sessions" {
                continue;
            }
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "DELETE FROM {table} WHERE {column} = ANY($1)"
            )))
            .bind(&games)
            .execute(&mut *tx)
            .await?;
        }
        // A session from before sessions were per partition may still be
        // named by another partition's rows: it stays, and so does its game.
        sqlx::query(
            "DELETE FROM sessions WHERE game_id = ANY($1) \
             AND NOT EXISTS (SELECT 1 FROM actions a WHERE a.session_id = sessions.id) \
             AND NOT EXISTS (SELECT 1 FROM seats st WHERE st.session_id = sessions.id)",
        )
        .bind(&games)
        .execute(&mut *tx)
        .await?;
        deleted += sqlx::query(
            "DELETE FROM games WHERE id = ANY($1) \
             AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.game_id = games.id)",
        )
        .bind(&games)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        tx.commit().await?;
        if last_said.elapsed() >= Duration::from_secs(2) {
            say(format!(
                "partition {partition}: {deleted} games deleted from {}",
                at.name
            ));
            last_said = Instant::now();
        }
    }
}

/// `s` as an SQL string literal.
fn quote_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_double_their_quotes() {
        assert_eq!(quote_literal("a'b"), "'a''b'");
    }

    #[test]
    fn a_url_takes_the_leaders_address() {
        assert_eq!(
            with_address(
                "postgres://u:p@127.0.0.1:5432/borbaman?sslmode=disable",
                "10.0.0.2",
                6000
            ),
            "postgres://u:p@10.0.0.2:6000/borbaman?sslmode=disable"
        );
        assert_eq!(
            with_address("postgresql://h/db", "x", 1),
            "postgresql://x:1/db"
        );
    }

    fn row(
        name: &str,
        number: i32,
        partitions: std::ops::Range<u16>,
    ) -> super::super::partitions::ClusterRow {
        super::super::partitions::ClusterRow {
            name: name.into(),
            number,
            url: None,
            patroni: Vec::new(),
            partitions: partitions.collect(),
        }
    }

    #[test]
    fn a_rebalance_gives_a_new_cluster_its_share_one_partition_at_a_time() {
        let moves = plan_rebalance(&[row("home", 0, 0..64), row("c1", 1, 0..0)]);
        assert_eq!(moves.len(), 32);
        assert!(
            moves.iter().all(|(p, to)| *p >= 32 && to == "c1"),
            "{moves:?}"
        );
        let three = plan_rebalance(&[
            row("home", 0, 0..32),
            row("c1", 1, 32..64),
            row("c2", 2, 0..0),
        ]);
        assert_eq!(three.len(), 21, "22 + 21 + 21: {three:?}");
        assert!(plan_rebalance(&[row("home", 0, 0..32), row("c1", 1, 32..64)]).is_empty());
    }

    #[test]
    fn the_steps_are_in_order() {
        assert_eq!(STEPS.first(), Some(&"copying"));
        assert_eq!(STEPS.last(), Some(&"done"));
    }
}
