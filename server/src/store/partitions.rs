//! Games partitioned over several database clusters.
//!
//! A game's partition is its id modulo [`PARTITIONS`]; the partition map
//! (kept at home, `partition_map`) names the cluster holding each
//! partition. Every server holds the map in memory ([`Partitions`]) and
//! reloads it within [`MAP_POLL`] of a change, so a game call costs no
//! lookup beyond the map: [`Store::route`] picks the store of the game's
//! cluster, and the call runs there as it ran on the one database before.
//!
//! The home cluster (the server's `--database-url`) keeps what is global:
//! identities and names, rankings, the registry, the cluster key, the
//! clusters and the map. It holds partitions too; with one cluster it
//! holds them all, and nothing here runs on a call's path.
//!
//! A join with several clusters is two ordered steps, each idempotent:
//!
//! 1. At home, [`Store::place`]: the token's placement, one statement. A
//!    token placed within [`PLACEMENT_HOLDS`] keeps its cluster (a retried
//!    join goes where the first try went); otherwise it takes the next
//!    turn, and turns move to the next cluster a game's worth of joiners
//!    at a time, so joiners meet in one lobby and new games spread over
//!    the clusters. A token whose game on its cluster still runs goes back
//!    to it.
//! 2. On that cluster, the join as with one database: one transaction
//!    under that cluster's lobby lock, keyed by the token (the session),
//!    so a retry finds the seat it took.
//!
//! A crash after step 1 leaves a placement and no seat: the retry goes to
//! the same cluster and seats the player there. A crash in step 2 rolls it
//! back. A crash after step 2 leaves the seat: the retry's step 2 finds it
//! (a rejoin). No step writes at two clusters, so nothing is half-done,
//! and no seat is made twice (a token has one session per cluster, and
//! the placement sends its retries to one cluster).
//!
//! Rankings: a game finished on home counts in its finishing statement,
//! as with one database; one finished elsewhere records its results in its
//! cluster's outbox in that statement, and [`Store::fold_results`] moves
//! them into home's rankings exactly once (`folded_games` at home, in the
//! same transaction as the rankings, remembers each game folded; the rows
//! are deleted from the outbox after). Every server folds, after its own
//! finishing writes and every [`FOLD_EVERY`]; two folding at once cannot
//! count a game twice.

use std::str::FromStr;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use sqlx::Row;

use super::{Store, StoreOptions};
use crate::error::Error;
use crate::patroni::Member;
use crate::token::TokenHash;
use borbaman_shutdown::Shutdown;

/// Logical partitions: a power of two, far more than clusters.
pub const PARTITIONS: u64 = 64;

/// The name of the home cluster.
pub const HOME: &str = "home";

/// Each cluster numbers its games and sessions from its number times 2^40
/// (home from 0), so ids are unique across clusters.
const ID_RANGE_BITS: u32 = 40;

/// How often a server asks home whether the map changed (besides when a
/// call meets a partition moving, see [`moves`](super::moves)).
pub const MAP_POLL: Duration = Duration::from_millis(500);

/// The environment variable that sets [`MAP_POLL`] in milliseconds: how
/// the tests make a server whose map is stale.
pub const MAP_POLL_ENV: &str = "BORBAMAN_MAP_POLL_MS";

fn map_poll() -> Duration {
    std::env::var(MAP_POLL_ENV)
        .ok()
        .and_then(|ms| ms.parse().ok())
        .map_or(MAP_POLL, Duration::from_millis)
}

/// How long a token's placement sends its joins to the same cluster: well
/// beyond any client's retries of one join.
pub const PLACEMENT_HOLDS: Duration = Duration::from_secs(60);

/// Joiners sent to one cluster before the turn moves on: a game's worth.
const JOINERS_PER_TURN: i64 = borbaman_game::SEATS as i64;

/// How often the outbox is folded when no finishing write asked for it.
pub const FOLD_EVERY: Duration = Duration::from_secs(1);

/// Results folded in one home transaction.
const FOLD_BATCH: i64 = 256;

/// The environment variable naming a crash point (see [`crash_point`]).
pub const CRASH_AT: &str = "BORBAMAN_CRASH_AT";

/// Ends the process at once (no clean-up, as a kill would) if the
/// environment variable [`CRASH_AT`] names `point`: how the tests kill a
/// server between the steps of a join or a fold. Points: `join-placed`
/// (after a join's placement at home, before its seat), `join-seated`
/// (after the seat, before the answer), `fold-counted` (after home counted
/// a fold, before the outbox is emptied), and the steps of a partition's
/// move (`move-started`, `move-snapshot`, `move-rows-copied`,
/// `move-copied`, `move-fenced`, `move-flipped`; see
/// [`mover`](super::mover)).
pub fn crash_point(point: &str) {
    static AT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    if AT.get_or_init(|| std::env::var(CRASH_AT).ok()).as_deref() == Some(point) {
        eprintln!("{CRASH_AT}={point}: ending the process here");
        std::process::abort();
    }
}

/// The partition of game `game_id`.
pub fn partition_of(game_id: u64) -> u16 {
    (game_id % PARTITIONS) as u16
}

