//! Checks against the real host. Written to pass on any Linux box with at
//! least one CPU and NUMA node 0 (a 2-core single-node VM included).

use std::net::SocketAddr;
use std::thread;

use lmcache_resp_numa::{
    CpuAffinity, HostTopology, NicLookup, NumaError, bind_current_thread, bind_memory, current_thread_cpus,
    current_thread_id, local_interface_for, locate_nic, memory_node_of, nic_for_remote, plan_placement, prefault,
    thread_cpus,
};

fn redis_on_localhost() -> SocketAddr {
    "127.0.0.1:6379".parse().unwrap()
}

#[test]
fn host_topology_is_this_system() {
    let host = HostTopology::get().unwrap();
    assert!(host.is_this_system());
    // The kernel's affinity mask can only be narrower than hwloc's allowed set.
    let allowed = lmcache_resp_numa::topology::allowed_cpus(host);
    let mine = current_thread_cpus().unwrap();
    assert!(!mine.is_empty());
    assert!(mine.iter().all(|c| allowed.contains(c)), "{mine:?} vs {allowed:?}");
}

#[test]
fn bind_thread_to_cpu0_and_read_back() {
    // A spawned thread, so the harness thread keeps its affinity.
    let (tid, cpus) = thread::spawn(|| {
        bind_current_thread(&[0]).unwrap();
        (current_thread_id(), current_thread_cpus().unwrap())
    })
    .join()
    .unwrap();
    assert_eq!(cpus, vec![0]);
    assert_ne!(tid, current_thread_id());
    assert!(current_thread_cpus().unwrap().len() >= cpus.len());
}

#[test]
fn thread_cpus_sees_other_threads() {
    let (tx, rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let worker = thread::spawn(move || {
        bind_current_thread(&[0]).unwrap();
        tx.send(current_thread_id()).unwrap();
        done_rx.recv().unwrap();
    });
    let tid = rx.recv().unwrap();
    assert_eq!(thread_cpus(tid).unwrap(), vec![0]);
    done_tx.send(()).unwrap();
    worker.join().unwrap();
}

#[test]
fn binding_to_a_missing_cpu_is_refused() {
    let result = thread::spawn(|| bind_current_thread(&[4000])).join().unwrap();
    match result {
        Err(NumaError::CpusUnavailable { missing, .. }) => assert_eq!(missing, vec![4000]),
        other => panic!("unexpected {other:?}"),
    }
    assert!(matches!(bind_current_thread(&[]), Err(NumaError::InvalidArgument(_))));
}

#[test]
fn loopback_route_has_no_device() {
    let iface = local_interface_for(redis_on_localhost()).unwrap().unwrap();
    assert_eq!(iface.name, "lo");
    assert!(iface.loopback);
    assert_eq!(iface.local_ip, "127.0.0.1".parse::<std::net::IpAddr>().unwrap());

    let host = HostTopology::get().unwrap();
    assert!(matches!(locate_nic(host, &iface.name), NicLookup::NoDevice { .. }));

    let lookup = nic_for_remote(host, redis_on_localhost()).unwrap();
    let NicLookup::NoDevice { reason } = &lookup else {
        panic!("expected NoDevice, got {lookup:?}");
    };
    assert!(reason.contains("127.0.0.1:6379"), "{reason}");
    assert!(reason.contains("loopback"), "{reason}");

    let plan = plan_placement(host, &CpuAffinity::Auto, Some(&lookup), 4).unwrap();
    assert_eq!(plan.worker_cpus, vec![None; 4]);
    assert_eq!(plan.memory_node, None);
    let text = plan.describe();
    assert!(text.contains("127.0.0.1:6379 routes over the loopback interface lo"), "{text}");
    assert!(text.contains("falling back to no pinning"), "{text}");
}

/// An anonymous private mapping, unmapped on drop.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Mapping {
    fn new(len: usize) -> Self {
        // SAFETY: anonymous mapping with no address hint; the result is
        // checked against MAP_FAILED.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED, "mmap failed");
        Self { ptr: ptr.cast(), len }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly what mmap returned and nothing else
        // refers to the mapping any more.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// Mode and nodemask of the policy covering `ptr` (get_mempolicy with
/// MPOL_F_ADDR, which reads the policy without faulting the page in).
fn policy_of(ptr: *const u8) -> (i32, libc::c_ulong) {
    let mut mode: libc::c_int = -1;
    let mut mask = [0 as libc::c_ulong; 16];
    // SAFETY: mode and mask are valid out-buffers; maxnode matches mask's
    // size in bits.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut mode as *mut libc::c_int,
            mask.as_mut_ptr(),
            (mask.len() * libc::c_ulong::BITS as usize) as libc::c_ulong,
            ptr,
            2 as libc::c_ulong, // MPOL_F_ADDR
        )
    };
    assert_eq!(rc, 0, "get_mempolicy: {}", std::io::Error::last_os_error());
    (mode, mask[0])
}

#[test]
fn bind_memory_and_prefault_on_node0() {
    // hwloc maps non-strict Bind to MPOL_PREFERRED_MANY (5) on kernels that
    // have it, else MPOL_PREFERRED (1); MPOL_BIND (2) would also be fine.
    // An unbound range reports MPOL_DEFAULT (0) with an empty mask.
    const BOUND_MODES: [i32; 3] = [1, 2, 5];
    let len = 64 * 4096;
    let map = Mapping::new(len);

    // Nothing touched yet: the kernel cannot say, and we must not guess.
    assert_eq!(memory_node_of(map.ptr).unwrap(), None);

    // SAFETY: the whole range is one live mapping owned by this test and no
    // other thread uses it.
    unsafe {
        bind_memory(map.ptr, len, 0).unwrap();
        prefault(map.ptr, len).unwrap();
    }
    // SAFETY: in bounds of the mapping.
    let last = unsafe { map.ptr.add(len - 1) };
    for p in [map.ptr.cast_const(), last.cast_const()] {
        let (mode, mask) = policy_of(p);
        assert!(BOUND_MODES.contains(&mode), "mode {mode}");
        assert_eq!(mask, 1, "node mask must be exactly node 0");
    }
    // Memory outside the range keeps the default policy.
    let other = Mapping::new(4096);
    assert_eq!(policy_of(other.ptr), (0, 0));
    for p in [map.ptr.cast_const(), last.cast_const()] {
        let node = memory_node_of(p).unwrap();
        assert!(matches!(node, Some(0) | None), "{node:?}");
    }
    // Prefault must not change contents.
    // SAFETY: the mapping is readable and fully populated.
    let bytes = unsafe { std::slice::from_raw_parts(map.ptr, len) };
    assert!(bytes.iter().all(|&b| b == 0));
}

#[test]
fn bind_memory_rejects_unknown_node() {
    let map = Mapping::new(4096);
    // SAFETY: one live mapping owned by this test.
    let err = unsafe { bind_memory(map.ptr, 4096, 999) }.unwrap_err();
    assert!(matches!(&err, NumaError::UnknownNumaNode { node: 999, existing } if existing.contains(&0)), "{err:?}");
}
