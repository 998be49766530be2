//! A run's figures per database cluster, when the games are partitioned
//! over several (`--db-clusters N`): the calls each cluster's games were
//! answered, their games, their acts' tail, and, in a chaos run, how long
//! each cluster's games took to recover from each fault and how slow they
//! were while it lasted.
//!
//! A call is counted for the cluster of its game: a game's partition is
//! its id modulo [`PARTITIONS`], and home's partition map (read once at
//! the end of the run) says which cluster holds each partition. Calls made
//! outside a game (a join before its answer names one) count for none.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Duration;

use borbaman_server::store::{Store, StoreOptions};
use serde::Serialize;

use super::dbcost::{DatabaseCost, Reading};
use super::faults::{self, FaultEvent, FaultTail};
use super::record::{CallKind, Invocation};
use super::report::{GapStats, RttStats, effective_rtt_us, rtt_stats};

/// Logical partitions a game id maps to (`game_id % PARTITIONS`): the
/// servers' own number.
pub const PARTITIONS: u64 = borbaman_server::store::partitions::PARTITIONS;

/// Which cluster holds each partition, and the clusters' names in their
/// order (home first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionMap {
    pub names: Vec<String>,
    /// Per partition, the index of its cluster in `names`.
    owner: Vec<usize>,
}

impl PartitionMap {
    /// The map servers start a fresh install with: partition `p` on
    /// cluster `p % names.len()`.
    pub fn spread(names: Vec<String>) -> PartitionMap {
        let n = names.len().max(1);
        PartitionMap {
            owner: (0..PARTITIONS as usize).map(|p| p % n).collect(),
            names,
        }
    }

    /// From home's list of clusters (name, partitions held), in number
    /// order; a partition no cluster claims stays home's.
    pub fn from_listing(clusters: &[(String, Vec<u16>)]) -> PartitionMap {
        let mut owner = vec![0; PARTITIONS as usize];
        for (k, (_, partitions)) in clusters.iter().enumerate() {
            for &p in partitions {
                if let Some(slot) = owner.get_mut(usize::from(p)) {
                    *slot = k;
                }
            }
        }
        PartitionMap {
            names: clusters.iter().map(|(name, _)| name.clone()).collect(),
            owner,
        }
    }

    /// The cluster index of game `game` (`None` for 0, no game yet).
    pub fn cluster_of(&self, game: u64) -> Option<usize> {
        (game != 0).then(|| self.owner[(game % PARTITIONS) as usize])
    }
}

/// The clusters home (at `home_url`) lists, in number order: name, URL
/// (`None` for home) and partitions held. An error on a database from
/// before partitions.
pub async fn listing(home_url: &str) -> anyhow::Result<Vec<(String, Option<String>, Vec<u16>)>> {
    let opts = StoreOptions {
        db_timeout: Duration::from_secs(10),
        acquire_timeout: Duration::from_secs(10),
        idle_txn_timeout: Duration::from_secs(10),
        min_connections: 0,
        max_connections: 1,
        ..StoreOptions::default()
    };
    let store = Store::connect(home_url, &opts)?;
    let rows = store.clusters().await;
    store.close().await;
    Ok(rows?
        .into_iter()
        .map(|row| (row.name, row.url, row.partitions))
        .collect())
}

/// One database cluster over a run, in `summary.json`'s `clusters`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ClusterFigures {
    pub name: String,
    /// Calls on its games answered after the warm-up, and per second of
    /// the measured window.
    pub calls_answered: u64,
    pub calls_answered_per_s: f64,
    /// Games with a call after the warm-up.
    pub games: u64,
    pub act_rtt_us: RttStats,
    /// The slowest successful call on its games while a fault was in
    /// force (until a second after the cluster was whole again), and at
    /// any other time after the warm-up.
    pub in_faults_max_us: u64,
    pub elsewhere_max_us: u64,
    /// The slowest successful call on its games while a fault on another
    /// cluster's database was in force: what another cluster's failover
    /// cost this one's games (0 without such faults).
    pub in_other_clusters_faults_max_us: u64,
    /// Faults whose target was this cluster's database.
    pub faults: u64,
    /// From each fault (of any target) until every client playing on this
    /// cluster when it was injected had a commit back (as `recovered_ms`
    /// in faults.csv, on those clients only).
    pub recovery_ms: GapStats,
    /// What each call of its games cost its database over the workload
    /// (warm-up included), when it was read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database_cost: Option<DatabaseCost>,
}

/// The database cluster a fault targeted: `c<k>/...` for cluster k > 0;
/// home for a database fault with no prefix; `None` for the others (a
/// server, which every cluster's games may use).
pub fn fault_cluster(fault: &FaultEvent, names: &[String]) -> Option<usize> {
    if let Some((prefix, _)) = fault.target.split_once('/')
        && let Some(k) = names.iter().position(|n| n == prefix)
    {
        return Some(k);
    }
    fault.kind.is_database().then_some(0)
}

