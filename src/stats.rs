//! `--stats N` / `--monitor N`: counters served through scx_stats, like the
//! scx schedulers, so the usual tooling reads them. On a node of a cluster
//! the daemon's node agent also puts its cluster clock's line in them
//! (`cluster_clock`), so `scx_gang --monitor` in another process shows it.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use crossbeam_channel::{Receiver, Sender};
use scx_stats::prelude::*;
use scx_stats_derive::{stat_doc, Stats};
use serde::{Deserialize, Serialize};

#[stat_doc]
#[derive(Clone, Debug, Default, Serialize, Deserialize, Stats)]
#[stat(top)]
pub struct Metrics {
    #[stat(desc = "Gangs known (cgroups with tasks below the gang root)")]
    pub nr_gangs: u64,
    #[stat(desc = "Slots in the slot table")]
    pub nr_slots: u64,
    #[stat(desc = "Slot in force")]
    pub current_slot: u64,
    #[stat(desc = "Slot switches")]
    pub switches: u64,
    #[stat(desc = "CPUs preempted by a switch")]
    pub kick_preempt: u64,
    #[stat(desc = "Idle CPUs woken by a switch")]
    pub kick_idle: u64,
    #[stat(desc = "Slot owner's tasks dispatched")]
    pub gang_dispatch: u64,
    #[stat(desc = "Tasks of no gang dispatched")]
    pub other_dispatch: u64,
    #[stat(desc = "Other gangs' tasks run on idle CPUs (fill)")]
    pub fill_dispatch: u64,
    #[stat(desc = "Gang tasks preempted to give tasks of no gang their minimum share")]
    pub min_share_preempt: u64,
    #[stat(desc = "Tasks caught starting after their slot ended (preempted at once)")]
    pub stale_run: u64,
    #[stat(desc = "Per-CPU kthreads and scx_gang itself run at once on their CPU")]
    pub priority_direct: u64,
    #[stat(desc = "Owner CPUs kicked when a gang task woke")]
    pub wake_kick: u64,
    #[stat(desc = "Woken gang tasks put straight on an idle CPU their gang owns")]
    pub wake_direct: u64,
    #[stat(desc = "Gang tasks preempted by a wake-up of scx_gang's own threads")]
    #[serde(default)]
    pub preempt_daemon: u64,
    #[stat(desc = "Gang tasks preempted by a wake-up of a per-CPU kthread")]
    #[serde(default)]
    pub preempt_kthread: u64,
    #[stat(desc = "Gang tasks preempted inside an RCU read-side section, run outside their slot")]
    #[serde(default)]
    pub rcu_readers: u64,
    #[stat(
        desc = "CPUs preempted because their gang was parked before a strict switch (park = bpf)"
    )]
    #[serde(default)]
    pub park_kicks: u64,
    #[stat(desc = "Tasks of a parked gang let run on to the end of their system call")]
    #[serde(default)]
    pub park_syscalls: u64,
    #[stat(desc = "Tasks of a parked gang preempted at the end of their system call")]
    #[serde(default)]
    pub park_syscall_exits: u64,
    #[stat(desc = "Trace events lost (ring buffer full)")]
    pub events_lost: u64,
    #[stat(desc = "Share of CPU time run by gangs (%)")]
    pub gang_pct: f64,
    #[stat(desc = "Share of CPU time run by tasks of no gang (%)")]
    pub other_pct: f64,
    #[stat(desc = "CPU time run by gangs (ns)")]
    pub gang_ns: u64,
    #[stat(desc = "CPU time run by tasks of no gang (ns)")]
    pub other_ns: u64,
    #[stat(
        desc = "Runs of the scheduler's BPF callbacks (counted while kernel.bpf_stats_enabled is 1)"
    )]
    #[serde(default)]
    pub bpf_runs: u64,
    #[stat(
        desc = "Time in the scheduler's BPF callbacks (ns; counted while kernel.bpf_stats_enabled is 1)"
    )]
    #[serde(default)]
    pub bpf_ns: u64,
    #[stat(
        desc = "The node agent's cluster clock: source, state, offset, bound (empty: no agent)"
    )]
    #[serde(default)]
    pub cluster_clock: String,
}

