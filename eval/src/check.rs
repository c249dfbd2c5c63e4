//! Is the run complete? For every policy × workload × MPL × rep: exactly
//! MPL job records (idx 0..MPL-1, each once), all ok, and a `cell` record;
//! `dedicated` (checked on its own, whether listed or not): for every
//! workload and rep one ok job of mpl=1; with the short scenario: every
//! policy has one ok `short` record per rep and configuration (short
//! workload, L, long workload), and the short and long workloads have their
//! dedicated jobs too. Reps are numbered first_rep..first_rep+reps-1.
//!
//! Every problem is one line naming the item (which cell, which job, rc,
//! ranks_ok/ranks, the record's file:line). Records outside the expected
//! matrix are not problems.

use crate::records::{Job, Log};
use crate::DEDICATED;

#[derive(Debug, Clone, PartialEq)]
pub struct Expect {
    pub policies: Vec<String>,
    pub workloads: Vec<String>,
    pub mpls: Vec<u32>,
    pub reps: u32,
    pub first_rep: u32,
    pub short: bool,
}

fn failure(j: &Job) -> String {
    let el = match j.elapsed_s {
        Some(e) => format!(" elapsed_s={e}"),
        None => String::new(),
    };
    format!(
        "failed: rc={} ranks_ok={}/{}{el} ({})",
        j.rc, j.ranks_ok, j.ranks, j.loc
    )
}

fn locs<'a>(it: impl Iterator<Item = &'a crate::records::Loc>) -> String {
    it.map(|l| l.to_string()).collect::<Vec<_>>().join(", ")
}

