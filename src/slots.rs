//! The slot table: this node's columns of the Ousterhout matrix.
//!
//! Each slot gives each CPU to at most one gang. Gangs may share a slot on
//! disjoint CPU sets (space sharing within the node). The BPF scheduler reads
//! the table as `slot_table[slot][cpu]`; this module builds and checks it.

use std::collections::BTreeMap;
use std::fmt;

use crate::bpf_intf::{
    gang_limits_GANG_MAX_CPUS, gang_limits_GANG_MAX_GANGS, gang_limits_GANG_MAX_SLOTS,
};
use crate::cpulist::CpuList;

pub const MAX_SLOTS: usize = gang_limits_GANG_MAX_SLOTS as usize;
pub const MAX_CPUS: usize = gang_limits_GANG_MAX_CPUS as usize;
pub const MAX_GANGS: usize = gang_limits_GANG_MAX_GANGS as usize;

/// A gang's index in the BPF maps (0..MAX_GANGS).
pub type GangId = u32;

/// Why a placement was refused. Nothing changes when one is returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlacementError {
    NoSuchSlot {
        slot: usize,
    },
    NoSuchCpu {
        cpu: u32,
        nr_cpus: u32,
    },
    Housekeeping {
        cpu: u32,
    },
    Taken {
        slot: usize,
        cpu: u32,
        owner: GangId,
    },
    NoSuchGang {
        gang: GangId,
    },
    NoCpus,
}

impl fmt::Display for PlacementError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoSuchSlot { slot } => {
                write!(f, "slot {slot} does not exist (at most {MAX_SLOTS} slots)")
            }
            Self::NoSuchCpu { cpu, nr_cpus } => {
                write!(f, "CPU {cpu} does not exist (this node has {nr_cpus} CPUs)")
            }
            Self::Housekeeping { cpu } => write!(f, "CPU {cpu} is a housekeeping CPU"),
            Self::Taken { slot, cpu, owner } => {
                write!(
                    f,
                    "CPU {cpu} in slot {slot} already belongs to gang {owner}"
                )
            }
            Self::NoSuchGang { gang } => {
                write!(
                    f,
                    "gang id {gang} is out of range (at most {MAX_GANGS} gangs)"
                )
            }
            Self::NoCpus => write!(f, "a placement needs at least one CPU"),
        }
    }
}

impl std::error::Error for PlacementError {}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotTable {
    nr_cpus: u32,
    housekeeping: CpuList,
    /// slots[s][cpu]: the owner of `cpu` in slot `s`.
    slots: Vec<Vec<Option<GangId>>>,
}

impl SlotTable {
    /// An empty table for a node with `nr_cpus` CPUs, of which
    /// `housekeeping` are never given to a gang.
    pub fn new(nr_cpus: u32, housekeeping: CpuList) -> Self {
        Self {
            nr_cpus: nr_cpus.min(MAX_CPUS as u32),
            housekeeping,
            slots: Vec::new(),
        }
    }

    pub fn nr_cpus(&self) -> u32 {
        self.nr_cpus
    }

    pub fn nr_slots(&self) -> usize {
        self.slots.len()
    }

    /// The CPUs a gang may be given.
    pub fn gang_cpus(&self) -> CpuList {
        CpuList::first(self.nr_cpus).minus(&self.housekeeping)
    }

    pub fn owner(&self, slot: usize, cpu: u32) -> Option<GangId> {
        self.slots.get(slot)?.get(cpu as usize).copied().flatten()
    }

