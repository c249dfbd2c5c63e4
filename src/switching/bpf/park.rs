//! The park in BPF (knob `park = bpf`, issue 12): the first half of a
//! strict switch without the cgroup freezer.
//!
//! The scheduler is told which gangs to park (`BpfScheduler::park_gangs`,
//! the BPF program `park_gangs`): while the generation in force lasts they
//! own no CPU, every CPU running one of their tasks is preempted, and the
//! switch to the next generation ends the park on its own. A task inside a
//! system call runs on to the call's end and is preempted at its return to
//! user space (it might hold its socket's lock, and then that socket would
//! not drain: bpf/scx_gang.bpf.c, "Park"). So a gang is parked once no CPU
//! runs any of its tasks; this job waits for that (the scheduler's per-CPU
//! record of what runs, through `RunningProbe`) and then for the gangs'
//! sockets to drain, exactly as after the freezer (drain.rs).
//!
//! Against the freezer (freezer.rs), which must wake every task and let it
//! run to its return to user space and then be polled through
//! cgroup.events: tasks preempted in user space stop within the kick of
//! their CPU, and nothing is written to cgroup files. A job suspended by
//! its user still uses the freezer (FreezeHolds); the two never meet,
//! since a park only names gangs of the slot in force.
//!
//! System calls are tracked only while a park may come (coordinated, two
//! slots or more, park = bpf: `update_syscall_tracking`), since the two
//! programs run at every system call of the node.
//!
//! Known faults: a task already inside a system call when tracking started
//! counts as outside it until it makes its next one; a task in a
//! long system call (a large write to a slow peer) keeps its CPU until the
//! call ends, which the report shows as a long `park_us`.

use std::io;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::control::FrozenReport;
use crate::drain;
use crate::freezer::ParkGang;

/// Does any CPU run a task of a gang of the mask (bit = gang id)? Called
/// from the freeze job's thread.
pub type RunningProbe = Box<dyn Fn(u64) -> io::Result<bool> + Send>;

/// How often the job looks whether the parked gangs left their CPUs: a
/// kick takes microseconds, so a short sleep, not the drain's poll.
const OFF_CPU_POLL: Duration = Duration::from_micros(50);

/// Waits for the gangs of `mask` (the ones of `all` not yielded: the
/// scheduler parked those itself) to leave every CPU, then for the TCP
/// sockets of all of `all` to drain, within `timeout` from `start` (when
/// the park was asked of the scheduler).
pub fn park_and_drain(
    gen: u64,
    all: &[ParkGang],
    mask: u64,
    running: RunningProbe,
    start: Instant,
    timeout: Duration,
) -> io::Result<FrozenReport> {
    let deadline = start + timeout;
    let parked = loop {
        if mask == 0 || !running(mask)? {
            break true;
        }
        if Instant::now() >= deadline {
            break false;
        }
        std::thread::sleep(OFF_CPU_POLL);
    };
    let (yielded, gangs): (Vec<&ParkGang>, Vec<&ParkGang>) = all.iter().partition(|g| g.yielded);
    let dirs: Vec<PathBuf> = all.iter().map(|g| g.dir.clone()).collect();
    let names = gangs.iter().map(|g| g.name.clone()).collect();
    Ok(FrozenReport {
        yielded: yielded.iter().map(|g| g.name.clone()).collect(),
        ..drain::drain_parked(gen, names, parked, &dirs, start, timeout)?
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    fn gang(name: &str, yielded: bool) -> ParkGang {
        // A directory that does not exist: nothing to drain.
        ParkGang {
            name: name.into(),
            dir: std::env::temp_dir().join(format!("scx-gang-park-none-{name}")),
            yielded,
        }
    }

    #[test]
    fn a_gang_is_parked_once_no_cpu_runs_it_and_then_drained() {
        let looks = Arc::new(AtomicU32::new(0));
        let seen = looks.clone();
        // Still on a CPU at the first two looks (a task finishing its
        // system call), then off.
        let probe: RunningProbe = Box::new(move |mask| {
            assert_eq!(mask, 0b10, "only the gang not yielded is waited for");
            Ok(seen.fetch_add(1, Ordering::SeqCst) < 2)
        });
        let all = [gang("a", true), gang("b", false)];
        let r =
            park_and_drain(7, &all, 0b10, probe, Instant::now(), Duration::from_secs(5)).unwrap();
        assert!(r.parked && r.drained);
        assert_eq!(looks.load(Ordering::SeqCst), 3);
        assert_eq!(r.gen, 7);
        assert_eq!(r.gangs, vec!["b".to_string()]);
        assert_eq!(r.yielded, vec!["a".to_string()]);
    }

    #[test]
    fn a_gang_still_on_a_cpu_at_the_timeout_is_reported_not_parked() {
        let probe: RunningProbe = Box::new(|_| Ok(true));
        let start = Instant::now();
        let r = park_and_drain(
            1,
            &[gang("c", false)],
            1,
            probe,
            start,
            Duration::from_millis(5),
        )
        .unwrap();
        assert!(!r.parked, "never off its CPU: said so");
        assert!(start.elapsed() >= Duration::from_millis(5));
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "the timeout ends the wait"
        );
    }

    #[test]
    fn nothing_to_park_looks_at_no_cpu_and_a_failed_probe_is_an_error() {
        let probe: RunningProbe = Box::new(|_| panic!("no gang to park: no look"));
        let r = park_and_drain(
            2,
            &[gang("d", true)],
            0,
            probe,
            Instant::now(),
            Duration::ZERO,
        )
        .unwrap();
        assert!(r.parked && r.gangs.is_empty());
        let failing: RunningProbe = Box::new(|_| Err(io::Error::other("map gone")));
        let e = park_and_drain(
            3,
            &[gang("e", false)],
            1,
            failing,
            Instant::now(),
            Duration::ZERO,
        )
        .unwrap_err();
        assert!(e.to_string().contains("map gone"));
    }
}
