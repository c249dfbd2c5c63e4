//! The Scheduler: loads and attaches the BPF scheduler, keeps its gangs, slot
//! table and knobs in line with the gang root and the knob files, answers
//! the control socket and the stats server, and reports how it exited.
//!
//! Everything that writes BPF state happens on this one thread (the main
//! loop); the knob files and the control socket only hand it work.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use libbpf_rs::{
    MapCore, MapFlags, MapHandle, MapType, OpenObject, ProgramInput, RingBufferBuilder,
};
use log::{info, warn};
use scx_stats::prelude::*;
use scx_utils::{scx_ops_attach, scx_ops_load, scx_ops_open, uei_exited, uei_report, UserExitInfo};

use scx_gang::agent::freeze::FreezeHolds;
use scx_gang::bpf_intf::*;
use scx_gang::control::{Inbox, Pending, Placement, RawTrace, Request, Response};
use scx_gang::cpulist::CpuList;
use scx_gang::events::{decode_event, decode_notice};
use scx_gang::freezer;
use scx_gang::gangs::{self, GangRegistry};
use scx_gang::knobs::{NodeKnobs, NodeStatus, SharedKnobs};
use scx_gang::slots::{GangId, SlotTable, MAX_GANGS, MAX_SLOTS};
use gang_wire::trace::{TraceEvent, TraceMeta};

use crate::bpf_skel::*;
use crate::stats::Metrics;
use crate::Config;

/// How often the main loop wakes while idle (gang scan, stats) and while
/// tracing (ring buffer). Control requests and knob writes wake it at once. Every wake-up
/// preempts a gang task somewhere, so it stays rare when nothing is traced.
const IDLE_PERIOD: Duration = Duration::from_millis(50);
const TRACE_PERIOD: Duration = Duration::from_millis(10);
/// How often the gang root is scanned for new, emptied or removed gangs.
const SCAN_PERIOD: Duration = Duration::from_millis(100);
/// Longest trace a client may ask for, and most events one trace keeps
/// (~40 bytes each: a trace holds at most ~40 MB of the root daemon's
/// memory; one trace at a time).
const MAX_TRACE_SECONDS: f64 = 600.0;
const MAX_TRACE_EVENTS: usize = 1_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// One slot per gang, rotated by the BPF timer every slot_ms.
    Standalone,
    /// An explicit slot table; switches come by command.
    Coordinated,
    /// The explicit slot table, rotated by the BPF timer every slot_ms
    /// (the coordinator is away); the next command takes over again.
    Autonomous,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Standalone => "standalone",
            Mode::Coordinated => "coordinated",
            Mode::Autonomous => "autonomous",
        }
    }
}

struct TraceSession {
    deadline: Instant,
    meta: TraceMeta,
    events: Vec<TraceEvent>,
    reply: Sender<Response>,
}

pub struct Scheduler<'a> {
    skel: BpfSkel<'a>,
    struct_ops: Option<libbpf_rs::Link>,
    cfg: &'a Config,
    nr_cpus: u32,
    knobs: Arc<SharedKnobs>,
    applied: (u64, NodeKnobs),
    registry: GangRegistry,
    table: SlotTable,
    slot_masks: Vec<u32>,
    mode: Mode,
    /// The coordinator's column (Request::Column) by gang name, resolved
    /// again into `table` whenever gangs come and go.
    column: Option<Vec<Vec<Placement>>>,
    /// Slots the table has at least (a column's trailing slots may be empty
    /// here), so the coordinator's slot numbers stay valid.
    min_slots: usize,
    /// Gang directories parked by the last freeze, thawed at the next switch.
    frozen: Vec<PathBuf>,
    /// Who holds which gang frozen (switch or suspended job), shared with
    /// the node agent: a thaw never thaws a suspended job.
    holds: FreezeHolds,
    control: &'a Receiver<Inbox>,
    stats_server: StatsServer<(), Metrics>,
    traces: Vec<TraceSession>,
    /// Length of the slot the last switch command started (its clock's
    /// deadline), ns; 0: unknown.
    commanded_len_ns: u64,
    /// Processes of each gang here, by gang id (gang_ranks in BPF).
    ranks: Vec<u32>,
}

