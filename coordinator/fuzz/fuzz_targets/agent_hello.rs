//! A node's first message as gangd reads it: any payload, framed, decoded
//! as FromAgent; a Hello then goes through what gangd checks before it
//! adopts anything: its housekeeping CPU list and, for every live job, the
//! adoption plan. Properties: no panic; what gangd keeps is bounded by the
//! CPUs of a node and the ranks the job may have, whatever the node claims.

#![no_main]

use gang_coordinator::daemon::adoption::{plan, MAX_ADOPTED_RANKS};
use gang_coordinator::matrix::{parse_cpus, NODE_MAX_CPUS};
use gang_wire::proto::FromAgent;
use gang_coordinator_fuzz::{assert_round_trip, decode_payload};
use libfuzzer_sys::fuzz_target;

fn assert_cpu_set(cpus: &[u32]) {
    assert!(cpus.len() <= NODE_MAX_CPUS as usize);
    assert!(
        cpus.windows(2).all(|w| w[0] < w[1]),
        "ascending, each once: {cpus:?}"
    );
    assert!(cpus.iter().all(|&c| c < NODE_MAX_CPUS));
}

fuzz_target!(|payload: &[u8]| {
    let Some(Ok(msg)) = decode_payload::<FromAgent>(payload) else {
        return;
    };
    assert_round_trip(&msg);
    let FromAgent::Hello {
        housekeeping_cpus,
        jobs,
        schedule,
        ..
    } = &msg
    else {
        return;
    };
    if let Ok(cpus) = parse_cpus(housekeeping_cpus) {
        assert_cpu_set(&cpus);
    }
    for lj in jobs {
        match plan(lj, schedule) {
            Ok(a) => {
                assert!((1..=MAX_ADOPTED_RANKS).contains(&lj.size));
                assert!(a.ranks.len() <= lj.ranks.len());
                assert!(a.ranks.windows(2).all(|w| w[0] < w[1]));
                assert!(a.ranks.iter().all(|&r| r < lj.size));
                if let Some((slot, cpus)) = &a.placed {
                    assert!(*slot < schedule.len());
                    assert!(!cpus.is_empty());
                    assert_cpu_set(cpus);
                }
            }
            Err(e) => assert!(lj.size == 0 || lj.size > MAX_ADOPTED_RANKS, "{e}"),
        }
    }
});
