//! The BPF scheduler's plumbing: loads and attaches the sched_ext program
//! (bpf/scx_gang.bpf.c), gives the switching logic its maps, programs and
//! ring buffers (`BpfScheduler`, switching/bpf/), serves the statistics,
//! and restarts the scheduler when the kernel asks for it.
//!
//! What to switch and when is not decided here: switching/bpf/ decides,
//! switching/mainloop.rs runs the loop. This file only turns those
//! decisions into map writes and syscall-program runs (the model is the scx
//! schedulers' init / run / Drop).
//!
//! Known faults: `run_syscall` hands a struct to BPF as raw bytes (its
//! layout is bpf/intf.h's, through bindgen); the counters logged at exit
//! show 0 gangs and 0 slots (the switcher knows those, not this file).

use std::cell::RefCell;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::{bail, Context, Result};
use libbpf_rs::{
    MapCore, MapFlags, MapHandle, MapType, OpenObject, ProgramInput, RingBuffer, RingBufferBuilder,
};
use log::{info, warn};
use scx_stats::prelude::*;
use scx_utils::{scx_ops_attach, scx_ops_load, scx_ops_open, uei_exited, uei_report, UserExitInfo};

use gang_wire::trace::TraceEvent;
use scx_gang::bpf_intf::*;
use scx_gang::clock::ClockShare;
use scx_gang::control::Inbox;
use scx_gang::cpulist::CpuList;
use scx_gang::events::{decode_event, decode_notice};
use scx_gang::freezer::FreezeHolds;
use scx_gang::gangs;
use scx_gang::knobs::{NodeKnobs, SharedKnobs};
use scx_gang::slots::{GangId, SlotTable, MAX_GANGS};
use scx_gang::switching::bpf::park::RunningProbe;
use scx_gang::switching::bpf::{BpfConfig, BpfScheduler, BpfSwitcher};
use scx_gang::switching::follow::SwitchedSink;
use scx_gang::switching::{mainloop, YieldSink};

use crate::bpf_skel::*;
use crate::stats::{ClockLine, Metrics, StatsForward};

/// What the scheduler needs from the command line and the daemon.
pub struct Config {
    pub cgroup_mount: PathBuf,
    pub gang_root: PathBuf,
    /// Watch the gang root (gang_watch.rs) or rescan it every 100 ms.
    pub gang_watch: bool,
    pub verbose: bool,
    pub exit_dump_len: u32,
    /// Who holds which gang frozen, shared with the node agent.
    pub holds: FreezeHolds,
    /// What the slot clock server hands out.
    pub clock: Arc<ClockShare>,
    /// The main loop's inbox (the yield notices thread writes to it).
    pub inbox: Sender<Inbox>,
    /// The node agent's cluster clock line, for `--monitor` (None: no agent).
    pub cluster_clock: Option<ClockLine>,
    /// Told (gang name, generation) when every rank of a gang here yielded
    /// its slot: the node agent tells gangd.
    pub on_all_yielded: Option<YieldSink>,
    /// Told every timed switch (the node agent tells gangd: Switched).
    pub on_switched: Option<SwitchedSink>,
}

/// Runs the BPF mode until `shutdown`: loads and attaches the scheduler,
/// runs the main loop over it, and again when the kernel asks for a
/// restart.
pub fn run(
    cfg: &Config,
    knobs: Arc<SharedKnobs>,
    requests: &Receiver<Inbox>,
    shutdown: &AtomicBool,
) -> Result<()> {
    let mut open_object = MaybeUninit::uninit();
    loop {
        let generation = knobs.generation();
        let knob_values = knobs.snapshot();
        let sched = Scheduler::init(cfg, &knob_values, &mut open_object)?;
        let bpf_cfg = BpfConfig {
            gang_root: cfg.gang_root.clone(),
            holds: cfg.holds.clone(),
            clock: cfg.clock.clone(),
            on_all_yielded: cfg.on_all_yielded.clone(),
            shared_knobs: knobs.clone(),
        };
        let mut switcher = BpfSwitcher::new(sched, bpf_cfg, knob_values)?;
        mainloop::run(
            &mut switcher,
            requests,
            cfg.inbox.clone(),
            shutdown,
            &knobs,
            generation,
            cfg.on_switched.clone(),
            cfg.gang_watch.then_some(cfg.gang_root.as_path()),
        )?;
        switcher.stop();
        let exit = switcher.scheduler().detach()?;
        // Thaws what the last freeze parked, and says so.
        drop(switcher);
        if !exit.should_restart() {
            return Ok(());
        }
        info!("restarting scx_gang");
    }
}

