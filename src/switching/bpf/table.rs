//! The BPF mode's tables: the gangs registered here (a scan of the gang
//! root), the table in force (standalone, an explicit schedule, or a
//! coordinator's column resolved by gang name) and its writing into BPF,
//! the slot in force re-installed so every CPU follows it at once.
//!
//! A column is checked as a whole (every placement valid, no CPU given
//! twice in a slot), the gangs not (yet) here included, so a node refuses
//! what every node would refuse; then only the gangs of the registry get
//! their CPUs. Resolved again later (gangs came, a knob changed), what no
//! longer fits is logged and left out instead.
//!
//! Known fault: a gang with several placements in one slot gets their
//! union; nothing says it was meant.

use std::collections::BTreeSet;

use anyhow::{bail, Context, Result};
use gang_wire::time::monotonic_ns;
use log::{info, warn};

use crate::bpf_intf::*;
use crate::control::GangCpus;
use crate::cpulist::CpuList;
use crate::gangs::{self, GangRegistry};
use crate::knobs::NodeKnobs;
use crate::slots::{GangId, SlotTable, MAX_GANGS};

use super::{BpfScheduler, BpfSwitcher, Mode};
use crate::switching::check_column;

/// The table of a coordinator's column, built into the empty `table`: every
/// gang of the registry gets its CPUs; the others are left out and
/// returned. With `check`, the column must be valid as a whole, the
/// left-out gangs' placements included (`check_column`); without, an
/// invalid placement is logged and left out.
pub fn column_table(
    registry: &GangRegistry,
    mut table: SlotTable,
    slots: &[Vec<GangCpus>],
    check: bool,
) -> Result<(SlotTable, BTreeSet<String>)> {
    if check {
        check_column(table.clone(), slots)?;
    }
    let nr_cpus = table.nr_cpus();
    let mut absent = BTreeSet::new();
    for (s, placements) in slots.iter().enumerate() {
        for p in placements {
            let mut place = || -> Result<()> {
                let cpus = CpuList::parse(&p.cpus, nr_cpus).map_err(anyhow::Error::msg)?;
                match registry.get(&p.gang) {
                    Some(g) => table.place(g.id, s, &cpus)?,
                    None => {
                        absent.insert(p.gang.clone());
                    }
                }
                Ok(())
            };
            if let Err(e) = place() {
                warn!(
                    "{:#}: left out",
                    e.context(format!("placing gang {} in slot {s}", p.gang))
                );
            }
        }
    }
    Ok((table, absent))
}

