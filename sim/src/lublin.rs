//! The Lublin–Feitelson workload model of rigid parallel jobs: U. Lublin and
//! D. G. Feitelson, "The workload on parallel supercomputers: modeling the
//! characteristics of rigid jobs", J. Parallel Distrib. Comput. 63(11),
//! 2003, pp. 1105–1122, with the parameters of the authors' reference
//! program (m_lublin99.c, Parallel Workloads Archive), "typeless" set (no
//! batch/interactive split):
//!
//! - size: serial with p = 0.244; otherwise 2^u with u from a two-stage
//!   uniform on [ULow, UMed] (p = UProb = 0.86) or [UMed, UHi], rounded to
//!   an integer exponent (a power-of-two job) when the same uniform draw
//!   falls below serial + pow2 = 0.244 + 0.576; ULow = 0.8, UHi = log2 of
//!   the machine, UMed = UHi − 2.5 (the paper's 4.5 for UHi = 7; the model
//!   asks UMed ∈ [UHi − 3.5, UHi − 1.5]).
//! - runtime: e^x, x hyper-gamma: Gamma(4.2, 0.94) with probability
//!   p = PA·size + PB (PA = −0.0054, PB = 0.78, clamped to [0, 1]), else
//!   Gamma(312, 0.03); x > 12 (two days) is drawn again.
//! - inter-arrival: e^x, x ~ Gamma(AARR·ARAR, BARR) = Gamma(10.2303 ×
//!   1.0225, 0.4871), x > 13 drawn again.
//!
//! Our choices (docs/simulator.md): the size in PA·size is measured on the
//! paper's 128-processor machine (size × 128 / machine), else every job
//! above 144 processors of a large machine would be long; the daily cycle
//! of arrivals (ANUM 8.1737, BNUM 3.9631, 48 half-hour buckets) is left
//! out, since the load is rescaled by the inter-arrival time anyway; the
//! requested time is the runtime (the model has none), so EASY runs with
//! exact estimates, its best case.

use crate::rng::Rng;
use crate::workload::Job;

pub const SERIAL_PROB: f64 = 0.244;
pub const POW2_PROB: f64 = 0.576;
pub const ULOW: f64 = 0.8;
pub const UMED_BELOW_UHI: f64 = 2.5;
pub const UPROB: f64 = 0.86;
pub const A1: f64 = 4.2;
pub const B1: f64 = 0.94;
pub const A2: f64 = 312.0;
pub const B2: f64 = 0.03;
pub const PA: f64 = -0.0054;
pub const PB: f64 = 0.78;
pub const AARR: f64 = 10.2303;
pub const BARR: f64 = 0.4871;
pub const ARAR: f64 = 1.0225;
/// ln of the longest runtime (≈ 45 hours) and inter-arrival time.
pub const TOO_MUCH_TIME: f64 = 12.0;
pub const TOO_MUCH_ARRIVE_TIME: f64 = 13.0;
/// The machine the runtime parameters were fitted on.
pub const PAPER_MACHINE: f64 = 128.0;

/// `n` jobs for a machine of `cpus` processors (≥ 2), ids from 1.
pub fn generate(n: usize, cpus: u32, seed: u64) -> Vec<Job> {
    let mut rng = Rng::new(seed);
    let uhi = (cpus.max(2) as f64).log2();
    let umed = (uhi - UMED_BELOW_UHI).max(ULOW);
    let mut t = 0.0;
    (0..n)
        .map(|i| {
            let procs = size(&mut rng, uhi, umed).min(cpus);
            let runtime = runtime(&mut rng, procs, cpus);
            let job = Job::new(i as u64 + 1, t, runtime, procs, None);
            t += redraw_below(&mut rng, TOO_MUCH_ARRIVE_TIME, |r| {
                r.gamma(AARR * ARAR, BARR)
            })
            .exp();
            job
        })
        .collect()
}

fn size(rng: &mut Rng, uhi: f64, umed: f64) -> u32 {
    let u = rng.uniform();
    if u <= SERIAL_PROB {
        return 1;
    }
    let (lo, hi) = if rng.uniform() <= UPROB {
        (ULOW, umed)
    } else {
        (umed, uhi)
    };
    let mut par = lo + rng.uniform() * (hi - lo);
    if u <= SERIAL_PROB + POW2_PROB {
        par = par.round();
    }
    (2f64.powf(par).round() as u32).max(1)
}

fn runtime(rng: &mut Rng, procs: u32, cpus: u32) -> f64 {
    let size = procs as f64 * PAPER_MACHINE / cpus as f64;
    let p = (PA * size + PB).clamp(0.0, 1.0);
    redraw_below(rng, TOO_MUCH_TIME, |r| {
        if r.uniform() <= p {
            r.gamma(A1, B1)
        } else {
            r.gamma(A2, B2)
        }
    })
    .exp()
    .round()
    .max(1.0)
}

fn redraw_below(rng: &mut Rng, limit: f64, mut draw: impl FnMut(&mut Rng) -> f64) -> f64 {
    loop {
        let x = draw(rng);
        if x <= limit {
            return x;
        }
    }
}