/// The loaded, attached BPF scheduler.
pub struct Scheduler<'a> {
    skel: BpfSkel<'a>,
    struct_ops: Option<libbpf_rs::Link>,
    /// sys_enter and sys_exit, while syscalls are tracked.
    syscall_links: Option<(libbpf_rs::Link, libbpf_rs::Link)>,
    nr_cpus: u32,
    clock: Arc<ClockShare>,
    stats_server: StatsServer<(), Metrics>,
    /// The server's requests, each of which wakes the main loop.
    stats_forward: StatsForward,
    cluster_clock: Option<ClockLine>,
    events: RingBuffer<'static>,
    /// What `events` delivered and `take_events` did not take yet.
    incoming: Rc<RefCell<Vec<TraceEvent>>>,
    notices: Option<JoinHandle<()>>,
    /// The write end of the notices thread's stop pipe: closing it (detach,
    /// or a drop) ends the thread.
    notices_stop: Option<OwnedFd>,
}

impl<'a> Scheduler<'a> {
    pub fn init(
        cfg: &Config,
        knob_values: &NodeKnobs,
        open_object: &'a mut MaybeUninit<OpenObject>,
    ) -> Result<Self> {
        let nr_cpus = *scx_utils::NR_CPU_IDS as u32;
        if nr_cpus > gang_limits_GANG_MAX_CPUS {
            bail!("this node has {nr_cpus} CPUs; scx_gang supports at most {gang_limits_GANG_MAX_CPUS}");
        }
        let level = gangs::cgroup_level(&cfg.cgroup_mount, &cfg.gang_root).with_context(|| {
            format!(
                "the gang root {} is not below {}",
                cfg.gang_root.display(),
                cfg.cgroup_mount.display()
            )
        })?;

        let mut builder = BpfSkelBuilder::default();
        builder.obj_builder.debug(cfg.verbose);
        let mut skel = scx_ops_open!(
            builder,
            open_object,
            gang_ops,
            None::<libbpf_rs::libbpf_sys::bpf_object_open_opts>
        )?;
        skel.struct_ops.gang_ops_mut().exit_dump_len = cfg.exit_dump_len;
        let rodata = skel.maps.rodata_data.as_mut().unwrap();
        rodata.nr_cpus = nr_cpus;
        rodata.gang_root_level = level;
        rodata.daemon_tgid = std::process::id();
        // Attached only while a park in BPF may come (`track_syscalls`): they
        // run at every system call of the node.
        skel.progs.gang_sys_enter.set_autoattach(false);
        skel.progs.gang_sys_exit.set_autoattach(false);

        let mut skel = scx_ops_load!(skel, gang_ops, uei)?;
        cfg.clock.set_pages(Some(
            clock_pages(&skel.maps.gang_clocks).context("making the slot clock pages")?,
        ));
        init_bss(&mut skel, knob_values);
        let struct_ops = Some(scx_ops_attach!(skel, gang_ops)?);
        let stats_server = StatsServer::new(crate::stats::server_data()).launch()?;
        let wake = cfg.inbox.clone();
        let stats_forward = StatsForward::start(stats_server.channels().1, move || {
            let _ = wake.send(Inbox::Stats);
        })?;
        info!(
            "scx_gang attached: {nr_cpus} CPUs, gang root {}",
            cfg.gang_root.display()
        );

        let incoming: Rc<RefCell<Vec<TraceEvent>>> = Rc::default();
        let sink = incoming.clone();
        let mut rb_builder = RingBufferBuilder::new();
        rb_builder.add(&skel.maps.events, move |data: &[u8]| {
            if let Some(e) = decode_event(data) {
                sink.borrow_mut().push(e);
            }
            0
        })?;
        let events = rb_builder.build()?;
        let (stop_rx, notices_stop) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).context("the notices' stop pipe")?;
        let notices = watch_notices(
            MapHandle::try_from(&skel.maps.notices)?,
            cfg.inbox.clone(),
            stop_rx,
        )?;
        Ok(Self {
            skel,
            struct_ops,
            syscall_links: None,
            nr_cpus,
            clock: cfg.clock.clone(),
            stats_server,
            stats_forward,
            cluster_clock: cfg.cluster_clock.clone(),
            events,
            incoming,
            notices: Some(notices),
            notices_stop: Some(notices_stop),
        })
    }

    /// What each struct_ops callback cost since load: (name, runs, ns),
    /// from the kernel's BPF program statistics, which count only while
    /// the sysctl kernel.bpf_stats_enabled is 1 (all zero otherwise).
    fn bpf_cost(&self) -> Vec<(String, u64, u64)> {
        use libbpf_rs::libbpf_sys::{bpf_obj_get_info_by_fd, bpf_prog_info};
        use libbpf_rs::skel::Skel;
        self.skel
            .object()
            .progs()
            .filter(|p| p.prog_type() == libbpf_rs::ProgramType::StructOps)
            .filter_map(|p| {
                let mut info = bpf_prog_info::default();
                let mut len = std::mem::size_of::<bpf_prog_info>() as u32;
                // SAFETY: the kernel fills at most `len` bytes of `info`;
                // no array of it is asked for (all their pointers are 0).
                let rc = unsafe {
                    bpf_obj_get_info_by_fd(
                        p.as_fd().as_raw_fd(),
                        (&mut info as *mut bpf_prog_info).cast(),
                        &mut len,
                    )
                };
                let name = p
                    .name()
                    .to_string_lossy()
                    .trim_start_matches("gang_")
                    .to_string();
                (rc == 0).then_some((name, info.run_cnt, info.run_time_ns))
            })
            .collect()
    }

    /// Tasks' cached gangs are stale: BPF looks each up again at its next
    /// wake-up (after the maps were written, so it sees the new ones).
    fn gangs_changed(&mut self) {
        let bss = self.skel.maps.bss_data.as_mut().unwrap();
        std::sync::atomic::fence(Ordering::SeqCst);
        bss.gangs_epoch = bss.gangs_epoch.wrapping_add(1);
    }

    /// Detaches the scheduler and says how it exited (and, if the kernel
    /// counted them, what its callbacks cost).
    pub fn detach(&mut self) -> Result<UserExitInfo> {
        let cost: Vec<String> = self
            .bpf_cost()
            .into_iter()
            .filter(|(_, runs, _)| *runs > 0)
            .map(|(n, runs, ns)| format!("{n} {runs} x {:.2} us", ns as f64 / runs as f64 / 1000.0))
            .collect();
        if !cost.is_empty() {
            info!("BPF callbacks (runs x mean time): {}", cost.join(", "));
        }
        // What the scheduler did over its whole run, for whoever reads the
        // log after a benchmark (the counters die with the maps).
        let mut line = Vec::new();
        if self.metrics(0, 0).format(&mut line).is_ok() {
            info!(
                "counters at exit: {}",
                String::from_utf8_lossy(&line).trim_end()
            );
        }
        self.notices_stop.take();
        if let Some(n) = self.notices.take() {
            let _ = n.join();
        }
        let _ = self.struct_ops.take();
        self.clock.set_pages(None);
        uei_report!(&self.skel, uei)
    }

    fn cpu_stats(&self) -> gang_cpu_stats {
        let mut sum: gang_cpu_stats = unsafe { std::mem::zeroed() };
        let key = 0u32.to_ne_bytes();
        if let Ok(Some(per_cpu)) = self.skel.maps.cpu_stats.lookup_percpu(&key, MapFlags::ANY) {
            for bytes in per_cpu {
                if bytes.len() < std::mem::size_of::<gang_cpu_stats>() {
                    continue;
                }
                let s: gang_cpu_stats = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
                for (a, b) in sum.counters.iter_mut().zip(s.counters) {
                    *a += b;
                }
                for (a, b) in sum.gang_run_ns.iter_mut().zip(s.gang_run_ns) {
                    *a += b;
                }
                sum.other_run_ns += s.other_run_ns;
            }
        }
        sum
    }

    fn metrics(&self, nr_gangs: u64, nr_slots: u64) -> Metrics {
        let s = self.cpu_stats();
        let c = |i: gang_stat| s.counters[i as usize];
        let bss = self.skel.maps.bss_data.as_ref().unwrap();
        let gang_ns: u64 = s.gang_run_ns.iter().sum();
        let total = (gang_ns + s.other_run_ns).max(1) as f64;
        let cost = self.bpf_cost();
        Metrics {
            bpf_runs: cost.iter().map(|c| c.1).sum(),
            bpf_ns: cost.iter().map(|c| c.2).sum(),
            nr_gangs,
            nr_slots,
            current_slot: bss.cur_slot as u64,
            switches: c(gang_stat_STAT_SWITCHES),
            kick_preempt: c(gang_stat_STAT_KICK_PREEMPT),
            kick_idle: c(gang_stat_STAT_KICK_IDLE),
            gang_dispatch: c(gang_stat_STAT_GANG_DISPATCH),
            other_dispatch: c(gang_stat_STAT_OTHER_DISPATCH),
            fill_dispatch: c(gang_stat_STAT_FILL_DISPATCH),
            min_share_preempt: c(gang_stat_STAT_MIN_SHARE),
            stale_run: c(gang_stat_STAT_STALE_RUN),
            priority_direct: c(gang_stat_STAT_PRIORITY_DIRECT),
            wake_kick: c(gang_stat_STAT_WAKE_KICK),
            wake_direct: c(gang_stat_STAT_WAKE_DIRECT),
            preempt_daemon: c(gang_stat_STAT_PREEMPT_DAEMON),
            preempt_kthread: c(gang_stat_STAT_PREEMPT_KTHREAD),
            rcu_readers: c(gang_stat_STAT_RCU_READER),
            park_kicks: c(gang_stat_STAT_PARK_KICK),
            park_syscalls: c(gang_stat_STAT_PARK_SYSCALL),
            park_syscall_exits: c(gang_stat_STAT_PARK_SYSCALL_EXIT),
            events_lost: c(gang_stat_STAT_EVENTS_LOST),
            gang_ns,
            other_ns: s.other_run_ns,
            gang_pct: gang_ns as f64 * 100.0 / total,
            other_pct: s.other_run_ns as f64 * 100.0 / total,
            cluster_clock: self
                .cluster_clock
                .as_ref()
                .map_or_else(String::new, |f| f()),
        }
    }
}

