//! The SWF reader, as a specification: comments and blank lines are
//! skipped, jobs with an unknown run time or size are left out and
//! counted, and a malformed line is an error naming its line number.

use gang_sim::swf::{read, SwfError};

const GOOD: &str = "\
; Version: 2
; MaxProcs: 128

1 0 5 100 4 -1 -1 4 200 -1 1 1 1 1 1 -1 -1 -1
2 10 -1 -1 8 -1 -1 8 300 -1 0 1 1 1 1 -1 -1 -1
3 20 0 50 -1 -1 -1 16 -1 -1 1 1 1 1 1 -1 -1 -1
4 30 0 50 -1 -1 -1 -1 -1 -1 1 1 1 1 1 -1 -1 -1
";

#[test]
fn reads_jobs_skips_comments_and_counts_unknown_jobs() {
    let t = read(GOOD.as_bytes()).unwrap();
    assert_eq!(t.skipped, 2, "job 2 has no run time, job 4 no size");
    assert_eq!(t.jobs.len(), 2);
    let (a, b) = (&t.jobs[0], &t.jobs[1]);
    assert_eq!(
        (a.id, a.submit, a.runtime, a.procs, a.estimate),
        (1, 0.0, 100.0, 4, 200.0)
    );
    // Allocated processors unknown: the requested ones; no requested time:
    // the run time is the estimate.
    assert_eq!(
        (b.id, b.submit, b.runtime, b.procs, b.estimate),
        (3, 20.0, 50.0, 16, 50.0)
    );
}

#[test]
fn an_estimate_below_the_runtime_is_raised_to_it() {
    let t = read("1 0 0 100 4 -1 -1 4 60 -1 1 1 1 1 1 -1 -1 -1\n".as_bytes()).unwrap();
    assert_eq!(t.jobs[0].estimate, 100.0);
}

fn error(text: &str) -> SwfError {
    read(text.as_bytes()).unwrap_err()
}

#[test]
fn a_short_line_is_an_error_with_its_line_number() {
    assert_eq!(
        error("; header\n1 0 0 100 4\n"),
        SwfError::Line {
            line: 2,
            why: "5 fields, an SWF job line has 18".into()
        }
    );
}

#[test]
fn a_field_that_is_not_a_number_is_an_error_naming_the_field() {
    let e = error("1 0 0 100 four -1 -1 4 60 -1 1 1 1 1 1 -1 -1 -1\n");
    assert_eq!(
        e.to_string(),
        "SWF line 1: field 5 is \"four\", not a number"
    );
    let e = error("1 0 0 inf 4 -1 -1 4 60 -1 1 1 1 1 1 -1 -1 -1\n");
    assert!(e.to_string().contains("field 4"), "{e}");
}

#[test]
fn a_negative_submit_time_is_an_error() {
    let e = error("1 -5 0 100 4 -1 -1 4 60 -1 1 1 1 1 1 -1 -1 -1\n");
    assert!(e.to_string().starts_with("SWF line 1: submit time"), "{e}");
}
