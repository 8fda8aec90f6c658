//! Placement and NIC lookup against the two-socket XML fixture:
//! package 0 = NUMA node 0, cores {0,1} {2,3}; package 1 = NUMA node 1,
//! cores {4,5} {6,7}, with PCI device 0000:40:00.0 carrying `eth1` (network)
//! and `mlx5_0` (OpenFabrics).

use lmcache_resp_numa::{
    CpuAffinity, NicKind, NicLookup, NumaError, Topology, TopologySource, locate_nic, plan_placement, spread_over_cores,
};

fn fixture() -> Topology {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/two-numa-nic.xml");
    TopologySource::XmlFile(path.into()).load().expect("fixture loads")
}

fn found(lookup: &NicLookup) -> &lmcache_resp_numa::NicDevice {
    lookup.device().unwrap_or_else(|| panic!("expected a device, got {lookup:?}"))
}

#[test]
fn fixture_is_not_mistaken_for_the_host() {
    // Binding on it would silently do nothing; the crate relies on this flag.
    assert!(!fixture().is_this_system());
}

#[test]
fn eth1_is_on_node_1() {
    let topo = fixture();
    let lookup = locate_nic(&topo, "eth1");
    let dev = found(&lookup);
    assert_eq!(dev.os_device, "eth1");
    assert_eq!(dev.kind, NicKind::Network);
    assert_eq!(dev.cpus, vec![4, 5, 6, 7]);
    assert_eq!(dev.numa_nodes, vec![1]);
    assert_eq!(dev.pci_bus_id.as_deref(), Some("0000:40:00.0"));
    assert_eq!(dev.companions, vec![("mlx5_0".to_owned(), NicKind::OpenFabrics)]);
    assert_eq!(lookup.to_string(), "eth1 is on NUMA node 1 (CPUs 4-7)");
}

#[test]
fn openfabrics_device_is_found_too() {
    let topo = fixture();
    let lookup = locate_nic(&topo, "mlx5_0");
    let dev = found(&lookup);
    assert_eq!(dev.kind, NicKind::OpenFabrics);
    assert_eq!(dev.cpus, vec![4, 5, 6, 7]);
    assert_eq!(dev.numa_nodes, vec![1]);
    assert_eq!(dev.companions, vec![("eth1".to_owned(), NicKind::Network)]);
}

#[test]
fn vlan_resolves_to_parent_device() {
    let topo = fixture();
    let lookup = locate_nic(&topo, "eth1.100");
    let dev = found(&lookup);
    assert_eq!(dev.interface, "eth1.100");
    assert_eq!(dev.os_device, "eth1");
    assert_eq!(dev.numa_nodes, vec![1]);
}

#[test]
fn unknown_and_virtual_interfaces_have_no_device() {
    let topo = fixture();
    let cases = [
        ("eth7", "no network or OpenFabrics device named eth7"),
        ("lo", "loopback"),
        ("veth12ab", "veth"),
        ("docker0", "Docker"),
    ];
    for (name, expected) in cases {
        match locate_nic(&topo, name) {
            NicLookup::NoDevice { reason } => {
                assert!(reason.contains(expected), "{name}: {reason}")
            }
            other => panic!("{name}: expected NoDevice, got {other:?}"),
        }
    }
}

#[test]
fn cores_before_hyperthread_siblings() {
    let topo = fixture();
    assert_eq!(spread_over_cores(&topo, &[4, 5, 6, 7]), vec![4, 6, 5, 7]);
    assert_eq!(spread_over_cores(&topo, &[0, 1, 2, 3, 4, 5, 6, 7]), vec![0, 2, 4, 6, 1, 3, 5, 7]);
    // CPUs unknown to the topology are kept, at the end.
    assert_eq!(spread_over_cores(&topo, &[1, 9, 0]), vec![0, 1, 9]);
}

#[test]
fn auto_follows_the_nic() {
    let topo = fixture();
    let nic = locate_nic(&topo, "eth1");
    let plan = plan_placement(&topo, &CpuAffinity::Auto, Some(&nic), 4).unwrap();
    assert_eq!(plan.worker_cpus, vec![Some(4), Some(6), Some(5), Some(7)]);
    assert_eq!(plan.cpuset, vec![4, 5, 6, 7]);
    assert_eq!(plan.memory_node, Some(1));
    let text = plan.to_string();
    assert!(text.contains("auto: eth1 is on NUMA node 1 (CPUs 4-7)"), "{text}");
    assert!(text.contains("mlx5_0 (OpenFabrics)"), "{text}");
    assert!(text.contains("NUMA node 1"), "{text}");
}

#[test]
fn more_workers_than_cpus_wrap_around() {
    let topo = fixture();
    let nic = locate_nic(&topo, "eth1");
    let plan = plan_placement(&topo, &CpuAffinity::Auto, Some(&nic), 6).unwrap();
    assert_eq!(plan.worker_cpus, vec![Some(4), Some(6), Some(5), Some(7), Some(4), Some(6)]);
    assert!(plan.describe().contains("wrapping around"), "{plan}");
}