impl<'a> Scheduler<'a> {
    pub fn init(
        cfg: &'a Config,
        knobs: Arc<SharedKnobs>,
        control: &'a Receiver<Inbox>,
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

        let mut skel = scx_ops_load!(skel, gang_ops, uei)?;
        cfg.clock.set_pages(Some(
            clock_pages(&skel.maps.gang_clocks).context("making the slot clock pages")?,
        ));
        let knob_values = knobs.snapshot();
        init_bss(&mut skel, &knob_values);
        let struct_ops = Some(scx_ops_attach!(skel, gang_ops)?);
        let stats_server = StatsServer::new(crate::stats::server_data()).launch()?;
        info!(
            "scx_gang attached: {nr_cpus} CPUs, gang root {}",
            cfg.gang_root.display()
        );

        let table = SlotTable::new(nr_cpus, knob_values.housekeeping.clone());
        let mut sched = Self {
            skel,
            struct_ops,
            cfg,
            nr_cpus,
            applied: (knobs.generation(), knob_values),
            knobs,
            registry: GangRegistry::new(),
            table,
            slot_masks: vec![0; MAX_GANGS],
            mode: Mode::Standalone,
            column: None,
            min_slots: 0,
            frozen: Vec::new(),
            holds: cfg.holds.clone(),
            control,
            stats_server,
            traces: Vec::new(),
            commanded_len_ns: 0,
            ranks: vec![0; MAX_GANGS],
        };
        // A daemon killed between a freeze and its switch left gangs parked
        // (suspended jobs stay frozen).
        for dir in gangs::scan(&cfg.gang_root)?
            .iter()
            .map(|d| gangs::gang_path(&cfg.gang_root, &d.name))
        {
            let _ = sched.holds.unpark(&dir);
        }
        sched.scan_gangs()?;
        sched.publish_status();
        Ok(sched)
    }

    pub fn run(&mut self, shutdown: Arc<AtomicBool>) -> Result<UserExitInfo> {
        let incoming: Rc<RefCell<Vec<TraceEvent>>> = Rc::default();
        let sink = incoming.clone();
        let mut rb_builder = RingBufferBuilder::new();
        rb_builder.add(&self.skel.maps.events, move |data: &[u8]| {
            if let Some(e) = decode_event(data) {
                sink.borrow_mut().push(e);
            }
            0
        })?;
        let events = rb_builder.build()?;
        let notices_done = Arc::new(AtomicBool::new(false));
        let notices = watch_notices(
            MapHandle::try_from(&self.skel.maps.notices)?,
            self.cfg.inbox.clone(),
            notices_done.clone(),
        )?;
        let (stats_reply, stats_requests) = self.stats_server.channels();
        let mut last_scan = Instant::now();

        while !shutdown.load(Ordering::Relaxed) && !uei_exited!(&self.skel, uei) {
            let _ = events.consume();
            self.collect_trace(&mut incoming.borrow_mut());
            let period = if self.traces.is_empty() {
                IDLE_PERIOD
            } else {
                TRACE_PERIOD
            };
            // Knob writes only wake the loop; the generation check below
            // applies them.
            if let Ok(inbox) = self.control.recv_timeout(period) {
                self.take(inbox);
            }
            while let Ok(inbox) = self.control.try_recv() {
                self.take(inbox);
            }
            while stats_requests.try_recv().is_ok() {
                stats_reply.send(self.metrics())?;
            }
            if self.knobs.generation() != self.applied.0 {
                self.apply_knobs()?;
            }
            if last_scan.elapsed() >= SCAN_PERIOD {
                last_scan = Instant::now();
                if let Err(e) = self.scan_gangs() {
                    warn!("scanning {}: {e:#}", self.cfg.gang_root.display());
                }
                self.publish_status();
            }
        }

        for t in self.traces.drain(..) {
            let _ = t
                .reply
                .send(Response::error("scheduler stopped during the trace"));
        }
        notices_done.store(true, Ordering::Relaxed);
        let _ = notices.join();
        let _ = self.struct_ops.take();
        self.cfg.clock.set_pages(None);
        uei_report!(&self.skel, uei)
    }