/// Makes the cluster clock's line for the metrics (the agent's, given by
/// main.rs: the scheduler does not know the agent).
pub type ClockLine = Arc<dyn Fn() -> String + Send + Sync>;

impl Metrics {
    pub fn format<W: Write>(&self, w: &mut W) -> Result<()> {
        writeln!(
            w,
            "[scx_gang] gangs {} slots {} slot {} | switches {} (preempt {} idle {}) | \
             dispatch gang {} other {} fill {} | wake direct {} kick {} | \
             min-share {} stale {} priority {} (preempting daemon {} kthread {}) rcu {} | \
             park kicks {} syscalls {} exits {} | cpu gang {:.1}% other {:.1}% | lost {}",
            self.nr_gangs,
            self.nr_slots,
            self.current_slot,
            self.switches,
            self.kick_preempt,
            self.kick_idle,
            self.gang_dispatch,
            self.other_dispatch,
            self.fill_dispatch,
            self.wake_direct,
            self.wake_kick,
            self.min_share_preempt,
            self.stale_run,
            self.priority_direct,
            self.preempt_daemon,
            self.preempt_kthread,
            self.rcu_readers,
            self.park_kicks,
            self.park_syscalls,
            self.park_syscall_exits,
            self.gang_pct,
            self.other_pct,
            self.events_lost,
        )?;
        if self.bpf_runs > 0 {
            let busy = (self.gang_ns + self.other_ns).max(1);
            writeln!(
                w,
                "[scx_gang] bpf callbacks {} runs, {:.2} us each, {:.2}% of busy time",
                self.bpf_runs,
                self.bpf_ns as f64 / self.bpf_runs as f64 / 1000.0,
                self.bpf_ns as f64 * 100.0 / busy as f64
            )?;
        }
        if !self.cluster_clock.is_empty() {
            writeln!(w, "[scx_gang] {}", self.cluster_clock)?;
        }
        Ok(())
    }

    /// Counters over an interval: `self` minus the earlier `rhs`.
    fn delta(&self, rhs: &Self) -> Self {
        let interval_ns = (self.gang_ns - rhs.gang_ns) + (self.other_ns - rhs.other_ns);
        let pct = |ns: u64| {
            if interval_ns == 0 {
                0.0
            } else {
                ns as f64 * 100.0 / interval_ns as f64
            }
        };
        Self {
            switches: self.switches - rhs.switches,
            kick_preempt: self.kick_preempt - rhs.kick_preempt,
            kick_idle: self.kick_idle - rhs.kick_idle,
            gang_dispatch: self.gang_dispatch - rhs.gang_dispatch,
            other_dispatch: self.other_dispatch - rhs.other_dispatch,
            fill_dispatch: self.fill_dispatch - rhs.fill_dispatch,
            min_share_preempt: self.min_share_preempt - rhs.min_share_preempt,
            stale_run: self.stale_run - rhs.stale_run,
            priority_direct: self.priority_direct - rhs.priority_direct,
            wake_kick: self.wake_kick - rhs.wake_kick,
            wake_direct: self.wake_direct - rhs.wake_direct,
            preempt_daemon: self.preempt_daemon - rhs.preempt_daemon,
            preempt_kthread: self.preempt_kthread - rhs.preempt_kthread,
            rcu_readers: self.rcu_readers - rhs.rcu_readers,
            park_kicks: self.park_kicks - rhs.park_kicks,
            park_syscalls: self.park_syscalls - rhs.park_syscalls,
            park_syscall_exits: self.park_syscall_exits - rhs.park_syscall_exits,
            events_lost: self.events_lost - rhs.events_lost,
            bpf_runs: self.bpf_runs - rhs.bpf_runs,
            bpf_ns: self.bpf_ns - rhs.bpf_ns,
            gang_ns: self.gang_ns - rhs.gang_ns,
            other_ns: self.other_ns - rhs.other_ns,
            gang_pct: pct(self.gang_ns - rhs.gang_ns),
            other_pct: pct(self.other_ns - rhs.other_ns),
            ..self.clone()
        }
    }
}