/// A cluster given to a server with `--db-cluster NAME=URL`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterSpec {
    pub name: String,
    pub url: String,
    /// Its Patroni members' REST APIs (`--db-cluster-patroni`); empty: a
    /// plain PostgreSQL at `url`.
    pub patroni: Vec<Member>,
}

impl FromStr for ClusterSpec {
    type Err = String;

    /// `NAME=URL`.
    fn from_str(s: &str) -> Result<ClusterSpec, String> {
        let (name, url) = s
            .split_once('=')
            .ok_or_else(|| format!("expected NAME=URL, got {s:?}"))?;
        check_name(name)?;
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(format!(
                "cluster {name}: expected a postgres:// URL, got {url:?}"
            ));
        }
        Ok(ClusterSpec {
            name: name.to_string(),
            url: url.to_string(),
            patroni: Vec::new(),
        })
    }
}

impl ClusterSpec {
    /// This cluster, replicated: its Patroni members' REST APIs
    /// (`http://host:port` each).
    pub fn with_patroni(mut self, urls: &[String]) -> Result<ClusterSpec, String> {
        self.patroni = urls
            .iter()
            .map(|u| u.trim().parse::<Member>())
            .collect::<Result<_, _>>()?;
        Ok(self)
    }
}

/// A cluster's name: a lower-case letter, then up to 31 lower-case letters,
/// digits, `-` or `_`; not `home`.
pub fn check_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let ok = chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && name.len() <= 32
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if !ok {
        return Err(format!(
            "bad cluster name {name:?}: a lower-case letter, then up to 31 lower-case letters, \
             digits, '-' or '_'"
        ));
    }
    if name == HOME {
        return Err("`home` is the cluster given with --database-url".into());
    }
    Ok(())
}

/// A cluster as home lists it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ClusterRow {
    pub name: String,
    pub number: i32,
    /// `None` for home.
    pub url: Option<String>,
    pub patroni: Vec<String>,
    /// The partitions it holds.
    pub partitions: Vec<u16>,
}

/// The map as a server holds it.
#[derive(Clone, Debug)]
struct Map {
    version: i64,
    /// Per partition, the index of its cluster in [`Partitions::clusters`];
    /// [`UNOPENED`] where that cluster is not open on this server.
    owner: Vec<usize>,
    /// Indexes of the clusters holding a partition, in number order: where
    /// joins are sent.
    serving: Vec<usize>,
}

/// [`Map::owner`] of a partition whose cluster this server has not opened
/// (it could not, so far): its calls are answered "database unavailable",
/// which sends a client to another server, never to a cluster that does
/// not hold the partition.
const UNOPENED: usize = usize::MAX;

/// One cluster as a server holds it.
#[derive(Debug)]
struct Cluster {
    name: String,
    /// `None` for home: the store holding this.
    store: Option<Arc<Store>>,
}

/// What runs on each cluster's store as it is opened (see
/// [`Store::each_cluster`]).
type OnOpen = Arc<dyn Fn(&Store) + Send + Sync>;

#[derive(Default)]
struct OpenHooks(Vec<OnOpen>);

impl std::fmt::Debug for OpenHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} hooks", self.0.len())
    }
}

/// The clusters a home store routes to, and the map.
#[derive(Debug)]
pub(crate) struct Partitions {
    clusters: RwLock<Vec<Arc<Cluster>>>,
    map: RwLock<Map>,
    /// How the clusters are opened (home's options, followed per cluster).
    opts: StoreOptions,
    /// Since when the map last written names a cluster this server has
    /// not opened (the background opener tries it while there is one,
    /// [`Store::open_missing`]), and when that was last said (see
    /// [`Unopened`]).
    unopened: std::sync::Mutex<Option<Unopened>>,
    /// Held while a read of the map is turned into the map this server
    /// routes by: two reads at once (the background look, a call waiting
    /// out a move) write in turn, and an older read never over a newer.
    writing: std::sync::Mutex<()>,
    /// Run on each cluster opened from now on; taken before `clusters`
    /// when both are.
    on_open: std::sync::Mutex<OpenHooks>,
}

/// How often a cluster the map names and this server cannot open is
/// said again in the log: it is tried at every look at the map (every
/// 500 ms), and an outage of hours would otherwise flood the log.
const UNOPENED_SAID_EVERY: Duration = Duration::from_secs(30);

/// A cluster the map names that this server has not opened yet.
#[derive(Debug)]
struct Unopened {
    since: Instant,
    /// When the failure to open it was last said, if it was.
    said: Option<Instant>,
}

impl Partitions {
    /// The map written names a cluster this server has not opened.
    fn note_unopened(&self) {
        self.unopened
            .lock()
            .expect("unopened")
            .get_or_insert_with(|| Unopened {
                since: Instant::now(),
                said: None,
            });
    }

    /// Whether the map last written names a cluster this server has not
    /// opened.
    fn any_unopened(&self) -> bool {
        self.unopened.lock().expect("unopened").is_some()
    }