    fn take(&mut self, inbox: Inbox) {
        match inbox {
            Inbox::Request(pending) => self.handle(pending),
            // The generation check of the main loop applies them.
            Inbox::KnobsChanged => {}
            Inbox::AllYielded { gang, gen } => {
                if let (Some(name), Some(sink)) = (
                    self.registry.name_of(gang as GangId),
                    &self.cfg.on_all_yielded,
                ) {
                    sink(name, gen);
                }
            }
        }
    }

    /// Registers new gangs, retires gone ones, and rebuilds the table.
    fn scan_gangs(&mut self) -> Result<()> {
        let dirs = gangs::scan(&self.cfg.gang_root)?;
        let changes = self.registry.update(&dirs);
        for name in &changes.refused {
            warn!("gang {name}: all {MAX_GANGS} gang ids are taken; its tasks run as tasks of no gang");
        }
        self.count_ranks();
        if changes.is_empty() {
            return Ok(());
        }
        self.cfg.clock.set_gangs(
            self.registry
                .by_id()
                .iter()
                .map(|g| (g.name.clone(), g.id as i32))
                .collect(),
        );
        for g in &changes.removed {
            info!("gang {} (id {}) left: its slot is given back", g.name, g.id);
            let _ = self
                .skel
                .maps
                .gang_cgroups
                .delete(&g.cgroup_id.to_ne_bytes());
            self.table.remove_gang(g.id);
        }
        for g in &changes.added {
            info!(
                "gang {} (id {}, cgroup {}) joined",
                g.name, g.id, g.cgroup_id
            );
            self.skel
                .maps
                .gang_cgroups
                .update(
                    &g.cgroup_id.to_ne_bytes(),
                    &(g.id as i32).to_ne_bytes(),
                    MapFlags::ANY,
                )
                .with_context(|| format!("registering gang {}", g.name))?;
        }
        match (self.mode, &self.column) {
            (Mode::Standalone, _) => self.table = self.standalone_table(),
            (_, Some(column)) => self.table = self.column_table(column, false)?.0,
            _ => {}
        }
        self.push_table()
    }

    /// How many ranks of each gang must yield for its slot to end early.
    fn count_ranks(&mut self) {
        let mut ranks = vec![0u32; MAX_GANGS];
        for g in self.registry.by_id() {
            ranks[g.id as usize] =
                gangs::count_processes(&gangs::gang_path(&self.cfg.gang_root, &g.name));
        }
        self.skel
            .maps
            .bss_data
            .as_mut()
            .unwrap()
            .gang_ranks
            .copy_from_slice(&ranks);
        self.ranks = ranks;
    }

    fn standalone_table(&self) -> SlotTable {
        let ids: Vec<GangId> = self.registry.by_id().iter().map(|g| g.id).collect();
        let (table, left_out) =
            SlotTable::standalone(self.nr_cpus, self.applied.1.housekeeping.clone(), &ids);
        for id in left_out {
            warn!(
                "gang {} gets no slot (all slots taken)",
                self.registry.name_of(id).unwrap_or("?")
            );
        }
        table
    }

    /// Writes the table into BPF and re-installs the slot in force so every
    /// CPU follows the new table at once.
    fn push_table(&mut self) -> Result<()> {
        let rows = self.table.to_bpf();
        let masks: Vec<u32> = (0..MAX_GANGS as GangId)
            .map(|g| self.table.slot_mask(g))
            .collect();
        let mut cpus = vec![CpuList::new(); MAX_GANGS];
        for slot in self.table.placements() {
            for (gang, list) in slot {
                for cpu in list.iter() {
                    cpus[gang as usize].insert(cpu);
                }
            }
        }
        let nr_slots = self.nr_slots() as u32;
        let bss = self.skel.maps.bss_data.as_mut().unwrap();
        for (g, list) in cpus.iter().enumerate() {
            bss.gang_cpus[g] = list.to_words();
        }
        for (s, row) in rows.iter().enumerate() {
            bss.slot_table[s] = *row;
        }
        bss.gang_slot_mask.copy_from_slice(&masks);
        bss.nr_slots = nr_slots;
        let (cur, gen) = (bss.cur_slot, bss.cur_gen);

        // Tasks of a gang that lost its last slot must not wait for one.
        let lost: Vec<usize> = (0..MAX_GANGS)
            .filter(|&g| self.slot_masks[g] != 0 && masks[g] == 0)
            .collect();
        self.slot_masks = masks;
        for g in lost {
            self.rehome_gang(g as i32)?;
        }

        self.warn_if_slots_shortened();
        let n = self.nr_slots() as u32;
        if n > 0 {
            self.switch_slot(
                if cur < n { cur } else { 0 },
                gen + 1,
                gang_switch_cause_SWITCH_COMMAND,
            )?;
        }
        Ok(())
    }