pub fn server_data() -> StatsServerData<(), Metrics> {
    let open: Box<dyn StatsOpener<(), Metrics>> = Box::new(move |(req_ch, res_ch)| {
        req_ch.send(())?;
        let mut prev = res_ch.recv()?;
        let read: Box<dyn StatsReader<(), Metrics>> = Box::new(move |_args, (req_ch, res_ch)| {
            req_ch.send(())?;
            let cur = res_ch.recv()?;
            let delta = cur.delta(&prev);
            prev = cur;
            delta.to_json()
        });
        Ok(read)
    });
    StatsServerData::new()
        .add_meta(Metrics::meta())
        .add_ops("top", StatsOps { open, close: None })
}

pub fn monitor(interval: Duration, shutdown: Arc<AtomicBool>) -> Result<()> {
    scx_utils::monitor_stats::<Metrics>(
        &[],
        interval,
        || shutdown.load(Ordering::Relaxed),
        |metrics| metrics.format(&mut std::io::stdout()),
    )
}

/// Statistics requests handed to the main loop. A thread takes each
/// request the server makes, queues it on `requests` and wakes the loop
/// (`wake`), which answers it in its poll: the loop would otherwise see it
/// only at its idle period, a second. Dropping it stops the thread.
pub struct StatsForward {
    pub requests: Receiver<()>,
    stop: Option<Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl StatsForward {
    pub fn start(server: Receiver<()>, wake: impl Fn() + Send + 'static) -> Result<Self> {
        let (queued, requests) = crossbeam_channel::unbounded();
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let thread = std::thread::Builder::new()
            .name("stats-forward".into())
            .spawn(move || loop {
                crossbeam_channel::select! {
                    recv(server) -> r => {
                        if r.is_err() || queued.send(()).is_err() {
                            return;
                        }
                        wake();
                    }
                    // Only a drop of the sender ends this wait.
                    recv(stopped) -> _ => return,
                }
            })?;
        Ok(Self {
            requests,
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for StatsForward {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(m: &Metrics) -> String {
        let mut out = Vec::new();
        m.format(&mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_cluster_clock_line_is_shown_only_when_the_agent_runs() {
        let mut m = Metrics::default();
        assert_eq!(shown(&m).lines().count(), 1);
        m.cluster_clock =
            "cluster clock (gangd): good, offset -1500 ns, bound 85 µs, rate 0 ppb, 16 samples, 0 steps".into();
        let text = shown(&m);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1], format!("[scx_gang] {}", m.cluster_clock));
        // Over an interval the line is the latest, not a difference.
        assert_eq!(m.delta(&Metrics::default()).cluster_clock, m.cluster_clock);
    }

    #[test]
    fn preemptions_by_priority_wake_ups_are_shown_by_source_and_counted_per_interval() {
        let before = Metrics {
            priority_direct: 100,
            preempt_daemon: 7,
            preempt_kthread: 5,
            ..Metrics::default()
        };
        let after = Metrics {
            priority_direct: 160,
            preempt_daemon: 19,
            preempt_kthread: 8,
            ..Metrics::default()
        };
        assert!(
            shown(&after).contains("priority 160 (preempting daemon 19 kthread 8)"),
            "{}",
            shown(&after)
        );
        let d = after.delta(&before);
        assert_eq!(
            (d.priority_direct, d.preempt_daemon, d.preempt_kthread),
            (60, 12, 3)
        );
        // A monitor reading a daemon older than these counters gets 0s.
        let from_old = serde_json::to_string(&Metrics::default())
            .unwrap()
            .replace("\"preempt_daemon\":0,", "")
            .replace("\"preempt_kthread\":0,", "");
        assert!(!from_old.contains("preempt_"), "{from_old}");
        let old: Metrics = serde_json::from_str(&from_old).unwrap();
        assert_eq!((old.preempt_daemon, old.preempt_kthread), (0, 0));
    }
}
