//! The BPF mode's tables: a coordinator's column (slots of placements by
//! gang name) resolved into a `SlotTable` of the gangs registered here.
//!
//! A column is checked as a whole (every placement valid, no CPU given
//! twice in a slot), the gangs not (yet) here included, so a node refuses
//! what every node would refuse; then only the gangs of the registry get
//! their CPUs. Resolved again later (gangs came, a knob changed), what no
//! longer fits is logged and left out instead.
//!
//! Known fault: a gang with several placements in one slot gets their
//! union; nothing says it was meant.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;
use log::warn;

use crate::control::Placement;
use crate::cpulist::CpuList;
use crate::gangs::GangRegistry;
use crate::slots::{GangId, SlotTable};

/// The table of a coordinator's column, built into the empty `table`: every
/// gang of the registry gets its CPUs; the others are left out and
/// returned. With `check`, every placement must be valid, the left-out
/// gangs' included (the column must be a valid table as a whole); without,
/// an invalid one is logged and left out.
pub fn column_table(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gangs::GangDir;

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