    fn apply_knobs(&mut self) -> Result<()> {
        let generation = self.knobs.generation();
        let new = self.knobs.snapshot();
        write_knobs(&mut self.skel, &new);
        let housekeeping_changed = new.housekeeping != self.applied.1.housekeeping;
        self.applied = (generation, new);
        self.warn_if_slots_shortened();
        if housekeeping_changed {
            self.table = match (self.mode, &self.column) {
                (Mode::Standalone, _) => self.standalone_table(),
                // The coordinator's table must not use housekeeping CPUs
                // either: a column keeps what still fits.
                (_, Some(column)) => self.column_table(column, false)?.0,
                _ => SlotTable::new(self.nr_cpus, self.applied.1.housekeeping.clone()),
            };
            self.push_table()?;
        }
        self.publish_status();
        Ok(())
    }

    /// The BPF timer shortens slots so one rotation stays within
    /// GANG_ROTATION_MAX_MS; say so when that changes what the operator set.
    fn warn_if_slots_shortened(&self) {
        let (n, slot_ms) = (self.nr_slots() as u32, self.applied.1.slot_ms);
        if self.mode != Mode::Coordinated && n > 1 && slot_ms * n > gang_limits_GANG_ROTATION_MAX_MS
        {
            warn!(
                "{n} slots of {slot_ms} ms exceed the {gang_limits_GANG_ROTATION_MAX_MS} ms rotation limit: \
                 slots run {} ms",
                gang_limits_GANG_ROTATION_MAX_MS / n
            );
        }
    }

    fn handle(&mut self, pending: Pending) {
        let response = match pending.request {
            Request::Trace { seconds } => return self.start_trace(seconds, pending.reply),
            Request::Freeze {
                gen,
                drain_timeout_ms,
            } => return self.freeze(gen, drain_timeout_ms, pending.reply),
            Request::Schedule { slots } => {
                // A gang created a moment ago must be known.
                self.rescan();
                self.schedule(&slots)
            }
            Request::Column { slots } => {
                self.rescan();
                self.install_column(slots)
            }
            Request::Switch { slot, gen, slot_ms } => {
                self.commanded_len_ns = u64::from(slot_ms) * 1_000_000;
                self.command_switch(slot, gen)
            }
            Request::Rotate => self.rotate(),
            Request::Standalone => {
                self.thaw();
                self.set_mode(Mode::Standalone);
                self.column = None;
                self.min_slots = 0;
                self.table = self.standalone_table();
                self.push_table()
            }
        };
        // Whoever reads the status files after an answer sees what the
        // request did (the loop refreshes them only every SCAN_PERIOD).
        self.publish_status();
        let _ = pending.reply.send(match response {
            Ok(()) => Response::ok(),
            Err(e) => Response::error(format!("{e:#}")),
        });
    }

    /// The placement API: an explicit slot table by gang name. All or
    /// nothing: a refused schedule leaves the old one in force.
    fn schedule(&mut self, slots: &[Vec<Placement>]) -> Result<()> {
        let mut table = SlotTable::new(self.nr_cpus, self.applied.1.housekeeping.clone());
        for (s, placements) in slots.iter().enumerate() {
            for p in placements {
                let gang = self.registry.get(&p.gang).with_context(|| {
                    format!("gang {:?} is not known (no populated cgroup of that name below the gang root)", p.gang)
                })?;
                let cpus = CpuList::parse(&p.cpus, self.nr_cpus).map_err(anyhow::Error::msg)?;
                table
                    .place(gang.id, s, &cpus)
                    .with_context(|| format!("placing gang {}", p.gang))?;
            }
        }
        self.set_mode(Mode::Coordinated);
        self.column = None;
        self.min_slots = 0;
        self.table = table;
        self.push_table()?;
        self.thaw();
        Ok(())
    }

