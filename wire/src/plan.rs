//! The slot plan: the rotation gangd sends every node ahead of time, so
//! that the nodes switch on their own clocks at the same instants instead
//! of waiting for a command per switch (issue 12, part 2).
//!
//! A [`Plan`] names, from `epoch_ns` on the cluster clock (gangd's
//! CLOCK_MONOTONIC, ns), an endless cycle of slots of `slot_ms` each: the
//! k-th slot after the epoch (k = 0, 1, ...) runs `slots[k % len].slot` and
//! has the generation `first_gen + k`. Slot indices index the node's table,
//! which stays in the Schedule message: a plan carries no table. Boundary k
//! is at `epoch_ns + k × slot_ns`; the slot of generation `first_gen + k`
//! starts there and ends at boundary k + 1.
//!
//! Everything here is pure arithmetic on a plan and a time `t`: which slot
//! and generation is in force at t ([`Plan::in_force`]), the boundary at or
//! after t ([`Plan::boundary_at_or_after`]), the next k boundaries
//! ([`Plan::boundaries`]). No clock read, no I/O.
//!
//! An [`Amend`] ("slot of generation g ends at T", a voluntary-yield early
//! end) shifts that boundary and every later one by the same amount. It is
//! applied by rebasing: the amended plan starts at T with generation g + 1
//! and the cycle rotated so that every later generation keeps its slot.
//! The amended plan keeps the plan's id (it is the same plan, amended).
//!
//! Known faults: the rebased plan forgets everything before T (`in_force`
//! is None before it), so an amend can only shorten the slot in force or a
//! later one, never one already over; a second amend of the same
//! generation is refused as past (it is a duplicate). An amend may only
//! end a slot early (never later than planned). Arithmetic that would
//! overflow u64 (times far past the epoch) answers None, never wraps.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::proto::Gen;

/// The limits of `slot_ms` a plan accepts.
pub const SLOT_MS_MIN: u32 = 1;
pub const SLOT_MS_MAX: u32 = 60_000;
/// The most slots a cycle may hold, and the bound of a slot index: far
/// past any matrix (gangd's NODE_MAX_SLOTS is 16), so that what a plan
/// costs a node to hold and follow is bounded by this, not by the frame.
pub const MAX_PLAN_SLOTS: usize = 64;

/// One slot of the cycle: the index of the slot in the node's table
/// (the Schedule message).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedSlot {
    pub slot: u32,
}

/// The rotation from `epoch_ns` on, for ever (until a new plan or an
/// amend replaces it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// Increases with every plan gangd makes.
    pub id: u64,
    /// Cluster time at which `slots[0]` starts with `first_gen`.
    pub epoch_ns: u64,
    pub slot_ms: u32,
    /// The cycle, in order.
    pub slots: Vec<PlannedSlot>,
    /// Generation of the slot that starts at the epoch.
    pub first_gen: Gen,
}

/// "The slot of generation `gen` ends at `ends_at_ns`": every later
/// boundary moves by the same amount.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Amend {
    pub plan_id: u64,
    pub gen: Gen,
    pub ends_at_ns: u64,
}