/// The target a fault on database cluster `k`'s member `member` is
/// written as: the member alone for home (as with one cluster), else
/// `c<k>/<member>`.
pub fn fault_target(cluster_name: &str, k: usize, member: &str) -> String {
    match k {
        0 => member.to_string(),
        _ => format!("{cluster_name}/{member}"),
    }
}

/// Each cluster's figures. `span_s`: the measured window's length;
/// `costs`: each cluster's database readings before and after the
/// workload, when read.
pub fn figures(
    map: &PartitionMap,
    records: &[Invocation],
    faults: &[FaultEvent],
    span_s: f64,
    costs: &[(Option<Reading>, Option<Reading>)],
) -> Vec<ClusterFigures> {
    (0..map.names.len())
        .map(|k| {
            let on: Vec<Invocation> = records
                .iter()
                .filter(|r| map.cluster_of(r.game) == Some(k))
                .cloned()
                .collect();
            let measured = || on.iter().filter(|r| !r.warmup);
            let answered = measured().filter(|r| r.is_ok()).count() as u64;
            let games: BTreeSet<u64> = measured().map(|r| r.game).collect();
            let tail = FaultTail::new(faults, &on);
            let others: Vec<FaultEvent> = faults
                .iter()
                .filter(|f| fault_cluster(f, &map.names).is_some_and(|j| j != k))
                .cloned()
                .collect();
            let in_others = FaultTail::new(&others, &on).in_faults_max_us;
            let recovery = super::report::gap_stats(
                faults
                    .iter()
                    .filter_map(|f| recovery_ms(f, records, map, k))
                    .map(|ms| (ms * 1000.0) as u64),
            );
            let database_cost = match costs.get(k) {
                Some((Some(before), Some(after))) => {
                    Some(DatabaseCost::between(before, after, on.len() as u64))
                }
                _ => None,
            };
            ClusterFigures {
                name: map.names[k].clone(),
                calls_answered: answered,
                calls_answered_per_s: if span_s > 0.0 {
                    (answered as f64 / span_s * 100.0).round() / 100.0
                } else {
                    0.0
                },
                games: games.len() as u64,
                act_rtt_us: rtt_stats(
                    measured()
                        .filter(|r| r.is_ok() && r.call == CallKind::Act)
                        .map(effective_rtt_us),
                ),
                in_faults_max_us: tail.in_faults_max_us,
                elsewhere_max_us: tail.elsewhere_max_us,
                in_other_clusters_faults_max_us: in_others,
                faults: faults
                    .iter()
                    .filter(|f| fault_cluster(f, &map.names) == Some(k))
                    .count() as u64,
                recovery_ms: recovery,
                database_cost,
            }
        })
        .collect()
}

/// How long after `fault` the clients playing on cluster `k` when it was
/// injected (their last call before it was in a game there) all had a
/// commit back, wherever their next game was: [`faults::fill_recovery`]
/// on their calls only. `None` when no client played there, or one never
/// got a commit through.
fn recovery_ms(
    fault: &FaultEvent,
    records: &[Invocation],
    map: &PartitionMap,
    k: usize,
) -> Option<f64> {
    let mut last: HashMap<u32, (u64, u64)> = HashMap::new();
    for r in records
        .iter()
        .filter(|r| r.start_us < fault.at_us && r.game != 0)
    {
        let seen = last.entry(r.client).or_insert((r.start_us, r.game));
        if r.start_us >= seen.0 {
            *seen = (r.start_us, r.game);
        }
    }
    let playing: HashSet<u32> = last
        .into_iter()
        .filter(|(_, (_, game))| map.cluster_of(*game) == Some(k))
        .map(|(client, _)| client)
        .collect();
    if playing.is_empty() {
        return None;
    }
    let theirs: Vec<Invocation> = records
        .iter()
        .filter(|r| playing.contains(&r.client))
        .cloned()
        .collect();
    let mut own = fault.clone();
    faults::fill_recovery(std::slice::from_mut(&mut own), &theirs);
    own.recovered_ms
}