    fn rescan(&mut self) {
        if let Err(e) = self.scan_gangs() {
            warn!("scanning {}: {e:#}", self.cfg.gang_root.display());
        }
    }

    /// Slots of the table in force (a column's empty trailing slots count).
    fn nr_slots(&self) -> usize {
        self.table.nr_slots().max(self.min_slots)
    }

    fn column_table(
        &self,
        slots: &[Vec<Placement>],
        check: bool,
    ) -> Result<(SlotTable, BTreeSet<String>)> {
        let table = SlotTable::new(self.nr_cpus, self.applied.1.housekeeping.clone());
        column_table(&self.registry, table, slots, check)
    }

    /// The coordinator's column (see Request::Column). All or nothing.
    fn install_column(&mut self, slots: Vec<Vec<Placement>>) -> Result<()> {
        if slots.len() > MAX_SLOTS {
            bail!("{} slots: at most {MAX_SLOTS} are supported", slots.len());
        }
        let (table, absent) = self.column_table(&slots, true)?;
        if !absent.is_empty() {
            info!(
                "schedule: {} have no tasks here (yet): their CPUs stay free until they do",
                absent.into_iter().collect::<Vec<_>>().join(", ")
            );
        }
        self.set_mode(Mode::Coordinated);
        self.table = table;
        self.min_slots = slots.len();
        self.column = Some(slots);
        self.push_table()?;
        self.thaw();
        Ok(())
    }

    /// The node rotates its explicit schedule on its own (Request::Rotate).
    fn rotate(&mut self) -> Result<()> {
        if self.mode == Mode::Standalone {
            bail!("no explicit schedule to rotate (node is standalone)");
        }
        self.thaw();
        if self.mode != Mode::Autonomous {
            self.set_mode(Mode::Autonomous);
            info!(
                "rotating the schedule on this node's timer: {} slots of {} ms",
                self.nr_slots(),
                self.applied.1.slot_ms
            );
            self.warn_if_slots_shortened();
        }
        Ok(())
    }

    /// A command after an autonomous rotation: commands take over again,
    /// from the slot in force.
    fn take_command(&mut self) {
        if self.mode == Mode::Autonomous {
            self.set_mode(Mode::Coordinated);
            info!("switch commands resume");
        }
    }

    fn command_switch(&mut self, slot: u32, gen: u64) -> Result<()> {
        if self.mode == Mode::Standalone {
            bail!("switch commands need an explicit schedule first (node is standalone)");
        }
        if slot as usize >= self.nr_slots() {
            bail!(
                "slot {slot} does not exist (the schedule has {} slots)",
                self.nr_slots()
            );
        }
        self.take_command();
        self.switch_slot(slot, gen, gang_switch_cause_SWITCH_COMMAND)?;
        self.thaw();
        Ok(())
    }

