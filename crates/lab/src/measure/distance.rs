//! Figures at a distance (`--wan`, `--wan-mix`): for each emulated
//! distance, the network's own round trip as the clients saw it (the ping
//! floor through the same delay proxies, beside the workload) and the
//! calls of the clients at that distance against it.
//!
//! At a distance a ratio to the whole ping floor says little (the network
//! is most of it); what the game adds is the act RTT *less* the network's.
//! Its share of the bare transaction floor (what a call costs without the
//! distance) is what issue 16's target reads: act p50 ≤ network RTT +
//! 1.5× the floor's p50 holds when `excess_p50_to_db_floor` ≤ 1.5.
//!
//! Pure: records and samples in, figures out.

use borbaman_cluster::WanSpec;
use serde::Serialize;

use super::record::Invocation;
use super::stats::{self, FloorStats, RttStats, floor_stats, ratio};

/// One distance of a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct DistanceReport {
    /// The link as `--wan` takes it: `100ms,10ms,stall=0.001`.
    pub link: String,
    pub one_way_delay_ms: f64,
    pub jitter_ms: f64,
    pub stall_probability: f64,
    /// Twice the one-way delay: the round trip the emulation adds.
    pub emulated_rtt_ms: f64,
    /// Clients at this distance.
    pub clients: u32,
    /// The network's round trip as measured: bare pings through this
    /// distance's proxies, beside the workload.
    pub network_rtt_us: FloorStats,
    /// Calls of the clients at this distance (after the warm-up).
    pub invocations: u64,
    pub errors: u64,
    pub failovers: u64,
    pub hedges: u64,
    pub rtt_us: RttStats,
    pub act_rtt_us: RttStats,
    /// Act RTT less the network's, at p50 and p99 (µs; noise can make it
    /// negative).
    pub act_p50_minus_network_us: i64,
    pub act_p99_minus_network_us: i64,
    /// Act RTT over the network's.
    pub act_p50_to_network: f64,
    pub act_p99_to_network: f64,
    /// The act RTT less the network's, over the bare transaction floor at
    /// the same percentile.
    pub excess_p50_to_db_floor: f64,
    pub excess_p99_to_db_floor: f64,
}

impl DistanceReport {
    /// The figures of the clients `clients` at `link`: their records among
    /// `records`, the pings through the link (`network_us`) and the bare
    /// transaction floor of the run (`db_floor`).
    pub fn new(
        link: &WanSpec,
        clients: &[u32],
        records: &[Invocation],
        network_us: &[u64],
        db_floor: &FloorStats,
    ) -> DistanceReport {
        let mine: Vec<Invocation> = records
            .iter()
            .filter(|r| clients.contains(&r.client))
            .cloned()
            .collect();
        let m = stats::measure(&mine);
        let network = floor_stats(network_us.iter().copied());
        let minus = |act: u64, net: u64| act as i64 - net as i64;
        let act = &m.act_rtt_us;
        DistanceReport {
            link: link.to_string(),
            one_way_delay_ms: ms(link.delay),
            jitter_ms: ms(link.jitter),
            stall_probability: link.stall_probability,
            emulated_rtt_ms: ms(link.rtt()),
            clients: clients.len() as u32,
            invocations: m.invocations,
            errors: m.errors,
            failovers: m.failovers,
            hedges: m.hedges,
            act_p50_minus_network_us: minus(act.p50, network.p50),
            act_p99_minus_network_us: minus(act.p99, network.p99),
            act_p50_to_network: ratio(act.p50 as f64, network.p50 as f64),
            act_p99_to_network: ratio(act.p99 as f64, network.p99 as f64),
            excess_p50_to_db_floor: ratio(minus(act.p50, network.p50) as f64, db_floor.p50 as f64),
            excess_p99_to_db_floor: ratio(minus(act.p99, network.p99) as f64, db_floor.p99 as f64),
            network_rtt_us: network,
            rtt_us: m.rtt_us,
            act_rtt_us: m.act_rtt_us,
        }
    }