    /// Gives `cpus` to `gang` in `slot`, creating the slot (and any before
    /// it) if needed. All or nothing.
    pub fn place(
        &mut self,
        gang: GangId,
        slot: usize,
        cpus: &CpuList,
    ) -> Result<(), PlacementError> {
        if gang as usize >= MAX_GANGS {
            return Err(PlacementError::NoSuchGang { gang });
        }
        if slot >= MAX_SLOTS {
            return Err(PlacementError::NoSuchSlot { slot });
        }
        if cpus.is_empty() {
            return Err(PlacementError::NoCpus);
        }
        for cpu in cpus.iter() {
            if cpu >= self.nr_cpus {
                return Err(PlacementError::NoSuchCpu {
                    cpu,
                    nr_cpus: self.nr_cpus,
                });
            }
            if self.housekeeping.contains(cpu) {
                return Err(PlacementError::Housekeeping { cpu });
            }
            match self.owner(slot, cpu) {
                Some(owner) if owner != gang => {
                    return Err(PlacementError::Taken { slot, cpu, owner })
                }
                _ => {}
            }
        }
        while self.slots.len() <= slot {
            self.slots.push(vec![None; self.nr_cpus as usize]);
        }
        for cpu in cpus.iter() {
            self.slots[slot][cpu as usize] = Some(gang);
        }
        Ok(())
    }

    /// Takes every CPU of `gang` back, in every slot.
    pub fn remove_gang(&mut self, gang: GangId) {
        for cell in self.slots.iter_mut().flatten() {
            if *cell == Some(gang) {
                *cell = None;
            }
        }
    }

    /// Removes slots nobody owns anything in (slice reduction); the order of
    /// the remaining slots is kept.
    pub fn compact(&mut self) {
        self.slots.retain(|row| row.iter().any(Option::is_some));
    }