    /// Freezes the gangs of the slot in force; a thread of its own waits
    /// for them to park and drain (the main loop goes on) and answers.
    fn freeze(&mut self, gen: u64, drain_timeout_ms: u64, reply: Sender<Response>) {
        if self.mode == Mode::Standalone {
            let _ = reply.send(Response::error(
                "freeze needs an explicit schedule first (node is standalone)",
            ));
            return;
        }
        self.take_command();
        let bss = self.skel.maps.bss_data.as_ref().unwrap();
        let (slot, cur_gen) = (bss.cur_slot as usize, bss.cur_gen);
        let done_gen = bss.gang_done_gen;
        let gangs: Vec<(GangId, freezer::ParkGang)> = self
            .table
            .placements()
            .get(slot)
            .into_iter()
            .flat_map(|p| p.keys())
            .filter_map(|&id| Some((id, self.registry.name_of(id)?)))
            .map(|(id, name)| {
                let gang = freezer::ParkGang {
                    name: name.to_string(),
                    dir: gangs::gang_path(&self.cfg.gang_root, name),
                    // Every rank yielded: BPF parks them until the gang's
                    // next slot, the freezer has nothing to add.
                    yielded: cur_gen != 0 && done_gen[id as usize] == cur_gen,
                };
                (id, gang)
            })
            // A job that ended a moment ago (its cgroup removed) has
            // nothing to park.
            .filter(|(_, g)| g.dir.exists())
            .collect();
        for (id, g) in gangs.iter().filter(|(_, g)| !g.yielded) {
            // Ranks that yielded must run to reach the freezer.
            if let Err(e) = self.release_parked(*id as i32) {
                warn!("gang {}: releasing its yielded tasks: {e:#}", g.name);
            }
            self.holds.park(&g.dir);
            self.frozen.push(g.dir.clone());
        }
        let gangs: Vec<freezer::ParkGang> = gangs.into_iter().map(|(_, g)| g).collect();
        let timeout = Duration::from_millis(drain_timeout_ms);
        std::thread::spawn(move || {
            let response = match freezer::park_and_drain(gen, &gangs, timeout) {
                Ok(report) => Response {
                    ok: true,
                    frozen: Some(report),
                    ..Default::default()
                },
                Err(e) => Response::error(format!("freeze: {e}")),
            };
            let _ = reply.send(response);
        });
    }

    /// Thaws the gangs of the last freeze (BPF keeps them off CPUs they do
    /// not own in the slot now in force), except suspended jobs.
    fn thaw(&mut self) {
        for dir in self.frozen.drain(..) {
            match self.holds.unpark(&dir) {
                Ok(_) => {}
                // Its job ended and the agent removed the cgroup.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => warn!("thawing {}: {e}", dir.display()),
            }
        }
    }

    fn set_mode(&mut self, mode: Mode) {
        self.mode = mode;
        self.skel.maps.bss_data.as_mut().unwrap().timer_rotation =
            (mode != Mode::Coordinated) as u32;
    }

    fn switch_slot(&mut self, slot: u32, gen: u64, cause: u32) -> Result<()> {
        // Under commands the slot lasts what the coordinator said; under the
        // timer, slot_ms (the timer's own switches date their slots).
        let slot_len_ns = match self.mode {
            Mode::Coordinated => self.commanded_len_ns,
            _ => u64::from(self.applied.1.slot_ms) * 1_000_000,
        };
        let mut args = switch_args {
            slot,
            cause,
            generation: gen,
            slot_len_ns,
        };
        run_syscall(&self.skel.progs.switch_slot, &mut args).context("switch_slot")
    }

    fn rehome_gang(&mut self, gang: i32) -> Result<()> {
        let mut args = rehome_args { gang };
        run_syscall(&self.skel.progs.rehome_gang, &mut args).context("rehome_gang")
    }

    fn release_parked(&mut self, gang: i32) -> Result<()> {
        let mut args = rehome_args { gang };
        run_syscall(&self.skel.progs.release_parked, &mut args).context("release_parked")
    }

    fn start_trace(&mut self, seconds: f64, reply: Sender<Response>) {
        if !self.traces.is_empty() {
            let _ = reply.send(Response::error(
                "a trace is already being recorded on this node; try again when it ends",
            ));
            return;
        }
        if !(seconds > 0.0 && seconds <= MAX_TRACE_SECONDS) {
            let _ = reply.send(Response::error(format!(
                "seconds must be in (0, {MAX_TRACE_SECONDS}]"
            )));
            return;
        }
        let meta = TraceMeta {
            nr_cpus: self.nr_cpus,
            gang_names: self
                .registry
                .by_id()
                .iter()
                .map(|g| (g.id as i32, g.name.clone()))
                .collect(),
            start_ns: monotonic_ns(),
            end_ns: 0,
            node: nix::unistd::gethostname()
                .map(|h| h.to_string_lossy().into_owned())
                .unwrap_or_default(),
        };
        self.traces.push(TraceSession {
            deadline: Instant::now() + Duration::from_secs_f64(seconds),
            meta,
            events: Vec::new(),
            reply,
        });
        // Each session opens with the state of every CPU (harmless for others).
        let mut none = 0u64;
        if let Err(e) = run_syscall(&self.skel.progs.trace_start, &mut none) {
            warn!("trace_start: {e:#}");
        }
    }