impl BpfScheduler for Scheduler<'_> {
    fn nr_cpus(&self) -> u32 {
        self.nr_cpus
    }

    fn exited(&self) -> bool {
        uei_exited!(&self.skel, uei)
    }

    fn add_gang(&mut self, cgroup_id: u64, gang: GangId) -> Result<()> {
        self.skel.maps.gang_cgroups.update(
            &cgroup_id.to_ne_bytes(),
            &(gang as i32).to_ne_bytes(),
            MapFlags::ANY,
        )?;
        self.gangs_changed();
        Ok(())
    }

    fn remove_gang(&mut self, cgroup_id: u64) {
        let _ = self.skel.maps.gang_cgroups.delete(&cgroup_id.to_ne_bytes());
        self.gangs_changed();
    }

    fn set_ranks(&mut self, ranks: &[u32]) {
        self.skel
            .maps
            .bss_data
            .as_mut()
            .unwrap()
            .gang_ranks
            .copy_from_slice(ranks);
    }

    fn write_table(&mut self, table: &SlotTable, masks: &[u32], nr_slots: u32) -> (u32, u64) {
        let rows = table.to_bpf();
        let mut cpus = vec![CpuList::new(); MAX_GANGS];
        for slot in table.placements() {
            for (gang, list) in slot {
                for cpu in list.iter() {
                    cpus[gang as usize].insert(cpu);
                }
            }
        }
        let bss = self.skel.maps.bss_data.as_mut().unwrap();
        for (g, list) in cpus.iter().enumerate() {
            bss.gang_cpus[g] = list.to_words();
        }
        for (s, row) in rows.iter().enumerate() {
            bss.slot_table[s] = *row;
        }
        bss.gang_slot_mask.copy_from_slice(masks);
        bss.gangs_with_slot = masks
            .iter()
            .enumerate()
            .filter(|(_, m)| **m != 0)
            .fold(0u64, |w, (g, _)| w | 1 << g);
        bss.nr_slots = nr_slots;
        let at = (bss.cur_slot, bss.cur_gen);
        self.gangs_changed();
        at
    }

    fn write_knobs(&mut self, knobs: &NodeKnobs) {
        write_knobs(&mut self.skel, knobs);
    }

    fn set_timer_switching(&mut self, on: bool) {
        self.skel.maps.bss_data.as_mut().unwrap().slot_timer = on as u32;
    }

    fn switch_slot(
        &mut self,
        slot: u32,
        gen: u64,
        cause: u32,
        slot_len_ns: u64,
        at_ns: u64,
    ) -> Result<()> {
        let mut args = switch_args {
            slot,
            cause,
            generation: gen,
            slot_len_ns,
            at_ns,
        };
        run_syscall(&self.skel.progs.switch_slot, &mut args)
    }

    fn rehome_gang(&mut self, gang: GangId) -> Result<()> {
        let mut args = rehome_args { gang: gang as i32 };
        run_syscall(&self.skel.progs.rehome_gang, &mut args).context("rehome_gang")
    }

    fn release_parked(&mut self, gang: GangId) -> Result<()> {
        let mut args = rehome_args { gang: gang as i32 };
        run_syscall(&self.skel.progs.release_parked, &mut args).context("release_parked")
    }

    fn park_gangs(&mut self, mask: u64, gen: u64, until_ns: u64) -> Result<()> {
        let mut args = park_args {
            mask,
            generation: gen,
            until_ns,
        };
        run_syscall(&self.skel.progs.park_gangs, &mut args)
    }

    fn track_syscalls(&mut self, on: bool) -> Result<()> {
        if on == self.syscall_links.is_some() {
            return Ok(());
        }
        if !on {
            self.syscall_links = None;
            info!("system calls no longer tracked (no park in BPF to come)");
            return Ok(());
        }
        let enter = self
            .skel
            .progs
            .gang_sys_enter
            .attach()
            .context("attaching sys_enter")?;
        let exit = self
            .skel
            .progs
            .gang_sys_exit
            .attach()
            .context("attaching sys_exit")?;
        self.syscall_links = Some((enter, exit));
        info!("system calls tracked, for the park in BPF");
        Ok(())
    }

    fn running_probe(&self) -> Result<RunningProbe> {
        let map = MapHandle::try_from(&self.skel.maps.cpu_ctxs)?;
        let nr_cpus = self.nr_cpus;
        Ok(Box::new(move |mask| {
            for cpu in 0..nr_cpus {
                let value = map
                    .lookup(&cpu.to_ne_bytes(), MapFlags::ANY)
                    .map_err(|e| io::Error::other(format!("cpu_ctxs[{cpu}]: {e}")))?;
                // struct cpu_ctx opens with `s32 running`: a gang id, or < 0.
                let running = value
                    .as_deref()
                    .and_then(|v| v.get(..4))
                    .map_or(-1, |b| i32::from_ne_bytes(b.try_into().unwrap()));
                if (0..MAX_GANGS as i32).contains(&running) && mask & (1 << running) != 0 {
                    return Ok(true);
                }
            }
            Ok(false)
        }))
    }

    fn current(&self) -> (u32, u64) {
        let bss = self.skel.maps.bss_data.as_ref().unwrap();
        (bss.cur_slot, bss.cur_gen)
    }

    fn timed_fired(&self) -> (u64, u64) {
        let bss = self.skel.maps.bss_data.as_ref().unwrap();
        (bss.timed_fired_gen, bss.timed_fired_ns)
    }

    fn done_gen(&self, gang: GangId) -> u64 {
        self.skel.maps.bss_data.as_ref().unwrap().gang_done_gen[gang as usize]
    }

    fn switches(&self) -> u64 {
        self.cpu_stats().counters[gang_stat_STAT_SWITCHES as usize]
    }

    fn slot_ends(&self, gang: GangId) -> gang_slot_ends {
        let e = &self.skel.maps.bss_data.as_ref().unwrap().gang_ends[gang as usize];
        // The skeleton's copy of bpf/intf.h's type.
        gang_slot_ends {
            voluntary: e.voluntary,
            forced: e.forced,
            yields: e.yields,
            early: e.early,
        }
    }

    fn trace_start(&mut self) -> Result<()> {
        let mut none = 0u64;
        run_syscall(&self.skel.progs.trace_start, &mut none)
    }

    fn trace_stop(&mut self) {
        self.skel.maps.bss_data.as_mut().unwrap().trace_on = 0;
    }

    fn take_events(&mut self) -> Vec<TraceEvent> {
        let _ = self.events.consume();
        std::mem::take(&mut *self.incoming.borrow_mut())
    }

    fn serve_stats(&mut self, nr_gangs: u64, nr_slots: u64) -> Result<()> {
        let reply = self.stats_server.channels().0;
        while self.stats_forward.requests.try_recv().is_ok() {
            reply.send(self.metrics(nr_gangs, nr_slots))?;
        }
        Ok(())
    }
}

