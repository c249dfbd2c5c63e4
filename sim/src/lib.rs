//! gang-sim: a trace-driven simulator of a cluster of N nodes × C CPUs that
//! compares gang scheduling, placed by gangd's own allocator
//! (`gang_coordinator::alloc::Allocator`, not a copy), with the two
//! baselines every site knows: FCFS space sharing and EASY backfilling.
//!
//! Layers, bottom up:
//! - [`workload`]: the rigid jobs of a run (submit, runtime, processors,
//!   requested time) and the offered-load scaling by inter-arrival time.
//! - [`swf`]: the Standard Workload Format reader; [`lublin`]: the
//!   Lublin–Feitelson (2003) generator, on the seeded [`rng`].
//! - [`space`]: FCFS and EASY (pure, event-driven); [`gang`]: the gang
//!   simulation, a fluid approximation of the slot rotation on the real
//!   allocator.
//! - [`metrics`]: response time, bounded slowdown, utilisation, makespan;
//!   [`report`]: the CSV and the SVG figures (gang-plot).
//!
//! Every simulator returns one [`workload::Outcome`] per job (start and
//! end), so the metrics are computed once for all policies.
//!
//! Known faults: see docs/simulator.md (fluid model, no memory or network
//! model, the daily arrival cycle of the Lublin model left out).

pub mod gang;
pub mod lublin;
pub mod metrics;
pub mod report;
pub mod rng;
pub mod space;
pub mod swf;
pub mod workload;