    fn collect_trace(&mut self, incoming: &mut Vec<TraceEvent>) {
        if self.traces.is_empty() {
            incoming.clear();
            return;
        }
        for t in &mut self.traces {
            let room = MAX_TRACE_EVENTS.saturating_sub(t.events.len());
            t.events.extend(
                incoming
                    .iter()
                    .filter(|e| e.ts_ns >= t.meta.start_ns)
                    .take(room)
                    .cloned(),
            );
        }
        incoming.clear();
        let now = Instant::now();
        let (done, open): (Vec<_>, Vec<_>) = self.traces.drain(..).partition(|t| now >= t.deadline);
        self.traces = open;
        if !done.is_empty() {
            self.publish_status();
        }
        for mut t in done {
            t.meta.end_ns = monotonic_ns();
            // Names of gangs that joined during the trace.
            for g in self.registry.by_id() {
                t.meta
                    .gang_names
                    .entry(g.id as i32)
                    .or_insert_with(|| g.name.clone());
            }
            let trace = RawTrace {
                meta: t.meta,
                events: t.events,
            };
            let _ = t.reply.send(Response {
                ok: true,
                trace: Some(trace),
                ..Default::default()
            });
        }
        if self.traces.is_empty() {
            self.skel.maps.bss_data.as_mut().unwrap().trace_on = 0;
        }
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

    fn metrics(&self) -> Metrics {
        let s = self.cpu_stats();
        let c = |i: gang_stat| s.counters[i as usize];
        let bss = self.skel.maps.bss_data.as_ref().unwrap();
        let gang_ns: u64 = s.gang_run_ns.iter().sum();
        let total = (gang_ns + s.other_run_ns).max(1) as f64;
        Metrics {
            nr_gangs: self.registry.len() as u64,
            nr_slots: self.nr_slots() as u64,
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
            events_lost: c(gang_stat_STAT_EVENTS_LOST),
            gang_ns,
            other_ns: s.other_run_ns,
            gang_pct: gang_ns as f64 * 100.0 / total,
            other_pct: s.other_run_ns as f64 * 100.0 / total,
        }
    }

    fn publish_status(&self) {
        let m = self.metrics();
        let bss = self.skel.maps.bss_data.as_ref().unwrap();
        let gangs = self
            .registry
            .by_id()
            .iter()
            .map(|g| {
                let ends = &bss.gang_ends[g.id as usize];
                format!(
                    "{} {} slots={:#x} ranks={} yields={} voluntary={} forced={} early={}",
                    g.id,
                    g.name,
                    self.table.slot_mask(g.id),
                    self.ranks[g.id as usize],
                    ends.yields,
                    ends.voluntary,
                    ends.forced,
                    ends.early
                )
            })
            .collect::<Vec<_>>()
            .join("\n");
        self.knobs.set_status(NodeStatus {
            mode: self.mode.name().into(),
            current_slot: m.current_slot as u32,
            switches: m.switches,
            nr_gangs: m.nr_gangs as u32,
            nr_slots: m.nr_slots as u32,
            gangs,
        });
    }
}

impl Drop for Scheduler<'_> {
    fn drop(&mut self) {
        self.thaw();
        info!("detaching scx_gang; the node goes back to the default scheduler");
    }
}