/// Building the table in force and writing it into BPF.
impl<K: BpfScheduler> BpfSwitcher<K> {
    /// Registers new gangs, retires gone ones, and rebuilds the table.
    pub(super) fn scan_gangs(&mut self) -> Result<()> {
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
            self.bpf.remove_gang(g.cgroup_id);
            self.table.remove_gang(g.id);
        }
        for g in &changes.added {
            info!(
                "gang {} (id {}, cgroup {}) joined",
                g.name, g.id, g.cgroup_id
            );
            self.bpf
                .add_gang(g.cgroup_id, g.id)
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
    pub(super) fn count_ranks(&mut self) {
        let mut ranks = vec![0u32; MAX_GANGS];
        for g in self.registry.by_id() {
            ranks[g.id as usize] =
                gangs::count_processes(&gangs::gang_path(&self.cfg.gang_root, &g.name));
        }
        self.bpf.set_ranks(&ranks);
        self.ranks = ranks;
    }

    pub(super) fn standalone_table(&self) -> SlotTable {
        let ids: Vec<GangId> = self.registry.by_id().iter().map(|g| g.id).collect();
        let (table, left_out) =
            SlotTable::standalone(self.nr_cpus, self.applied.housekeeping.clone(), &ids);
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
    pub(super) fn push_table(&mut self) -> Result<()> {
        self.push_table_then(None)
    }

    /// Writes the table into BPF, then switches: to `then` (slot,
    /// generation: a plan's boundary, timed switching), or else re-installs
    /// the slot in force, so every CPU follows the new table at once.
    ///
    /// Except while a timed switch is armed for a later instant into a slot
    /// the new table has (under commands: a mode change replaces it): BPF holds one switch at a time, and a switch at
    /// once would replace it, so the node missed its boundary and every
    /// boundary until the follower gave it up (ARM_LOST, a second; in the
    /// cluster benchmark a gang joining at a run's start cost 20 switches
    /// of 50 ms that way). The table is in force for every new decision as
    /// written; the armed switch kicks every CPU into it at its instant,
    /// half a slot away at most.
    pub(super) fn push_table_then(&mut self, then: Option<(u32, u64)>) -> Result<()> {
        let masks: Vec<u32> = (0..MAX_GANGS as GangId)
            .map(|g| self.table.slot_mask(g))
            .collect();
        let nr_slots = self.nr_slots() as u32;
        let (cur, gen) = self.bpf.write_table(&self.table, &masks, nr_slots);
        self.update_syscall_tracking();

        // Tasks of a gang that lost its last slot must not wait for one.
        let lost: Vec<usize> = (0..MAX_GANGS)
            .filter(|&g| self.slot_masks[g] != 0 && masks[g] == 0)
            .collect();
        self.slot_masks = masks;
        for g in lost {
            self.bpf.rehome_gang(g as GangId)?;
        }

        self.warn_if_slots_shortened();
        let n = self.nr_slots() as u32;
        let keeps_armed = self.mode == Mode::Coordinated
            && self
                .armed
                .is_some_and(|a| a.slot < n && a.at_ns > monotonic_ns());
        match then {
            Some((slot, gen)) => self.switch_slot(slot, gen, gang_switch_cause_SWITCH_TIMED)?,
            None if keeps_armed => {}
            None if n > 0 => self.switch_slot(
                if cur < n { cur } else { 0 },
                gen + 1,
                gang_switch_cause_SWITCH_COMMAND,
            )?,
            None => {}
        }
        Ok(())
    }

    pub(super) fn apply_knobs(&mut self, new: &NodeKnobs) -> Result<()> {
        self.bpf.write_knobs(new);
        let housekeeping_changed = new.housekeeping != self.applied.housekeeping;
        self.applied = new.clone();
        self.update_syscall_tracking();
        self.warn_if_slots_shortened();
        if housekeeping_changed {
            self.table = match (self.mode, &self.column) {
                (Mode::Standalone, _) => self.standalone_table(),
                // The coordinator's table must not use housekeeping CPUs
                // either: a column keeps what still fits.
                (_, Some(column)) => self.column_table(column, false)?.0,
                _ => SlotTable::new(self.nr_cpus, self.applied.housekeeping.clone()),
            };
            self.push_table()?;
        }
        self.publish_status();
        Ok(())
    }

    /// The BPF timer shortens slots so one round of the table stays within
    /// GANG_ROTATION_MAX_MS; say so when that changes what the operator set.
    pub(super) fn warn_if_slots_shortened(&self) {
        let (n, slot_ms) = (self.nr_slots() as u32, self.applied.slot_ms);
        if self.mode != Mode::Coordinated && n > 1 && slot_ms * n > gang_limits_GANG_ROTATION_MAX_MS
        {
            warn!(
                "{n} slots of {slot_ms} ms exceed the {gang_limits_GANG_ROTATION_MAX_MS} ms rotation limit: \
                 slots run {} ms",
                gang_limits_GANG_ROTATION_MAX_MS / n
            );
        }
    }

    /// The placement API: an explicit slot table by gang name. All or
    /// nothing: a refused schedule leaves the old one in force.
    pub(super) fn schedule(&mut self, slots: &[Vec<GangCpus>]) -> Result<()> {
        let mut table = SlotTable::new(self.nr_cpus, self.applied.housekeeping.clone());
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

    /// Slots of the table in force (a column's empty trailing slots count).
    pub(super) fn nr_slots(&self) -> usize {
        self.table.nr_slots().max(self.min_slots)
    }

    pub(super) fn column_table(
        &self,
        slots: &[Vec<GangCpus>],
        check: bool,
    ) -> Result<(SlotTable, BTreeSet<String>)> {
        let table = SlotTable::new(self.nr_cpus, self.applied.housekeeping.clone());
        column_table(&self.registry, table, slots, check)
    }

    /// The coordinator's column (see Request::Column). All or nothing.
    pub(super) fn install_column(&mut self, slots: Vec<Vec<GangCpus>>) -> Result<()> {
        self.install_column_then(slots, None)
    }

    /// The column, then the switch `then` (slot, generation) instead of
    /// the slot in force again: a plan's first boundary, which brings its
    /// column (`Switcher::column_at_switch`). All or nothing: a column
    /// refused, or a slot it does not have, leaves the old table in force.
    pub(super) fn install_column_then(
        &mut self,
        slots: Vec<Vec<GangCpus>>,
        then: Option<(u32, u64)>,
    ) -> Result<()> {
        // Checks the slot count too (check_column).
        let (table, absent) = self.column_table(&slots, true)?;
        if let Some((slot, _)) = then {
            let n = table.nr_slots().max(slots.len());
            if slot as usize >= n {
                bail!("slot {slot} does not exist (the new schedule has {n} slots)");
            }
        }
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
        self.push_table_then(then)?;
        // A switch into `then` ends a park in BPF itself.
        if then.is_some() {
            self.thaw_frozen();
        } else {
            self.thaw();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gangs::GangDir;
    use crate::switching::bpf::tests::column;

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