/// One line per cluster, for the end of a run.
pub fn describe(clusters: &[ClusterFigures]) -> Vec<String> {
    clusters
        .iter()
        .map(|c| {
            let faults = if c.recovery_ms.samples > 0 {
                format!(
                    "; faults on it: {}; its games recovered in max {:.0} ms, slowest call in \
                     faults {} µs (in other clusters' {} µs), elsewhere {} µs",
                    c.faults,
                    c.recovery_ms.max,
                    c.in_faults_max_us,
                    c.in_other_clusters_faults_max_us,
                    c.elsewhere_max_us
                )
            } else {
                String::new()
            };
            let cpu = c
                .database_cost
                .as_ref()
                .and_then(|d| d.cpu_us_per_call)
                .map(|us| format!("; {us:.0} µs of postgres CPU per call"))
                .unwrap_or_default();
            format!(
                "cluster {}: {} calls answered ({:.1}/s), {} games, act p99 {} µs{cpu}{faults}",
                c.name, c.calls_answered, c.calls_answered_per_s, c.games, c.act_rtt_us.p99
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::faults::FaultKind;
    use crate::measure::record::tests::act;

    fn names(n: usize) -> Vec<String> {
        (0..n)
            .map(|k| match k {
                0 => "home".to_string(),
                k => format!("c{k}"),
            })
            .collect()
    }

    fn in_game(mut r: Invocation, game: u64) -> Invocation {
        r.game = game;
        r
    }

    #[test]
    fn a_game_is_on_the_cluster_of_its_partition() {
        let spread = PartitionMap::spread(names(2));
        assert_eq!(spread.cluster_of(0), None, "no game yet");
        assert_eq!(spread.cluster_of(64 * 7 + 3), Some(1));
        assert_eq!(spread.cluster_of(64 * 7 + 2), Some(0));
        // Home's map wins over the rule: partition 3 moved home.
        let listed =
            PartitionMap::from_listing(&[("home".into(), vec![0, 2, 3]), ("c1".into(), vec![1])]);
        assert_eq!(listed.cluster_of(64 + 3), Some(0));
        assert_eq!(listed.cluster_of(64 + 1), Some(1));
        assert_eq!(listed.names, names(2));
    }

    #[test]
    fn calls_count_for_their_games_cluster_and_a_fault_stalls_only_its_own() {
        let map = PartitionMap::spread(names(2));
        let (home_game, c1_game) = (64 * 5, 64 * 5 + 1);
        let fault = FaultEvent {
            time_s: 1.0,
            at_us: 1_000_000,
            kind: FaultKind::DbKill,
            target: fault_target("c1", 1, "pg0"),
            promoted_ms: Some(100.0),
            committing_ms: Some(150.0),
            read_only_ms: None,
            recovered_ms: None,
            restored_ms: 3_000.0,
            error: String::new(),
        };
        let mut warm = in_game(act(0, 100_000, 90_000), home_game);
        warm.warmup = true;
        let records = vec![
            warm,
            in_game(act(0, 500_000, 2_000), home_game),
            in_game(act(0, 1_200_000, 3_000), home_game), // home: on time
            in_game(act(1, 500_000, 2_000), c1_game),
            in_game(act(1, 1_100_000, 1_900_000), c1_game), // c1: stalled
            in_game(act(1, 3_000_000, 2_000), c1_game),
            in_game(act(2, 3_000_000, 2_000), 0), // no game: neither
            // On c1 at the fault, back in a c1 game at 1.5 s; its next
            // game, on home, much later, is not home's recovery.
            in_game(act(3, 900_000, 2_000), c1_game + 64),
            in_game(act(3, 1_500_000, 2_000), c1_game + 64),
            in_game(act(3, 9_000_000, 2_000), home_game + 64),
        ];
        let figures = figures(&map, &records, std::slice::from_ref(&fault), 4.0, &[]);
        let (home, c1) = (&figures[0], &figures[1]);
        assert_eq!((home.calls_answered, c1.calls_answered), (3, 5));
        assert_eq!((home.games, c1.games), (2, 2));
        assert_eq!((home.faults, c1.faults), (0, 1));
        assert_eq!(home.in_faults_max_us, 3_000, "home's games kept their pace");
        assert_eq!(home.in_other_clusters_faults_max_us, 3_000);
        assert_eq!(c1.in_other_clusters_faults_max_us, 0, "no fault elsewhere");
        assert_eq!(c1.in_faults_max_us, 1_900_000);
        assert_eq!(c1.recovery_ms.max, 2_000.0, "back at 3.0 s");
        assert_eq!(home.recovery_ms.max, 203.0);
        assert_eq!(c1.calls_answered_per_s, 1.25);
        assert_eq!(fault_cluster(&fault, &map.names), Some(1));
        let home_fault = FaultEvent {
            target: fault_target("home", 0, "pg2"),
            ..fault
        };
        assert_eq!(home_fault.target, "pg2", "as with one cluster");
        assert_eq!(fault_cluster(&home_fault, &map.names), Some(0));
        let lines = describe(&figures);
        assert!(
            lines[1].starts_with("cluster c1: 5 calls answered"),
            "{lines:?}"
        );
    }
}
