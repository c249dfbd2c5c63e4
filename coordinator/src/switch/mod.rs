//! The slot switch, gangd's side: everything that moves the cluster from
//! one slot of the Ousterhout matrix to the next. Pure logic (no socket, no
//! clock, no file but the switch log) so that tests feed it events and time.
//!
//! - barrier.rs: [`barrier::SlotSwitch`], one switch (Freeze, Frozen,
//!   Switch, Running) as a state machine.
//! - rotation.rs: [`rotation::Rotation`], the slot clock: when the next
//!   switch is due, to which slot, with which nodes; the tables and knobs
//!   the nodes must have before it.
//! - planner.rs: [`planner::Planner`], the slot plan sent ahead of time
//!   (issue 12): which boundary a new plan takes effect at, the nodes'
//!   acknowledgements, the late ones.
//! - timed.rs: [`timed::Timed`], `switching = timed`: the planner wired to
//!   the rotation's boundaries (Plan offers, acks, Amend on voluntary
//!   yield, the nodes' Switched reports per generation).
//! - switch_log.rs: [`switch_log::SwitchLog`], one JSON line per finished
//!   switch.
//!
//! One slot switch, step by step (file::function of every hop):
//! 1. daemon/mod.rs::Coordinator::run_loop sleeps until
//!    rotation.rs::Rotation::next_wakeup (the end of the slot, or the
//!    deadline of the switch's phase), or until an event comes, then calls
//!    daemon/switching.rs::Coordinator::drive_switch.
//! 2. daemon/switching.rs::Coordinator::drive_switch hands
//!    rotation.rs::Rotation::tick the time, the knobs and a
//!    daemon/switching.rs::Boundary (the [`rotation::ClusterView`] of the
//!    allocator and the nodes: live nodes, their tables, the slots holding
//!    a started job, who runs in a slot).
//! 3. rotation.rs::Rotation::tick, between switches, queues the knobs if
//!    they changed (knobs.rs::ClusterKnobs::message) and every
//!    changed table (ToAgent::Schedule; a new table forces a switch), then
//!    rotation.rs::Rotation::maybe_switch picks the next slot when the slot
//!    is over (its deadline passed, or every (job, node) running in it
//!    sent Yielded) and calls barrier.rs::SlotSwitch::start: Freeze {gen,
//!    from_slot, to_slot} to every node with a table (Barrier::Strict), or
//!    Switch at once (Barrier::Off).
//! 4. daemon/switching.rs::Coordinator::drive_switch sends the outbox on
//!    the nodes' links (daemon/nodes.rs::Coordinator::send_to_nodes,
//!    daemon/net/mod.rs::Link::send; a writer thread per connection).
//! 5. Each agent answers Frozen: daemon/net/agents.rs (reader thread) →
//!    daemon/mod.rs::Coordinator::handle →
//!    daemon/nodes.rs::Coordinator::on_agent_message →
//!    rotation.rs::Rotation::on_agent → barrier.rs::SlotSwitch::on_frozen.
//!    Once no live node owes a Frozen, barrier.rs::SlotSwitch::advance
//!    queues Switch {gen, slot, slot_ms} to every node still in the
//!    barrier; daemon/nodes.rs::Coordinator::on_agent_message sends it.
//! 6. Each agent answers Running (same path, barrier.rs::SlotSwitch::
//!    on_running); once none owes one the switch is Done with a
//!    barrier::SwitchRecord.
//! 7. rotation.rs::Rotation::finish_if_done makes to_slot the slot in
//!    force, counts the statistics, remembers the nodes left behind (they
//!    catch up at the next switch), and keeps the record.
//! 8. daemon/switching.rs::Coordinator::drive_switch takes the records
//!    (rotation.rs::Rotation::take_finished), writes them
//!    (switch_log.rs::SwitchLog::write) and publishes the status files
//!    (daemon/knobs.rs::Coordinator::publish_status).
//!
//! Under `switching = timed` (docs/timed-switching.md) steps 3 to 7 give
//! way to plans: rotation.rs::Rotation::tick still queues knobs and
//! tables, then calls timed.rs::Timed::tick (Plan offers from
//! planner.rs::Planner::change, re-offers from Planner::on_tick, Amend from
//! Planner::amend once every rank of the slot in force yielded); PlanAck,
//! Yielded and Switched come in by the path of step 5 to
//! timed.rs::Timed::on_agent; step 8 takes the finished generations with
//! rotation.rs::Rotation::take_timed and writes them with
//! switch_log.rs::SwitchLog::write_timed.
//!
//! Failures on the way: a node silent past its phase's deadline is dropped
//! by barrier.rs::SlotSwitch::on_tick (step 2 feeds the time); a lost
//! connection by daemon/nodes.rs::Coordinator::node_lost →
//! rotation.rs::Rotation::node_lost → barrier.rs::SlotSwitch::on_node_lost.
//! Neither holds the other nodes frozen.
//!
//! The knob values it reads are crate::knobs (below the daemon, which
//! serves them as files). "Rotation" is this cycle through the matrix's
//! slots only: the node's own timer is its slot timer.

pub mod barrier;
pub mod planner;
pub mod rotation;
pub mod switch_log;
pub mod timed;