fn write_knobs(skel: &mut BpfSkel<'_>, k: &NodeKnobs) {
    // The pages get it at the next switch.
    let lead_ns = u64::from(k.yield_lead_us) * 1000;
    let bss = skel.maps.bss_data.as_mut().unwrap();
    bss.yield_lead_ns = lead_ns;
    bss.slot_ns = k.slot_ms as u64 * 1_000_000;
    bss.fill = k.fill as u32;
    bss.min_other_share_pct = k.min_other_share_pct;
    bss.housekeeping = k.housekeeping.to_words();
}

/// Before attach: knobs, and the timer switching on (standalone).
fn init_bss(skel: &mut BpfSkel<'_>, k: &NodeKnobs) {
    write_knobs(skel, k);
    skel.maps.bss_data.as_mut().unwrap().slot_timer = 1;
}

/// A slot clock page per gang id: an mmapable one-entry array each, put
/// in the scheduler's `gang_clocks` (which it writes at every switch);
/// their fds go to the gangs' ranks (clock.rs), each only its own.
fn clock_pages(outer: &dyn MapCore) -> Result<Vec<OwnedFd>> {
    let opts = libbpf_rs::libbpf_sys::bpf_map_create_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
        map_flags: libbpf_rs::libbpf_sys::BPF_F_MMAPABLE,
        ..Default::default()
    };
    let value_size = std::mem::size_of::<gang_slot_clock>() as u32;
    (0..MAX_GANGS as u32)
        .map(|gang| {
            let page =
                MapHandle::create(MapType::Array, Some("gang_clock"), 4, value_size, 1, &opts)
                    .with_context(|| format!("creating gang {gang}'s clock page"))?;
            outer
                .update(
                    &gang.to_ne_bytes(),
                    &page.as_fd().as_raw_fd().to_ne_bytes(),
                    MapFlags::ANY,
                )
                .with_context(|| format!("installing gang {gang}'s clock page"))?;
            Ok(page.as_fd().try_clone_to_owned()?)
        })
        .collect()
}