/// The slot in force at some time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InForce {
    pub gen: Gen,
    pub slot: u32,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// The slot that starts at a boundary: at `at_ns`, generation `gen`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotStart {
    pub at_ns: u64,
    pub gen: Gen,
    pub slot: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanError {
    NoSlots,
    /// More slots than [`MAX_PLAN_SLOTS`] in the cycle.
    TooManySlots(usize),
    /// A slot index past [`MAX_PLAN_SLOTS`]: no node has such a slot.
    SlotOutOfRange(u32),
    SlotMsOutOfRange(u32),
    /// The first cycle would end past u64 ns (or its generations past u64).
    EpochOverflow {
        epoch_ns: u64,
    },
    /// An amend for another plan.
    OtherPlan {
        plan_id: u64,
        amend_plan_id: u64,
    },
    /// An amend of a generation before the plan's first.
    PastGeneration {
        gen: Gen,
        first_gen: Gen,
    },
    /// The amended slot would end before it starts.
    EndsBeforeStart {
        gen: Gen,
        ends_at_ns: u64,
        start_ns: u64,
    },
    /// The amended slot would end after its planned end.
    EndsAfterPlannedEnd {
        gen: Gen,
        ends_at_ns: u64,
        end_ns: u64,
    },
    /// The amended generation lies past u64 ns.
    Unreachable {
        gen: Gen,
    },
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanError::NoSlots => write!(f, "a plan needs at least one slot"),
            PlanError::TooManySlots(n) => {
                write!(f, "{n} slots in the cycle, more than {MAX_PLAN_SLOTS}")
            }
            PlanError::SlotOutOfRange(slot) => {
                write!(f, "slot {slot} is out of 0..{MAX_PLAN_SLOTS}")
            }
            PlanError::SlotMsOutOfRange(ms) => {
                write!(f, "slot_ms {ms} is out of {SLOT_MS_MIN}..={SLOT_MS_MAX}")
            }
            PlanError::EpochOverflow { epoch_ns } => {
                write!(
                    f,
                    "epoch {epoch_ns} ns: the first cycle overflows the clock"
                )
            }
            PlanError::OtherPlan {
                plan_id,
                amend_plan_id,
            } => write!(f, "amend of plan {amend_plan_id} applied to plan {plan_id}"),
            PlanError::PastGeneration { gen, first_gen } => write!(
                f,
                "amend of generation {} before the plan's first ({})",
                gen.0, first_gen.0
            ),
            PlanError::EndsBeforeStart {
                gen,
                ends_at_ns,
                start_ns,
            } => write!(
                f,
                "amend ends generation {} at {ends_at_ns} ns, before its start at {start_ns} ns",
                gen.0
            ),
            PlanError::EndsAfterPlannedEnd {
                gen,
                ends_at_ns,
                end_ns,
            } => write!(
                f,
                "amend ends generation {} at {ends_at_ns} ns, after its planned end at {end_ns} ns",
                gen.0
            ),
            PlanError::Unreachable { gen } => {
                write!(f, "generation {} lies past the clock's range", gen.0)
            }
        }
    }
}

impl std::error::Error for PlanError {}

impl Plan {
    /// Why this plan cannot be followed, if it cannot.
    pub fn validate(&self) -> Result<(), PlanError> {
        if self.slots.is_empty() {
            return Err(PlanError::NoSlots);
        }
        if self.slots.len() > MAX_PLAN_SLOTS {
            return Err(PlanError::TooManySlots(self.slots.len()));
        }
        if let Some(s) = self
            .slots
            .iter()
            .find(|s| s.slot as usize >= MAX_PLAN_SLOTS)
        {
            return Err(PlanError::SlotOutOfRange(s.slot));
        }
        if !(SLOT_MS_MIN..=SLOT_MS_MAX).contains(&self.slot_ms) {
            return Err(PlanError::SlotMsOutOfRange(self.slot_ms));
        }
        let cycle = self.slot_ns().checked_mul(self.slots.len() as u64);
        let len = self.slots.len() as u64;
        if cycle.and_then(|c| self.epoch_ns.checked_add(c)).is_none()
            || self.first_gen.0.checked_add(len).is_none()
        {
            return Err(PlanError::EpochOverflow {
                epoch_ns: self.epoch_ns,
            });
        }
        Ok(())
    }

    pub fn slot_ns(&self) -> u64 {
        u64::from(self.slot_ms) * 1_000_000
    }

    /// The boundary k after the epoch (k = 0 is the epoch). None past u64, or
    /// for a plan without slots or of 0 ms (which `validate` refuses).
    pub fn boundary(&self, k: u64) -> Option<SlotStart> {
        if self.slots.is_empty() || self.slot_ms == 0 {
            return None;
        }
        let at_ns = k
            .checked_mul(self.slot_ns())
            .and_then(|d| self.epoch_ns.checked_add(d))?;
        let gen = Gen(self.first_gen.0.checked_add(k)?);
        let slot = self.slots[(k % self.slots.len() as u64) as usize].slot;
        Some(SlotStart { at_ns, gen, slot })
    }