/// The table of a coordinator's column, built into the empty `table`: every
/// gang of the registry gets its CPUs; the others are left out and
/// returned. With `check`, every placement must be valid, the left-out
/// gangs' included (the column must be a valid table as a whole); without,
/// an invalid one is logged and left out.
fn column_table(
    registry: &GangRegistry,
    mut table: SlotTable,
    slots: &[Vec<Placement>],
    check: bool,
) -> Result<(SlotTable, BTreeSet<String>)> {
    let nr_cpus = table.nr_cpus();
    let mut whole = table.clone();
    let mut ids: BTreeMap<&str, GangId> = BTreeMap::new();
    let mut absent = BTreeSet::new();
    for (s, placements) in slots.iter().enumerate() {
        for p in placements {
            let mut place = || -> Result<()> {
                let cpus = CpuList::parse(&p.cpus, nr_cpus).map_err(anyhow::Error::msg)?;
                if check {
                    let next = ids.len() as GangId;
                    let id = *ids.entry(p.gang.as_str()).or_insert(next);
                    whole.place(id, s, &cpus)?;
                }
                match registry.get(&p.gang) {
                    Some(g) => table.place(g.id, s, &cpus)?,
                    None => {
                        absent.insert(p.gang.clone());
                    }
                }
                Ok(())
            };
            if let Err(e) = place() {
                let e = e.context(format!("placing gang {} in slot {s}", p.gang));
                if check {
                    return Err(e);
                }
                warn!("{e:#}: left out");
            }
        }
    }
    Ok((table, absent))
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

/// Before attach: knobs, and the standalone rotation on.
fn init_bss(skel: &mut BpfSkel<'_>, k: &NodeKnobs) {
    write_knobs(skel, k);
    skel.maps.bss_data.as_mut().unwrap().timer_rotation = 1;
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
/// (the main loop itself only polls every IDLE_PERIOD).
fn watch_notices(
    map: MapHandle,
    inbox: Sender<Inbox>,
    done: Arc<AtomicBool>,
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
            while !done.load(Ordering::Relaxed) {
                let _ = notices.poll(Duration::from_millis(100));
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

pub fn monotonic_ns() -> u64 {
    let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).unwrap();
    ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use scx_gang::gangs::GangDir;

    fn registry(names: &[&str]) -> GangRegistry {
        let mut r = GangRegistry::new();
        let dirs: Vec<GangDir> = names
            .iter()
            .enumerate()
            .map(|(i, n)| GangDir {
                name: n.to_string(),
                cgroup_id: 100 + i as u64,
                populated: true,
            })
            .collect();
        r.update(&dirs);
        r
    }

    fn column(slots: &[&[(&str, &str)]]) -> Vec<Vec<Placement>> {
        slots
            .iter()
            .map(|s| {
                s.iter()
                    .map(|(g, c)| Placement {
                        gang: g.to_string(),
                        cpus: c.to_string(),
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn a_column_leaves_out_gangs_not_here_and_keeps_the_rest() {
        let r = registry(&["job1", "job2"]);
        let slots = column(&[&[("job1", "0-1"), ("job9", "2-3")], &[("job2", "0-3")], &[]]);
        let (t, absent) =
            column_table(&r, SlotTable::new(4, CpuList::new()), &slots, true).unwrap();
        assert_eq!(absent.into_iter().collect::<Vec<_>>(), vec!["job9"]);
        let (j1, j2) = (r.get("job1").unwrap().id, r.get("job2").unwrap().id);
        assert_eq!(t.owner(0, 1), Some(j1));
        assert_eq!(t.owner(0, 2), None, "job9's CPUs stay free");
        assert_eq!(t.owner(1, 3), Some(j2));
        assert_eq!(
            t.nr_slots(),
            2,
            "trailing empty slots are the caller's (min_slots)"
        );
    }

    #[test]
    fn a_column_must_be_valid_as_a_whole() {
        let r = registry(&["job1"]);
        let t = || SlotTable::new(4, CpuList::parse("0", 4).unwrap());
        // Two gangs absent here on the same CPU: still refused.
        let clash = column(&[&[("job8", "1-2"), ("job9", "2-3")]]);
        let e = column_table(&r, t(), &clash, true).unwrap_err();
        assert!(
            format!("{e:#}").contains("placing gang job9 in slot 0"),
            "{e:#}"
        );
        let housekeeping = column(&[&[("job1", "0-1")]]);
        assert!(column_table(&r, t(), &housekeeping, true).is_err());
        assert!(column_table(&r, t(), &column(&[&[("job1", "7")]]), true).is_err());
        // Resolved again later (a knob changed): what no longer fits is left out.
        let (t2, _) = column_table(&r, t(), &housekeeping, false).unwrap();
        assert_eq!(t2.nr_slots(), 0);
    }
}