    /// Bit s set: `gang` owns CPUs in slot s.
    pub fn slot_mask(&self, gang: GangId) -> u32 {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, row)| row.contains(&Some(gang)))
            .fold(0, |mask, (s, _)| mask | 1 << s)
    }

    /// The gangs in the table with their CPUs, slot by slot.
    pub fn placements(&self) -> Vec<BTreeMap<GangId, CpuList>> {
        self.slots
            .iter()
            .map(|row| {
                let mut m: BTreeMap<GangId, CpuList> = BTreeMap::new();
                for (cpu, g) in row.iter().enumerate() {
                    if let Some(g) = g {
                        m.entry(*g).or_default().insert(cpu as u32);
                    }
                }
                m
            })
            .collect()
    }

    /// Standalone layout: each gang gets a slot of its own on every gang CPU,
    /// in the order given. Gangs beyond MAX_SLOTS get no slot (and run as
    /// tasks of no gang); they are returned.
    pub fn standalone(
        nr_cpus: u32,
        housekeeping: CpuList,
        gangs: &[GangId],
    ) -> (Self, Vec<GangId>) {
        let mut table = Self::new(nr_cpus, housekeeping);
        let cpus = table.gang_cpus();
        let mut left_out = Vec::new();
        for (slot, &gang) in gangs.iter().enumerate() {
            if cpus.is_empty() || table.place(gang, slot, &cpus).is_err() {
                left_out.push(gang);
            }
        }
        (table, left_out)
    }

    /// The table as the BPF scheduler reads it: GANG_NONE (-1) where nobody
    /// owns a CPU.
    pub fn to_bpf(&self) -> Vec<[i32; MAX_CPUS]> {
        (0..MAX_SLOTS)
            .map(|s| {
                let mut row = [-1i32; MAX_CPUS];
                for (cpu, cell) in row.iter_mut().enumerate().take(self.nr_cpus as usize) {
                    if let Some(g) = self.owner(s, cpu as u32) {
                        *cell = g as i32;
                    }
                }
                row
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cpus(list: &str) -> CpuList {
        CpuList::parse(list, 64).unwrap()
    }

    #[test]
    fn two_gangs_share_a_slot_on_disjoint_cpus() {
        let mut t = SlotTable::new(4, CpuList::new());
        t.place(0, 0, &cpus("0-1")).unwrap();
        t.place(1, 0, &cpus("2-3")).unwrap();
        assert_eq!(t.owner(0, 1), Some(0));
        assert_eq!(t.owner(0, 2), Some(1));
        assert_eq!(t.nr_slots(), 1);
    }

    #[test]
    fn a_cpu_is_never_given_twice_in_a_slot() {
        let mut t = SlotTable::new(4, CpuList::new());
        t.place(0, 0, &cpus("0-2")).unwrap();
        let before = t.clone();
        assert_eq!(
            t.place(1, 0, &cpus("2-3")),
            Err(PlacementError::Taken {
                slot: 0,
                cpu: 2,
                owner: 0
            })
        );
        assert_eq!(t, before, "a refused placement changes nothing");
    }

    #[test]
    fn refuses_cpus_slots_and_gangs_that_do_not_exist() {
        let mut t = SlotTable::new(2, cpus("0"));
        assert!(matches!(
            t.place(0, 0, &cpus("5")),
            Err(PlacementError::NoSuchCpu { .. })
        ));
        assert!(matches!(
            t.place(0, MAX_SLOTS, &cpus("1")),
            Err(PlacementError::NoSuchSlot { .. })
        ));
        assert!(matches!(
            t.place(MAX_GANGS as u32, 0, &cpus("1")),
            Err(PlacementError::NoSuchGang { .. })
        ));
        assert_eq!(
            t.place(0, 0, &cpus("0")),
            Err(PlacementError::Housekeeping { cpu: 0 })
        );
        assert_eq!(t.place(0, 0, &CpuList::new()), Err(PlacementError::NoCpus));
        assert_eq!(t.nr_slots(), 0);
    }

    #[test]
    fn standalone_gives_each_gang_its_own_slot_off_the_housekeeping_cpus() {
        let (t, left) = SlotTable::standalone(4, cpus("0"), &[3, 7]);
        assert!(left.is_empty());
        assert_eq!(t.nr_slots(), 2);
        assert_eq!(t.owner(0, 0), None);
        assert_eq!(t.owner(0, 1), Some(3));
        assert_eq!(t.owner(1, 3), Some(7));
        assert_eq!(t.slot_mask(7), 0b10);
    }

    #[test]
    fn standalone_leaves_out_gangs_beyond_the_slots() {
        let gangs: Vec<GangId> = (0..MAX_SLOTS as u32 + 2).collect();
        let (t, left) = SlotTable::standalone(2, CpuList::new(), &gangs);
        assert_eq!(t.nr_slots(), MAX_SLOTS);
        assert_eq!(left, vec![MAX_SLOTS as u32, MAX_SLOTS as u32 + 1]);
    }

    #[test]
    fn removing_a_gang_and_compacting_gives_its_slot_back() {
        let (mut t, _) = SlotTable::standalone(2, CpuList::new(), &[0, 1, 2]);
        t.remove_gang(1);
        t.compact();
        assert_eq!(t.nr_slots(), 2);
        assert_eq!(t.owner(1, 0), Some(2));
        assert_eq!(t.slot_mask(1), 0);
    }

    #[test]
    fn bpf_form_marks_unowned_cells() {
        let mut t = SlotTable::new(2, CpuList::new());
        t.place(5, 1, &cpus("1")).unwrap();
        let rows = t.to_bpf();
        assert_eq!(rows.len(), MAX_SLOTS);
        assert_eq!(rows[0][0], -1);
        assert_eq!(rows[1][1], 5);
        assert_eq!(rows[1][0], -1);
    }

    proptest! {
        /// Whatever sequence of placements and removals: no CPU has two
        /// owners in a slot, and every accepted placement is in the table.
        #[test]
        fn placements_never_double_book(ops in proptest::collection::vec((0u32..6, 0usize..4, proptest::collection::btree_set(0u32..8, 1..4), any::<bool>()), 0..40)) {
            let mut t = SlotTable::new(8, CpuList::new());
            for (gang, slot, set, remove) in ops {
                if remove {
                    t.remove_gang(gang);
                    t.compact();
                    prop_assert_eq!(t.slot_mask(gang), 0);
                    continue;
                }
                let list: CpuList = set.into_iter().collect();
                let before = t.clone();
                match t.place(gang, slot, &list) {
                    Ok(()) => for c in list.iter() { prop_assert_eq!(t.owner(slot, c), Some(gang)); },
                    Err(_) => prop_assert_eq!(&t, &before),
                }
                for row in t.placements() {
                    let mut seen = CpuList::new();
                    for cpus in row.values() {
                        prop_assert!(!seen.intersects(cpus));
                        for c in cpus.iter() { seen.insert(c); }
                    }
                }
            }
        }
    }
}
