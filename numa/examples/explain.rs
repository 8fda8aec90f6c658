//! Prints the placement the crate would choose, for eyeballing on a new box.
//!
//! ```text
//! cargo run -p lmcache-resp-numa --example explain -- auto 10.0.0.5:6379 8
//! cargo run -p lmcache-resp-numa --example explain -- auto eth1 4 numa/tests/fixtures/two-numa-nic.xml
//! ```
//!
//! Arguments: AFFINITY TARGET [WORKERS] [XML]. TARGET is `host:port` (route
//! lookup on this host), an interface name, or `unix:/path`.

use std::net::ToSocketAddrs;
use std::process::ExitCode;

use lmcache_resp_numa::{CpuAffinity, NicLookup, TopologySource, locate_nic, nic_for_remote, plan_placement};

fn run(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let [affinity, target, rest @ ..] = args else {
        return Err("usage: explain AFFINITY TARGET [WORKERS] [XML]".into());
    };
    let affinity: CpuAffinity = affinity.parse()?;
    let workers: usize = rest.first().map(|w| w.parse()).transpose()?.unwrap_or(4);
    let source = match rest.get(1) {
        Some(path) => TopologySource::XmlFile(path.into()),
        None => TopologySource::Host,
    };
    let topology = source.load()?;
    let nic = if let Some(path) = target.strip_prefix("unix:") {
        NicLookup::unix_socket(path)
    } else if let Some(addr) = target.to_socket_addrs().ok().and_then(|mut a| a.next()) {
        nic_for_remote(&topology, addr)?
    } else {
        locate_nic(&topology, target)
    };
    let placement = plan_placement(&topology, &affinity, Some(&nic), workers)?;
    println!("{placement}");
    println!("worker_cpus = {:?}", placement.worker_cpus);
    println!("memory_node = {:?}", placement.memory_node);
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