    /// Whether to log that a cluster the map names cannot be opened now
    /// (the first failure, then every [`UNOPENED_SAID_EVERY`]); how long
    /// it has been failing.
    fn say_unopened(&self) -> Option<Duration> {
        let mut unopened = self.unopened.lock().expect("unopened");
        let now = Instant::now();
        let u = unopened.get_or_insert_with(|| Unopened {
            since: now,
            said: None,
        });
        if u.said
            .is_some_and(|said| now.duration_since(said) < UNOPENED_SAID_EVERY)
        {
            return None;
        }
        u.said = Some(now);
        Some(now.duration_since(u.since))
    }

    /// Every cluster the map names is open: how long one was not, if its
    /// failure was said.
    fn all_opened(&self) -> Option<Duration> {
        self.unopened
            .lock()
            .expect("unopened")
            .take()
            .filter(|u| u.said.is_some())
            .map(|u| u.since.elapsed())
    }
}

/// The store a call runs on: home's own, or another cluster's.
pub enum Routed<'a> {
    Home(&'a Store),
    Other(Arc<Store>),
}

impl std::ops::Deref for Routed<'_> {
    type Target = Store;

    fn deref(&self) -> &Store {
        match self {
            Routed::Home(store) => store,
            Routed::Other(store) => store,
        }
    }
}

const REGISTER_LOCK: i64 = 0x626f_7262_6d61_7001; // "borbmap" 1

const UPSERT_CLUSTER: &str = "INSERT INTO db_clusters (name, number, url, patroni) \
     VALUES ($1, (SELECT max(number) + 1 FROM db_clusters), $2, $3) \
     ON CONFLICT (name) DO UPDATE SET url = excluded.url, patroni = excluded.patroni \
     RETURNING number, (xmax = 0) AS added";

const LIST_CLUSTERS: &str = "SELECT c.name, c.number, c.url, c.patroni, \
     coalesce(array_agg(m.partition ORDER BY m.partition) \
              FILTER (WHERE m.partition IS NOT NULL), '{}') \
     FROM db_clusters c LEFT JOIN partition_map m ON m.cluster = c.name \
     GROUP BY c.name, c.number, c.url, c.patroni ORDER BY c.number";

const MAP_VERSION: &str = "SELECT version FROM partition_map_version WHERE id = 1";

/// A token placed within the hold keeps its cluster and takes no turn: a
/// join's copy or retry that placed it again took one, and the next three
/// joiners' turns then crossed to the next cluster, splitting their game
/// (the turn's number is drawn only for a token not held).
const PLACE: &str = "WITH held AS (SELECT cluster FROM placements \
       WHERE token_hash = $1::bytea \
         AND placed_at > now() - $4::bigint * interval '1 millisecond'), \
     placed AS (INSERT INTO placements AS p (token_hash, cluster, placed_at) \
       SELECT $1::bytea, \
              ($2::text[])[1 + ((nextval('join_turns') - 1) / $3::bigint) % cardinality($2::text[])], \
              now() \
       WHERE NOT EXISTS (SELECT 1 FROM held) \
       ON CONFLICT (token_hash) DO UPDATE SET \
         cluster = CASE WHEN p.placed_at > now() - $4::bigint * interval '1 millisecond' \
                        THEN p.cluster ELSE excluded.cluster END, \
         placed_at = CASE WHEN p.placed_at > now() - $4::bigint * interval '1 millisecond' \
                          THEN p.placed_at ELSE excluded.placed_at END \
       RETURNING cluster) \
     SELECT cluster FROM placed UNION ALL SELECT cluster FROM held";

const PLACED: &str = "SELECT cluster FROM placements WHERE token_hash = $1";

const READ_RESULTS: &str = "SELECT game_id, identity_hash, name, games, wins, draws \
     FROM results ORDER BY game_id LIMIT $1";

const FOLD: &str = "WITH r AS (SELECT * FROM unnest($1::bigint[], $2::bytea[], $3::text[], \
       $4::int[], $5::int[], $6::int[]) AS r(game_id, identity_hash, name, games, wins, draws)), \
     f AS (INSERT INTO folded_games (game_id) SELECT DISTINCT game_id FROM r \
           ON CONFLICT DO NOTHING RETURNING game_id) \
     INSERT INTO rankings AS rk (identity_hash, name, games, wins, draws) \
     SELECT identity_hash, min(name), sum(games), sum(wins), sum(draws) FROM r \
     WHERE game_id IN (SELECT game_id FROM f) GROUP BY identity_hash ORDER BY identity_hash \
     ON CONFLICT (identity_hash) DO UPDATE SET name = excluded.name, \
       games = rk.games + excluded.games, wins = rk.wins + excluded.wins, \
       draws = rk.draws + excluded.draws";

const DELETE_RESULTS: &str = "DELETE FROM results WHERE game_id = ANY($1::bigint[])";

/// Sets a cluster's fence from the map (`$1`: the partitions it holds),
/// the first time only (see migration `partition_moves`).
pub(crate) const SET_FENCE: &str = "WITH first AS (INSERT INTO partition_fence_set (id) VALUES (1) \
       ON CONFLICT DO NOTHING RETURNING id) \
     UPDATE partition_fence SET writable = (partition = ANY($1::smallint[])) \
     WHERE EXISTS (SELECT 1 FROM first)";