#[test]
fn auto_without_device_does_not_pin() {
    let topo = fixture();
    let nic = locate_nic(&topo, "lo");
    let plan = plan_placement(&topo, &CpuAffinity::Auto, Some(&nic), 3).unwrap();
    assert_eq!(plan.worker_cpus, vec![None, None, None]);
    assert!(plan.cpuset.is_empty());
    assert_eq!(plan.memory_node, None);
    assert!(!plan.is_pinned());
    let text = plan.describe();
    assert!(text.contains("loopback"), "{text}");
    assert!(text.contains("falling back to no pinning"), "{text}");

    let unix = NicLookup::unix_socket("/run/redis.sock");
    let plan = plan_placement(&topo, &CpuAffinity::Auto, Some(&unix), 1).unwrap();
    assert_eq!(plan.worker_cpus, vec![None]);
    assert!(plan.describe().contains("unix socket"), "{plan}");

    let plan = plan_placement(&topo, &CpuAffinity::Auto, None, 2).unwrap();
    assert_eq!(plan.worker_cpus, vec![None, None]);
    assert!(plan.describe().contains("no NIC to follow"), "{plan}");
}

#[test]
fn none_pins_nothing_even_with_a_nic() {
    let topo = fixture();
    let nic = locate_nic(&topo, "eth1");
    let plan = plan_placement(&topo, &CpuAffinity::None, Some(&nic), 2).unwrap();
    assert_eq!(plan.worker_cpus, vec![None, None]);
    assert_eq!(plan.memory_node, None);
}

#[test]
fn numa_node_uses_that_nodes_cpus() {
    let topo = fixture();
    let plan = plan_placement(&topo, &CpuAffinity::NumaNode(0), None, 4).unwrap();
    assert_eq!(plan.cpuset, vec![0, 1, 2, 3]);
    assert_eq!(plan.worker_cpus, vec![Some(0), Some(2), Some(1), Some(3)]);
    assert_eq!(plan.memory_node, Some(0));
}

#[test]
fn unknown_numa_node_lists_existing_ones() {
    let topo = fixture();
    let err = plan_placement(&topo, &CpuAffinity::NumaNode(5), None, 1).unwrap_err();
    assert!(matches!(&err, NumaError::UnknownNumaNode { node: 5, existing } if existing == &[0, 1]), "{err:?}");
    assert_eq!(err.to_string(), "NUMA node 5 does not exist; existing nodes are 0-1");
}

#[test]
fn explicit_cpus_on_one_node_bind_memory_there() {
    let topo = fixture();
    let affinity: CpuAffinity = "5,7".parse().unwrap();
    let plan = plan_placement(&topo, &affinity, None, 3).unwrap();
    assert_eq!(plan.worker_cpus, vec![Some(5), Some(7), Some(5)]);
    assert_eq!(plan.cpuset, vec![5, 7]);
    assert_eq!(plan.memory_node, Some(1));
}

#[test]
fn explicit_cpus_across_nodes_do_not_bind_memory() {
    let topo = fixture();
    let affinity: CpuAffinity = "2-5".parse().unwrap();
    let plan = plan_placement(&topo, &affinity, None, 4).unwrap();
    // 2,3 share core 1; 4,5 share core 2.
    assert_eq!(plan.worker_cpus, vec![Some(2), Some(4), Some(3), Some(5)]);
    assert_eq!(plan.memory_node, None);
    assert!(plan.describe().contains("span NUMA nodes 0-1"), "{plan}");
}

#[test]
fn nonexistent_cpu_is_named_in_the_error() {
    let topo = fixture();
    let affinity: CpuAffinity = "3,9,12".parse().unwrap();
    let err = plan_placement(&topo, &affinity, None, 1).unwrap_err();
    match &err {
        NumaError::CpusUnavailable { missing, disallowed, allowed } => {
            assert_eq!(missing, &[9, 12]);
            assert!(disallowed.is_empty());
            assert_eq!(allowed, &[0, 1, 2, 3, 4, 5, 6, 7]);
        }
        other => panic!("unexpected error {other:?}"),
    }
    assert_eq!(err.to_string(), "CPU(s) 9,12 do not exist on this machine; allowed CPUs are 0-7");
}

#[test]
fn zero_workers_is_an_empty_plan() {
    let topo = fixture();
    let plan = plan_placement(&topo, &CpuAffinity::NumaNode(1), None, 0).unwrap();
    assert!(plan.worker_cpus.is_empty());
    assert_eq!(plan.memory_node, Some(1));
}

#[test]
fn bad_xml_path_is_reported() {
    let err = TopologySource::XmlFile("/nonexistent/topo.xml".into()).load().unwrap_err();
    let text = err.to_string();
    assert!(text.contains("/nonexistent/topo.xml"), "{text}");
}

#[test]
fn malformed_xml_is_an_error_not_a_crash() {
    let err = lmcache_resp_numa::load_xml("<topology><oops", "test buffer").unwrap_err();
    assert!(matches!(&err, NumaError::TopologyLoad { source, .. } if source == "test buffer"), "{err:?}");
    let path = std::env::temp_dir().join(format!("numa-bad-{}.xml", std::process::id()));
    std::fs::write(&path, "not xml at all").unwrap();
    let result = TopologySource::XmlFile(path.clone()).load();
    std::fs::remove_file(&path).unwrap();
    assert!(result.is_err());
}