/// Every problem, in a fixed order (policy, workload, mpl, rep, idx); empty
/// when the run is complete.
pub fn check(log: &Log, e: &Expect) -> Vec<String> {
    let mut out = Vec::new();
    let reps: Vec<u32> = (e.first_rep..e.first_rep + e.reps).collect();

    for p in e.policies.iter().filter(|p| *p != DEDICATED) {
        for w in &e.workloads {
            for &m in &e.mpls {
                for &r in &reps {
                    let cell = format!("{p} {w} mpl={m} rep={r}");
                    let jobs: Vec<&Job> = log
                        .jobs
                        .iter()
                        .filter(|j| &j.policy == p && &j.workload == w && j.mpl == m && j.rep == r)
                        .collect();
                    for i in 0..m {
                        let this: Vec<&&Job> = jobs.iter().filter(|j| j.idx == i).collect();
                        match this.as_slice() {
                            [] => out.push(format!("{cell}: job idx={i} missing")),
                            [j] if j.ok() => {}
                            [j] => out.push(format!("{cell}: job idx={i} {}", failure(j))),
                            many => out.push(format!(
                                "{cell}: job idx={i} recorded {} times ({})",
                                many.len(),
                                locs(many.iter().map(|j| &j.loc))
                            )),
                        }
                    }
                    for j in jobs.iter().filter(|j| j.idx >= m) {
                        out.push(format!(
                            "{cell}: job idx={} is not in 0..{} ({})",
                            j.idx,
                            m - 1,
                            j.loc
                        ));
                    }
                    let cells: Vec<_> = log
                        .cells
                        .iter()
                        .filter(|c| &c.policy == p && &c.workload == w && c.mpl == m && c.rep == r)
                        .collect();
                    match cells.len() {
                        0 => out.push(format!("{cell}: no cell record")),
                        1 => {}
                        n => out.push(format!(
                            "{cell}: cell record given {n} times ({})",
                            locs(cells.iter().map(|c| &c.loc))
                        )),
                    }
                }
            }
        }
    }

    // The short scenario's configurations, as recorded.
    let mut confs: Vec<(String, u32, String)> = Vec::new();
    if e.short {
        for s in &log.shorts {
            let c = (s.workload.clone(), s.behind, s.long_workload.clone());
            if !confs.contains(&c) {
                confs.push(c);
            }
        }
    }

    // Dedicated: every workload (and the short scenario's) alone, every rep.
    let mut ded_ws: Vec<String> = e.workloads.clone();
    for (w, _, lw) in &confs {
        for x in [w, lw] {
            if !ded_ws.contains(x) {
                ded_ws.push(x.clone());
            }
        }
    }
    for w in &ded_ws {
        for &r in &reps {
            let item = format!("{DEDICATED} {w} mpl=1 rep={r}");
            let jobs: Vec<&Job> = log
                .jobs
                .iter()
                .filter(|j| j.policy == DEDICATED && &j.workload == w && j.mpl == 1 && j.rep == r)
                .collect();
            match jobs.as_slice() {
                [] => out.push(format!("{item}: job missing")),
                [j] if j.ok() => {}
                [j] => out.push(format!("{item}: job {}", failure(j))),
                many => out.push(format!(
                    "{item}: job recorded {} times ({})",
                    many.len(),
                    locs(many.iter().map(|j| &j.loc))
                )),
            }
        }
    }

    if e.short {
        for p in e.policies.iter().filter(|p| *p != DEDICATED) {
            if confs.is_empty() {
                out.push(format!("{p} short: no short records at all"));
                continue;
            }
            for (w, behind, lw) in &confs {
                for &r in &reps {
                    let item = format!("{p} short {w} behind={behind} long_workload={lw} rep={r}");
                    let recs: Vec<_> = log
                        .shorts
                        .iter()
                        .filter(|s| {
                            &s.policy == p
                                && s.rep == r
                                && &s.workload == w
                                && s.behind == *behind
                                && &s.long_workload == lw
                        })
                        .collect();
                    match recs.as_slice() {
                        [] => out.push(format!("{item}: missing")),
                        [s] if s.ok() => {}
                        [s] => out.push(format!(
                            "{item}: failed: rc={} ranks_ok={}/{} ({})",
                            s.rc, s.ranks_ok, s.ranks, s.loc
                        )),
                        many => out.push(format!(
                            "{item}: recorded {} times ({})",
                            many.len(),
                            locs(many.iter().map(|s| &s.loc))
                        )),
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn expect(short: bool) -> Expect {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect();
        Expect {
            policies: v(&["eevdf", "gang-strict"]),
            workloads: v(&["ep", "rt"]),
            mpls: vec![1, 2],
            reps: 2,
            first_rep: 0,
            short,
        }
    }

    /// Every record of a complete run of `expect(true)`, one per line.
    fn complete() -> Vec<String> {
        let mut l = vec!["meta nodes=2".to_string()];
        let e = expect(true);
        for r in 0..2 {
            for w in ["ep", "rt", "alltoall"] {
                l.push(format!("job policy=dedicated workload={w} mpl=1 rep={r} idx=0 submit_ms=0 end_ms=1000 rc=0 ranks=2 ranks_ok=2 elapsed_s=0.9"));
            }
        }
        for p in &e.policies {
            for w in &e.workloads {
                for m in &e.mpls {
                    for r in 0..2 {
                        for i in 0..*m {
                            l.push(format!("job policy={p} workload={w} mpl={m} rep={r} idx={i} submit_ms=0 end_ms=2000 rc=0 ranks=2 ranks_ok=2 elapsed_s=1.5"));
                        }
                        l.push(format!(
                            "cell policy={p} workload={w} mpl={m} rep={r} switches=10"
                        ));
                    }
                }
            }
            for r in 0..2 {
                l.push(format!("short policy={p} rep={r} workload=rt behind=2 long_workload=alltoall first_long_submit_ms=0 submit_ms=500 end_ms=1500 rc=0 ranks=2 ranks_ok=2"));
            }
        }
        l
    }

    fn run(lines: &[String], short: bool) -> Vec<String> {
        let mut log = Log::default();
        log.add_str("run.log", &lines.join("\n")).unwrap();
        check(&log, &expect(short))
    }

    #[test]
    fn a_complete_run_passes() {
        assert_eq!(run(&complete(), true), Vec::<String>::new());
        assert_eq!(run(&complete(), false), Vec::<String>::new());
    }

    #[test]
    fn a_failed_job_is_named_with_rc_and_ranks() {
        let mut l = complete();
        let i = l
            .iter()
            .position(|x| x.contains("policy=gang-strict workload=rt mpl=2 rep=1 idx=1"))
            .unwrap();
        l[i] = l[i].replace("rc=0 ranks=2 ranks_ok=2", "rc=137 ranks=2 ranks_ok=1");
        assert_eq!(
            run(&l, false),
            vec![format!("gang-strict rt mpl=2 rep=1: job idx=1 failed: rc=137 ranks_ok=1/2 elapsed_s=1.5 (run.log:{})", i + 1)]
        );
    }

    #[test]
    fn duplicates_and_stray_indexes_are_named() {
        let mut l = complete();
        let dup = l
            .iter()
            .find(|x| x.contains("policy=eevdf workload=ep mpl=1 rep=0 idx=0"))
            .unwrap()
            .clone();
        l.push(dup);
        l.push("job policy=eevdf workload=ep mpl=2 rep=0 idx=2 submit_ms=0 end_ms=1 rc=0 ranks=1 ranks_ok=1".into());
        l.push("cell policy=eevdf workload=ep mpl=2 rep=0".into());
        let p = run(&l, false);
        assert_eq!(p.len(), 3, "{p:#?}");
        assert!(p[0].starts_with("eevdf ep mpl=1 rep=0: job idx=0 recorded 2 times (run.log:"));
        assert!(p[1].starts_with("eevdf ep mpl=2 rep=0: job idx=2 is not in 0..1 (run.log:"));
        assert!(p[2].starts_with("eevdf ep mpl=2 rep=0: cell record given 2 times"));
    }

    #[test]
    fn no_short_records_is_named_per_policy() {
        let l: Vec<String> = complete()
            .into_iter()
            .filter(|x| !x.starts_with("short"))
            .collect();
        let p = run(&l, true);
        assert_eq!(
            p,
            vec![
                "eevdf short: no short records at all",
                "gang-strict short: no short records at all"
            ]
        );
    }

    #[test]
    fn dedicated_listed_as_a_policy_is_checked_as_the_baseline() {
        let mut log = Log::default();
        log.add_str("run.log", &complete().join("\n")).unwrap();
        let mut e = expect(false);
        e.policies.insert(0, "dedicated".into());
        assert_eq!(check(&log, &e), Vec::<String>::new());
    }

    #[test]
    fn reps_can_start_at_one() {
        let l: Vec<String> = complete()
            .iter()
            .map(|x| x.replace("rep=1", "rep=2").replace("rep=0", "rep=1"))
            .collect();
        let mut log = Log::default();
        log.add_str("run.log", &l.join("\n")).unwrap();
        let mut e = expect(true);
        assert!(!check(&log, &e).is_empty());
        e.first_rep = 1;
        assert_eq!(check(&log, &e), Vec::<String>::new());
    }

    /// What check must say when line `l` of the complete run is missing.
    fn expected_item(l: &str) -> String {
        let kv = |k: &str| {
            l.split_whitespace()
                .find_map(|t| t.strip_prefix(&format!("{k}=")))
                .unwrap()
                .to_string()
        };
        if l.starts_with("job policy=dedicated") {
            format!(
                "dedicated {} mpl=1 rep={}: job missing",
                kv("workload"),
                kv("rep")
            )
        } else if l.starts_with("job") {
            format!(
                "{} {} mpl={} rep={}: job idx={} missing",
                kv("policy"),
                kv("workload"),
                kv("mpl"),
                kv("rep"),
                kv("idx")
            )
        } else if l.starts_with("cell") {
            format!(
                "{} {} mpl={} rep={}: no cell record",
                kv("policy"),
                kv("workload"),
                kv("mpl"),
                kv("rep")
            )
        } else {
            format!(
                "{} short {} behind={} long_workload={} rep={}: missing",
                kv("policy"),
                kv("workload"),
                kv("behind"),
                kv("long_workload"),
                kv("rep")
            )
        }
    }

    proptest! {
        /// Removing any one record of a complete run fails the check with
        /// exactly one problem, naming that record.
        #[test]
        fn removing_any_one_record_names_exactly_it(pick in any::<prop::sample::Index>()) {
            let mut l = complete();
            let i = 1 + pick.index(l.len() - 1); // not the meta line
            let gone = l.remove(i);
            let p = run(&l, true);
            prop_assert_eq!(p, vec![expected_item(&gone)], "removed: {}", gone);
        }

        /// Failing any one job or short record names exactly it, with its rc.
        #[test]
        fn failing_any_one_record_names_exactly_it(pick in any::<prop::sample::Index>(), rc in 1i64..255) {
            let mut l = complete();
            let cands: Vec<usize> = (0..l.len()).filter(|&i| l[i].contains("rc=0")).collect();
            let i = cands[pick.index(cands.len())];
            l[i] = l[i].replace("rc=0", &format!("rc={rc}"));
            let p = run(&l, true);
            prop_assert_eq!(p.len(), 1);
            prop_assert!(p[0].contains(&format!("failed: rc={rc} ranks_ok=2/2")), "{}", p[0]);
            let loc = format!("(run.log:{})", i + 1);
            prop_assert!(p[0].ends_with(&loc), "{}", p[0]);
        }
    }
}