/// Moves a cluster's id sequences into its range (never backwards).
const ID_RANGE: &str = "SELECT setval(pg_get_serial_sequence(t, 'id'), $1::bigint, false) \
     FROM unnest(ARRAY['games', 'sessions']) t \
     WHERE coalesce((SELECT last_value FROM pg_sequences ps WHERE ps.schemaname = 'public' \
              AND ps.sequencename = split_part(pg_get_serial_sequence(t, 'id'), '.', 2)), 0) \
           < $1::bigint";

/// Every statement here, for the schema test.
#[cfg(test)]
pub const ALL: &[&str] = &[
    UPSERT_CLUSTER,
    LIST_CLUSTERS,
    MAP_VERSION,
    PLACE,
    PLACED,
    READ_RESULTS,
    SET_FENCE,
    FOLD,
    DELETE_RESULTS,
    ID_RANGE,
];

impl Store {
    /// Registers `specs` at home (their URLs and members updated if known)
    /// and, with `spread` on a fresh install (the map never changed and home holds no
    /// game yet), spreads the partitions evenly over home and them:
    /// partition `p` to the `p % n`-th cluster in number order. Start-up
    /// only; servers starting at once take turns (an advisory lock).
    pub async fn register_clusters(
        &self,
        specs: &[ClusterSpec],
        spread: bool,
    ) -> Result<(), Error> {
        if specs.is_empty() {
            return Ok(());
        }
        let mut lease = self.lease().await?;
        let result = async {
            let mut tx = sqlx::Connection::begin(lease.conn()).await?;
            sqlx::query("SELECT pg_advisory_xact_lock($1)")
                .bind(REGISTER_LOCK)
                .execute(&mut *tx)
                .await?;
            let mut added = false;
            for spec in specs {
                let patroni: Vec<String> = spec.patroni.iter().map(|m| m.to_string()).collect();
                let (_, new): (i32, bool) = sqlx::query_as(UPSERT_CLUSTER)
                    .bind(&spec.name)
                    .bind(&spec.url)
                    .bind(&patroni)
                    .fetch_one(&mut *tx)
                    .await?;
                added |= new;
            }
            let (version, games): (i64, bool) = sqlx::query_as(
                "SELECT (SELECT version FROM partition_map_version WHERE id = 1), \
                        EXISTS (SELECT 1 FROM games)",
            )
            .fetch_one(&mut *tx)
            .await?;
            if spread && version == 1 && !games {
                let names: Vec<String> = std::iter::once(HOME.to_string())
                    .chain(specs.iter().map(|s| s.name.clone()))
                    .collect();
                sqlx::query(
                    "UPDATE partition_map SET cluster = ($1::text[])[1 + partition % cardinality($1::text[])]",
                )
                .bind(&names)
                .execute(&mut *tx)
                .await?;
                sqlx::query("UPDATE partition_map_version SET version = version + 1 WHERE id = 1")
                    .execute(&mut *tx)
                    .await?;
                let held: Vec<i16> = (0..PARTITIONS as i16)
                    .filter(|p| (*p as usize).is_multiple_of(names.len()))
                    .collect();
                sqlx::query(SET_FENCE)
                    .bind(&held)
                    .execute(&mut *tx)
                    .await?;
                tracing::info!(clusters = ?names, "partitions spread over the clusters");
            } else if added {
                // A cluster the running servers do not know yet: a new
                // version has them open it at their next look at the map
                // (a move waits for that before it cuts over to it).
                sqlx::query("UPDATE partition_map_version SET version = version + 1 WHERE id = 1")
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            Ok::<_, Error>(())
        }
        .await;
        lease.settle(result)
    }

    /// Home's clusters, with the partitions each holds.
    pub async fn clusters(&self) -> Result<Vec<ClusterRow>, Error> {
        self.retrying(|| async {
            let mut lease = self.lease().await?;
            let rows = sqlx::query(LIST_CLUSTERS).fetch_all(lease.conn()).await;
            let rows = lease.settle(rows.map_err(Error::from))?;
            rows.iter()
                .map(|row| {
                    let partitions: Vec<i16> = row.try_get(4)?;
                    Ok(ClusterRow {
                        name: row.try_get(0)?,
                        number: row.try_get(1)?,
                        url: row.try_get(2)?,
                        patroni: row.try_get(3)?,
                        partitions: partitions.into_iter().map(|p| p as u16).collect(),
                    })
                })
                .collect()
        })
        .await
    }

    /// Opens every cluster home lists and routes games by the map from now
    /// on. Start-up only; [`Store::follow_map`] keeps the map current
    /// afterwards, and opens the clusters added later. With home alone, a
    /// call or a join costs nothing more than with one database.
    ///
    /// Fails only if home does: a cluster that cannot be opened (down, or
    /// taking no writes) leaves this server serving the others, its own
    /// partitions' calls answered "database unavailable" (so clients go to
    /// a server that reaches it), and is tried again at every look at the
    /// map, as for a running server. One cluster's outage then does not
    /// keep a restarted server from serving every game.
    pub async fn open_clusters(self, opts: &StoreOptions) -> Result<Store, Error> {
        let partitions = Arc::new(Partitions {
            clusters: RwLock::new(Vec::new()),
            map: RwLock::new(Map {
                version: 0,
                owner: vec![0; PARTITIONS as usize],
                serving: vec![0],
            }),
            opts: opts.clone(),
            unopened: std::sync::Mutex::new(None),
            writing: std::sync::Mutex::new(()),
            on_open: std::sync::Mutex::new(OpenHooks::default()),
        });
        let mut home = self;
        home.partitions = Some(partitions);
        // The map's first read opens the clusters (a failure is said
        // there, and tried again at the next look).
        home.load_map().await?;
        Ok(home)
    }

    /// Opens the clusters home lists that this server has not opened yet.
    async fn open_new_clusters(&self) -> Result<(), Error> {
        let Some(partitions) = &self.partitions else {
            return Ok(());
        };
        let rows = self.clusters().await?;
        let mut opened: Vec<Arc<Cluster>> = partitions.clusters.read().expect("clusters").clone();
        // Each on its own: one that cannot be opened does not keep the
        // others closed; the first failure is returned once the rest are in.
        let mut failed = None;
        let mut new = Vec::new();
        for row in &rows {
            if opened.iter().any(|c| c.name == row.name) {
                continue;
            }
            let store = match &row.url {
                None => None,
                Some(url) => match self.open_cluster(partitions, row, url).await {
                    Ok(store) => {
                        let store = Arc::new(store);
                        new.push(store.clone());
                        Some(store)
                    }
                    Err(err) => {
                        failed.get_or_insert(Error::Unavailable(format!(
                            "cannot open database cluster {}: {err}",
                            row.name
                        )));
                        continue;
                    }
                },
            };
            opened.push(Arc::new(Cluster {
                name: row.name.clone(),
                store,
            }));
        }
        // Published and handed to the hooks under the hooks' lock: a hook
        // added meanwhile sees each cluster once, here or in the list.
        let hooks = partitions.on_open.lock().expect("open hooks");
        *partitions.clusters.write().expect("clusters") = opened;
        for store in &new {
            for hook in &hooks.0 {
                hook(store);
            }
        }
        drop(hooks);
        failed.map_or(Ok(()), Err)
    }

    /// Runs `f` on every cluster's store: home's and those open now at
    /// once, each opened later (added to the map, or down when this
    /// server started) as it is opened. How a server gives every cluster
    /// it serves its retention job and its admission hook.
    pub fn each_cluster(&self, f: impl Fn(&Store) + Send + Sync + 'static) {
        let Some(partitions) = &self.partitions else {
            f(self);
            return;
        };
        let mut hooks = partitions.on_open.lock().expect("open hooks");
        f(self);
        for store in self.other_clusters() {
            f(&store);
        }
        hooks.0.push(Arc::new(f));
    }

    /// The names of the database clusters this server has opened (home's
    /// `home`): what its heartbeat reports, so that a move cuts over only
    /// to a cluster every live server can write to.
    pub fn opened_clusters(&self) -> Vec<String> {
        match &self.partitions {
            Some(partitions) => partitions
                .clusters
                .read()
                .expect("clusters")
                .iter()
                .map(|c| c.name.clone())
                .collect(),
            None => vec![self.cluster.to_string()],
        }
    }

    /// Reads the map if its version changed, opening the clusters added
    /// since (a cluster that cannot be opened has its partitions' calls
    /// answered "database unavailable" here, see [`UNOPENED`], and the
    /// error is logged; the map is read again, and the cluster opened
    /// again, at the next look).
    pub(super) async fn load_map(&self) -> Result<(), Error> {
        self.read_map(true).await
    }

    /// [`Store::load_map`] without opening any cluster: for a call waiting
    /// out a move ([`Store::await_move`], every few milliseconds), which
    /// must not wait for a cluster that cannot be reached (a connection,
    /// or Patroni naming a primary, can take a second). A move cuts over
    /// only to a cluster every live server has opened; a partition on one
    /// this server has not is answered "database unavailable" meanwhile.
    pub(super) async fn reload_map(&self) -> Result<(), Error> {
        self.read_map(false).await
    }

    async fn read_map(&self, open: bool) -> Result<(), Error> {
        let Some(partitions) = &self.partitions else {
            return Ok(());
        };
        let version: i64 = self
            .retrying(|| async {
                let mut lease = self.lease().await?;
                let v = sqlx::query_scalar(MAP_VERSION)
                    .fetch_one(lease.conn())
                    .await;
                lease.settle(v.map_err(Error::from))
            })
            .await?;
        if partitions.map.read().expect("map lock").version == version {
            return Ok(());
        }
        let mut rows = self.clusters().await?;
        let known = |rows: &[ClusterRow]| {
            let opened = partitions.clusters.read().expect("clusters");
            rows.iter().all(|r| opened.iter().any(|c| c.name == r.name))
        };
        let mut open_error = None;
        if open && !known(&rows) {
            if let Err(err) = Box::pin(self.open_new_clusters()).await {
                open_error = Some(err);
            }
            rows = self.clusters().await?;
        }
        // No await from here to the map written.
        let _writing = partitions.writing.lock().expect("map writing");
        if partitions.map.read().expect("map lock").version > version {
            return Ok(());
        }
        let opened: Vec<Arc<Cluster>> = partitions.clusters.read().expect("clusters").clone();
        let (old_version, mut owner) = {
            let map = partitions.map.read().expect("map lock");
            (map.version, map.owner.clone())
        };
        let mut serving = Vec::new();
        let mut unopened = Vec::new();
        for row in &rows {
            let Some(at) = opened.iter().position(|c| c.name == row.name) else {
                unopened.push(row.name.as_str());
                for &p in &row.partitions {
                    owner[usize::from(p)] = UNOPENED;
                }
                continue;
            };
            for &p in &row.partitions {
                owner[usize::from(p)] = at;
            }
            if !row.partitions.is_empty() {
                serving.push(at);
            }
            let store = opened[at].store.as_deref().unwrap_or(self);
            *store.held.write().expect("held partitions") = row.partitions.clone();
        }
        let complete = unopened.is_empty();
        if complete {
            tracing::info!(version, clusters = rows.len(), "partition map loaded");
            if let Some(after) = partitions.all_opened() {
                tracing::info!(
                    after_s = after.as_secs_f64(),
                    "every database cluster the partition map names is open"
                );
            }
        } else if !open {
            partitions.note_unopened();
        } else if let Some(failing_for) = partitions.say_unopened() {
            // Tried again at every look; said at the first failure and
            // then every UNOPENED_SAID_EVERY.
            tracing::error!(
                clusters = %unopened.join(", "),
                error = %open_error.map_or_else(|| "not opened".to_string(), |e| e.to_string()),
                failing_for_s = failing_for.as_secs(),
                "the partition map names database clusters this server cannot open; \
                 their games' calls are answered 'database unavailable' here, and the \
                 clusters tried again every look at the map (said again every 30 s)"
            );
        }
        // A map with a cluster left unopened is not this version yet: the
        // next look reads it again and opens what is missing.
        let version = if complete { version } else { old_version };
        *partitions.map.write().expect("map lock") = Map {
            version,
            owner,
            serving,
        };
        Ok(())
    }

    /// Connects to cluster `row`, applies its migrations, sets its fence
    /// the first time, moves its id sequences into its range and opens its
    /// standing connections.
    async fn open_cluster(
        &self,
        partitions: &Partitions,
        row: &ClusterRow,
        url: &str,
    ) -> Result<Store, Error> {
        let opts = cluster_options(&partitions.opts, row)?;
        let mut store = Store::connect(url, &opts)?.with_metrics(self.metrics.clone());
        // Its schema first: a cluster that was down when this build's
        // servers started has not had this build's migrations yet. On a
        // thread of its own: a migration's future cannot move between
        // threads, and the map is followed in a task that can.
        let migrating = store.clone();
        tokio::task::spawn_blocking(move || {
            tokio::runtime::Handle::current().block_on(migrating.migrate())
        })
        .await
        .map_err(|e| Error::Internal(format!("migrating: {e}")))?
        .map_err(|e| Error::Unavailable(format!("migrating: {e}")))?;
        store.home = false;
        store.cluster = row.name.as_str().into();
        store.finished = self.finished.clone();
        store.set_fence(&row.partitions).await?;
        let first = i64::from(row.number.max(0)) << ID_RANGE_BITS;
        store
            .retrying(|| async {
                let mut lease = store.lease().await?;
                let done = sqlx::query(ID_RANGE)
                    .bind(first)
                    .execute(lease.conn())
                    .await;
                lease.settle(done.map_err(Error::from))
            })
            .await?;
        store.warm_up().await?;
        tracing::info!(cluster = %row.name, "database cluster opened");
        Ok(store)
    }

    /// Sets this cluster's fence from the map: it may write `held` (the
    /// partitions the map gives it), the first time only; afterwards only
    /// moves change it.
    pub async fn set_fence(&self, held: &[u16]) -> Result<(), Error> {
        let held: Vec<i16> = held.iter().map(|&p| p as i16).collect();
        self.retrying(|| async {
            let mut lease = self.lease().await?;
            let done = sqlx::query(SET_FENCE)
                .bind(&held)
                .execute(lease.conn())
                .await;
            lease.settle(done.map_err(Error::from))
        })
        .await?;
        Ok(())
    }

    /// Reloads the map within [`MAP_POLL`] of a change, and folds the
    /// results outboxes, until `shutdown`. Does nothing on a store that
    /// never opened the clusters ([`Store::open_clusters`]). The clusters
    /// the map names and this server has not opened are opened apart
    /// ([`Store::open_missing`]): a try can wait seconds for one that does
    /// not answer, and the map's reads and the folds go on meanwhile.
    pub async fn follow_map(self, mut shutdown: Shutdown) {
        if self.partitions.is_none() {
            return;
        }
        tokio::spawn(self.clone().open_missing(shutdown.clone()));
        let mut poll = tokio::time::interval(map_poll());
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut fold = tokio::time::interval(FOLD_EVERY);
        fold.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.recv() => return,
                _ = poll.tick() => {
                    if let Err(err) = self.reload_map().await {
                        tracing::warn!(error = %err, "could not reload the partition map");
                    }
                }
                _ = fold.tick() => self.fold_all().await,
                _ = self.finished.notified() => self.fold_all().await,
            }
        }
    }

    /// Every [`MAP_POLL`] while the map names a cluster this server has
    /// not opened, tries to open it (and says so, see
    /// [`Store::load_map`]), until `shutdown`.
    async fn open_missing(self, mut shutdown: Shutdown) {
        let Some(partitions) = self.partitions.clone() else {
            return;
        };
        let mut poll = tokio::time::interval(map_poll());
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.recv() => return,
                _ = poll.tick() => {
                    if partitions.any_unopened()
                        && let Err(err) = self.load_map().await
                    {
                        tracing::warn!(error = %err, "could not open the database clusters");
                    }
                }
            }
        }
    }

    async fn fold_all(&self) {
        for cluster in self.other_clusters() {
            loop {
                match self.fold_results(&cluster).await {
                    Ok(n) if n as i64 >= FOLD_BATCH => continue,
                    Ok(_) => break,
                    Err(err) => {
                        tracing::warn!(error = %err, "could not fold results into the rankings");
                        break;
                    }
                }
            }
        }
    }

    /// The clusters other than home that this server has opened.
    pub(crate) fn other_clusters(&self) -> Vec<Store> {
        match &self.partitions {
            None => Vec::new(),
            Some(p) => p
                .clusters
                .read()
                .expect("clusters")
                .iter()
                .filter_map(|c| c.store.as_deref().cloned())
                .collect(),
        }
    }

    /// Every cluster's store, home first.
    pub fn every_cluster(&self) -> Vec<Store> {
        std::iter::once(self.clone())
            .chain(self.other_clusters())
            .collect()
    }

    /// Folds one batch of `cluster`'s results outbox into home's rankings,
    /// exactly once per game; returns the rows read.
    pub async fn fold_results(&self, cluster: &Store) -> Result<usize, Error> {
        type ResultRow = (i64, Vec<u8>, String, i32, i32, i32);
        let rows: Vec<ResultRow> = cluster
            .retrying(|| async {
                let mut lease = cluster.lease().await?;
                let rows = sqlx::query_as(READ_RESULTS)
                    .bind(FOLD_BATCH)
                    .fetch_all(lease.conn())
                    .await;
                lease.settle(rows.map_err(Error::from))
            })
            .await?;
        if rows.is_empty() {
            return Ok(0);
        }
        let mut games: Vec<i64> = rows.iter().map(|r| r.0).collect();
        let hashes: Vec<Vec<u8>> = rows.iter().map(|r| r.1.clone()).collect();
        let names: Vec<String> = rows.iter().map(|r| r.2.clone()).collect();
        let played: Vec<i32> = rows.iter().map(|r| r.3).collect();
        let wins: Vec<i32> = rows.iter().map(|r| r.4).collect();
        let draws: Vec<i32> = rows.iter().map(|r| r.5).collect();
        self.retrying(|| async {
            let mut lease = self.lease().await?;
            let done = sqlx::query(FOLD)
                .bind(&games)
                .bind(&hashes)
                .bind(&names)
                .bind(&played)
                .bind(&wins)
                .bind(&draws)
                .execute(lease.conn())
                .await;
            lease.settle(done.map_err(Error::from))
        })
        .await?;
        tracing::debug!(rows = rows.len(), "results folded into the rankings");
        crash_point("fold-counted");
        games.dedup();
        cluster
            .retrying(|| async {
                let mut lease = cluster.lease().await?;
                let done = sqlx::query(DELETE_RESULTS)
                    .bind(&games)
                    .execute(lease.conn())
                    .await;
                lease.settle(done.map_err(Error::from))
            })
            .await?;
        Ok(rows.len())
    }

    /// The store of game `game_id`'s cluster; `Unavailable` while that
    /// cluster is one this server could not open ([`UNOPENED`]).
    pub fn route(&self, game_id: u64) -> Result<Routed<'_>, Error> {
        let Some(partitions) = &self.partitions else {
            return Ok(Routed::Home(self));
        };
        let partition = partition_of(game_id);
        let at = partitions.map.read().expect("map lock").owner[usize::from(partition)];
        match partitions.clusters.read().expect("clusters").get(at) {
            Some(cluster) => Ok(match &cluster.store {
                Some(store) => Routed::Other(store.clone()),
                None => Routed::Home(self),
            }),
            None => Err(Error::Unavailable(format!(
                "game {game_id}'s partition {partition} is on a database cluster this server \
                 cannot open now"
            ))),
        }
    }

    /// The partitions this cluster holds, for a new game (every partition
    /// with one cluster); the join's statement takes one writable here.
    pub(crate) fn new_game_partitions(&self) -> Vec<i16> {
        let held = self.held.read().expect("held partitions");
        if held.is_empty() {
            return (0..PARTITIONS as i16).collect();
        }
        held.iter().map(|&p| p as i16).collect()
    }

    /// Where the token's join goes (step 1 of a join, see the module
    /// docs): home itself with one cluster.
    pub(crate) async fn place(&self, token_hash: &TokenHash) -> Result<Routed<'_>, Error> {
        let Some(partitions) = self.several() else {
            return Ok(Routed::Home(self));
        };
        if let Some(target) = self.placed(token_hash).await?
            && target.rejoin(token_hash).await?.is_some()
        {
            return Ok(target);
        }
        let serving: Vec<String> = {
            let map = partitions.map.read().expect("map lock");
            let clusters = partitions.clusters.read().expect("clusters");
            map.serving
                .iter()
                .filter_map(|&i| clusters.get(i).map(|c| c.name.clone()))
                .collect()
        };
        if serving.is_empty() {
            return Ok(Routed::Home(self));
        }
        let name: String = self
            .retrying(|| async {
                let mut lease = self.lease().await?;
                let c = sqlx::query_scalar(PLACE)
                    .bind(&token_hash[..])
                    .bind(&serving)
                    .bind(JOINERS_PER_TURN)
                    .bind(PLACEMENT_HOLDS.as_millis() as i64)
                    .fetch_one(lease.conn())
                    .await;
                lease.settle(c.map_err(Error::from))
            })
            .await?;
        crash_point("join-placed");
        Ok(self.cluster_named(&name))
    }

    /// The cluster the token was last placed on; `None` with one cluster
    /// or a token never placed.
    pub(crate) async fn placed(&self, token_hash: &TokenHash) -> Result<Option<Routed<'_>>, Error> {
        if self.several().is_none() {
            return Ok(None);
        }
        let placed: Option<String> = self
            .retrying(|| async {
                let mut lease = self.lease().await?;
                let c = sqlx::query_scalar(PLACED)
                    .bind(&token_hash[..])
                    .fetch_optional(lease.conn())
                    .await;
                lease.settle(c.map_err(Error::from))
            })
            .await?;
        Ok(placed.map(|name| self.cluster_named(&name)))
    }

    /// The clusters, when there are several (home alone places no join).
    fn several(&self) -> Option<&Arc<Partitions>> {
        self.partitions
            .as_ref()
            .filter(|p| p.clusters.read().expect("clusters").len() > 1)
    }

    /// The store of the cluster named `name` (home if unknown).
    fn cluster_named(&self, name: &str) -> Routed<'_> {
        let store = self.partitions.as_ref().and_then(|p| {
            p.clusters
                .read()
                .expect("clusters")
                .iter()
                .find(|c| c.name == name)
                .and_then(|c| c.store.clone())
        });
        match store {
            Some(store) => Routed::Other(store),
            None => Routed::Home(self),
        }
    }
}