/// A thread that sleeps on the scheduler's notices ring buffer and wakes
/// the main loop with each, so a yield reaches the coordinator at once
/// (the main loop itself only polls every IDLE_PERIOD). It sleeps with no
/// timeout until a notice comes or `stop`'s write end is closed: a wake-up
/// ten times a second only to look at a flag preempted a lone job's rank
/// (issue 15).
fn watch_notices(
    map: MapHandle,
    inbox: Sender<Inbox>,
    stop: OwnedFd,
) -> Result<std::thread::JoinHandle<()>> {
    Ok(std::thread::Builder::new()
        .name("yield-notices".into())
        .spawn(move || {
            let mut builder = RingBufferBuilder::new();
            let added = builder.add(&map, move |data: &[u8]| {
                if let Some(n) = decode_notice(data) {
                    if n.kind == gang_notice_kind_NOTICE_ALL_YIELDED {
                        let _ = inbox.send(Inbox::AllYielded {
                            gang: n.gang,
                            gen: n.generation,
                        });
                    }
                }
                0
            });
            let built = match added {
                Ok(_) => builder.build(),
                Err(e) => Err(e),
            };
            let notices = match built {
                Ok(rb) => rb,
                Err(e) => {
                    warn!("yield notices: {e}: early switches are off");
                    return;
                }
            };
            loop {
                let mut fds = [
                    libc::pollfd {
                        fd: notices.epoll_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    },
                    libc::pollfd {
                        fd: stop.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    },
                ];
                // SAFETY: two valid pollfd entries, both fds open for the call.
                let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
                if n < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                    warn!(
                        "yield notices: poll: {}: early switches are off",
                        io::Error::last_os_error()
                    );
                    return;
                }
                if fds[1].revents != 0 {
                    return; // the write end is closed: the scheduler stops
                }
                if fds[0].revents != 0 {
                    let _ = notices.consume();
                }
            }
        })?)
}

/// Runs a SEC("syscall") program with `args` as its context.
fn run_syscall<T>(prog: &libbpf_rs::ProgramMut<'_>, args: &mut T) -> Result<()> {
    let input = ProgramInput {
        context_in: Some(unsafe {
            std::slice::from_raw_parts_mut((args as *mut T).cast::<u8>(), std::mem::size_of::<T>())
        }),
        ..Default::default()
    };
    let out = prog.test_run(input)?;
    if out.return_value != 0 {
        bail!("returned {}", out.return_value as i32);
    }
    Ok(())
}