    /// The slot in force at `t`: None before the epoch (or past u64).
    pub fn in_force(&self, t: u64) -> Option<InForce> {
        let since = t.checked_sub(self.epoch_ns)?;
        let k = since.checked_div(self.slot_ns())?;
        let b = self.boundary(k)?;
        Some(InForce {
            gen: b.gen,
            slot: b.slot,
            start_ns: b.at_ns,
            end_ns: self.boundary(k + 1)?.at_ns,
        })
    }

    /// The first boundary at or after `t` (the epoch for any t before it).
    pub fn boundary_at_or_after(&self, t: u64) -> Option<SlotStart> {
        let since = t.saturating_sub(self.epoch_ns);
        if self.slot_ns() == 0 {
            return None;
        }
        self.boundary(since.div_ceil(self.slot_ns()))
    }

    /// The first `count` boundaries at or after `t` (fewer near u64's end).
    pub fn boundaries(&self, t: u64, count: usize) -> Vec<SlotStart> {
        let Some(first) = self.boundary_at_or_after(t) else {
            return Vec::new();
        };
        let k0 = first.gen.0 - self.first_gen.0;
        (0..count as u64)
            .map_while(|i| self.boundary(k0.checked_add(i)?))
            .collect()
    }

    /// The same plan restated from its last boundary at or before `t` (the
    /// plan itself before its epoch): same boundaries and generations from
    /// there on, a recent epoch. A node converting a plan to its own clock
    /// converts this epoch, so the rate error of the conversion applies to
    /// the time since `t` only.
    pub fn restated_from(&self, t: u64) -> Option<Plan> {
        let since = t.checked_sub(self.epoch_ns);
        let k = match since {
            None => return Some(self.clone()),
            Some(d) => d.checked_div(self.slot_ns())?,
        };
        let b = self.boundary(k)?;
        let mut slots = self.slots.clone();
        let shift = (k % slots.len() as u64) as usize;
        slots.rotate_left(shift);
        Some(Plan {
            id: self.id,
            epoch_ns: b.at_ns,
            slot_ms: self.slot_ms,
            slots,
            first_gen: b.gen,
        })
    }

    /// The plan with `amend` applied: the slot of `amend.gen` ends at
    /// `amend.ends_at_ns`, and the rotation goes on from there with the
    /// next generation and its slot.
    pub fn amended(&self, amend: &Amend) -> Result<Plan, PlanError> {
        self.validate()?;
        if amend.plan_id != self.id {
            return Err(PlanError::OtherPlan {
                plan_id: self.id,
                amend_plan_id: amend.plan_id,
            });
        }
        let Some(k) = amend.gen.0.checked_sub(self.first_gen.0) else {
            return Err(PlanError::PastGeneration {
                gen: amend.gen,
                first_gen: self.first_gen,
            });
        };
        let unreachable = PlanError::Unreachable { gen: amend.gen };
        let start_ns = self.boundary(k).ok_or(unreachable.clone())?.at_ns;
        let next = self.boundary(k + 1).ok_or(unreachable)?;
        if amend.ends_at_ns < start_ns {
            return Err(PlanError::EndsBeforeStart {
                gen: amend.gen,
                ends_at_ns: amend.ends_at_ns,
                start_ns,
            });
        }
        if amend.ends_at_ns > next.at_ns {
            return Err(PlanError::EndsAfterPlannedEnd {
                gen: amend.gen,
                ends_at_ns: amend.ends_at_ns,
                end_ns: next.at_ns,
            });
        }
        let len = self.slots.len();
        let shift = ((k + 1) % len as u64) as usize;
        let mut slots = self.slots.clone();
        slots.rotate_left(shift);
        let plan = Plan {
            id: self.id,
            epoch_ns: amend.ends_at_ns,
            slot_ms: self.slot_ms,
            slots,
            first_gen: next.gen,
        };
        plan.validate()?;
        Ok(plan)
    }
}