/// How cluster `row` is opened: as home (`home`), following its own
/// Patroni group (scope: its name) when it has one and home is followed.
fn cluster_options(home: &StoreOptions, row: &ClusterRow) -> Result<StoreOptions, Error> {
    let mut opts = home.clone();
    opts.follow = match (&home.follow, row.patroni.is_empty()) {
        (Some(follow_home), false) => {
            let mut follow = follow_home.clone();
            follow.members = row
                .patroni
                .iter()
                .map(|m| m.parse())
                .collect::<Result<_, String>>()
                .map_err(Error::InvalidArgument)?;
            follow.etcd_prefix = scope_prefix(&follow_home.etcd_prefix, &row.name);
            Some(follow)
        }
        _ => None,
    };
    Ok(opts)
}

/// The URLs of the clusters other than home that home (`db`) lists, in
/// number order, for tools that read every cluster's games (replay
/// --verify, the invariant audit). Empty on a database from before
/// partitions.
pub async fn other_cluster_urls(home: &sqlx::PgPool) -> Result<Vec<String>, sqlx::Error> {
    let listed: bool = sqlx::query_scalar("SELECT to_regclass('db_clusters') IS NOT NULL")
        .fetch_one(home)
        .await?;
    if !listed {
        return Ok(Vec::new());
    }
    sqlx::query_scalar("SELECT url FROM db_clusters WHERE url IS NOT NULL ORDER BY number")
        .fetch_all(home)
        .await
}