    /// One line for the terminal.
    pub fn line(&self) -> String {
        format!(
            "distance {} one way (emulated RTT {} ms, {} clients): network RTT p50 {:.1} ms, \
             p99 {:.1} ms; act p50 {:.1} ms ({:+.1} ms, {}×), p99 {:.1} ms ({:+.1} ms, {}×), \
             max {:.1} ms; {} calls, {} errors, {} failovers, {} hedges",
            self.link,
            self.emulated_rtt_ms,
            self.clients,
            stats::us_to_ms(self.network_rtt_us.p50),
            stats::us_to_ms(self.network_rtt_us.p99),
            stats::us_to_ms(self.act_rtt_us.p50),
            self.act_p50_minus_network_us as f64 / 1000.0,
            self.act_p50_to_network,
            stats::us_to_ms(self.act_rtt_us.p99),
            self.act_p99_minus_network_us as f64 / 1000.0,
            self.act_p99_to_network,
            stats::us_to_ms(self.rtt_us.max),
            self.invocations,
            self.errors,
            self.failovers,
            self.hedges,
        )
    }
}

/// Client `client`'s distance among `links` (`--wan-mix` hands them out in
/// turn); `None` without distances.
pub fn link_of_client(client: u32, links: usize) -> Option<usize> {
    (links > 0).then(|| client as usize % links)
}

fn ms(d: std::time::Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    fn act(client: u32, rtt_ms: u64) -> Invocation {
        Invocation {
            seq: 1,
            server: "s".into(),
            version: 1,
            ..crate::measure::record::tests::act(client, 10_000_000, rtt_ms * 1000)
        }
    }

    #[test]
    fn each_distance_is_judged_against_its_own_network_rtt() {
        // Clients 0 and 2 at 100 ms one way, 1 and 3 elsewhere.
        let mut records: Vec<Invocation> = (0..100).map(|_| act(0, 204)).collect();
        records.extend((0..100).map(|_| act(2, 206)));
        records.extend((0..100).map(|_| act(1, 20)));
        let mut warm = act(0, 900);
        warm.warmup = true;
        records.push(warm);
        let network = vec![200_000; 50];
        let db = FloorStats {
            p50: 2_000,
            p99: 4_000,
            ..FloorStats::default()
        };
        let link = WanSpec::parse("100ms,10ms").unwrap();
        let report = DistanceReport::new(&link, &[0, 2], &records, &network, &db);
        assert_eq!(report.link, "100ms,10ms");
        assert_eq!(report.one_way_delay_ms, 100.0);
        assert_eq!(report.jitter_ms, 10.0);
        assert_eq!(report.emulated_rtt_ms, 200.0);
        assert_eq!(report.clients, 2);
        assert_eq!(
            report.invocations, 200,
            "the other clients and the warm-up are left out"
        );
        assert_eq!(report.network_rtt_us.p50 / 1000, 200);
        // p50 of {204, 206} ms with three significant figures.
        assert_eq!(report.act_rtt_us.p50 / 1000, 204);
        assert_eq!(report.act_rtt_us.max, 206_000);
        let excess = report.act_p50_minus_network_us;
        assert!((3_500..=4_500).contains(&excess), "{excess}");
        assert!(report.excess_p50_to_db_floor > 1.5 && report.excess_p50_to_db_floor < 2.5);
        assert!((report.act_p50_to_network - 1.02).abs() < 0.01);
        assert!(
            report.line().contains("emulated RTT 200 ms, 2 clients"),
            "{}",
            report.line()
        );
    }

    #[test]
    fn clients_take_the_distances_in_turn() {
        let links: Vec<Option<usize>> = (0..5).map(|c| link_of_client(c, 3)).collect();
        assert_eq!(links, [Some(0), Some(1), Some(2), Some(0), Some(1)]);
        assert_eq!(link_of_client(7, 0), None);
    }
}
