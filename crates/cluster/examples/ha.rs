//! Starts a replicated database (`LocalHa`), prints where it is, and stops
//! it when a line (or end of input) arrives on stdin:
//!
//!     cargo run -p borbaman-cluster --example ha [-- DIR]
//!
//! With DIR the members live there and are kept; else in a temporary
//! directory that is deleted on exit.

use std::io::BufRead;
use std::time::Instant;

use borbaman_cluster::{HaOptions, LocalHa};

fn main() {
    let opts = HaOptions {
        dir: std::env::args_os().nth(1).map(Into::into),
        ..HaOptions::default()
    };
    let started = Instant::now();
    let ha = match LocalHa::start(opts) {
        Ok(ha) => ha,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    println!(
        "started in {:.1} s (Patroni {})",
        started.elapsed().as_secs_f64(),
        ha.patroni_version()
    );
    println!("database:  {}", ha.database_url());
    println!("patroni:   {}", ha.patroni_urls().join(" "));
    println!("etcd:      {}", ha.etcd_urls().join(" "));
    println!("logs:      {}", ha.log_dir().display());
    for m in ha.members().unwrap_or_default() {
        println!(
            "  {} {} {} {}",
            m.name,
            m.role,
            m.state,
            m.replication.as_deref().unwrap_or("-")
        );
    }
    println!("pids:      {:?}", ha.pids());
    println!("press Enter to stop");
    let _ = std::io::stdin().lock().lines().next();
}