/// The etcd prefix of cluster `name`'s Patroni group: home's namespace
/// (`/borbaman/` of `/borbaman/borbaman/`), scope `name`.
pub fn scope_prefix(home_prefix: &str, name: &str) -> String {
    let trimmed = home_prefix.trim_end_matches('/');
    let namespace = match trimmed.rfind('/') {
        Some(at) => &trimmed[..=at],
        None => "/",
    };
    format!("{namespace}{name}/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_game_id_names_its_partition() {
        assert_eq!(partition_of(0), 0);
        assert_eq!(partition_of(65), 1);
        assert_eq!(partition_of(5 * 64 + 63), 63);
    }

    #[test]
    fn cluster_specs_are_name_equals_url() {
        let spec: ClusterSpec = "c1=postgres://u@127.0.0.1:5433/borbaman".parse().unwrap();
        assert_eq!(spec.name, "c1");
        assert_eq!(spec.url, "postgres://u@127.0.0.1:5433/borbaman");
        for bad in [
            "c1",
            "C1=postgres://x",
            "home=postgres://x",
            "c1=http://x",
            "=postgres://x",
        ] {
            assert!(bad.parse::<ClusterSpec>().is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn a_clusters_scope_sits_beside_homes() {
        assert_eq!(scope_prefix("/borbaman/borbaman/", "c1"), "/borbaman/c1/");
        assert_eq!(scope_prefix("/service/main", "c2"), "/service/c2/");
        assert_eq!(scope_prefix("/x/", "c1"), "/c1/");
    }
}
