//! The wire protocol from outside: every message through a frame and back,
//! the incremental decoder against the blocking reader, and every way a
//! peer can send garbage.

use std::collections::BTreeSet;
use std::io::{self, Cursor, Read};

use gang_wire::proto::*;
use proptest::prelude::*;
use proptest::sample::Index;

// --- strategies: arbitrary values of every field of every message ---

fn text() -> impl Strategy<Value = String> {
    any::<String>()
}

fn bytes() -> impl Strategy<Value = Bytes> {
    prop::collection::vec(any::<u8>(), 0..512).prop_map(Bytes)
}

fn strings() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(text(), 0..4)
}

fn env() -> impl Strategy<Value = Vec<(String, String)>> {
    prop::collection::vec((text(), text()), 0..4)
}

fn job() -> impl Strategy<Value = JobId> {
    any::<u64>().prop_map(JobId)
}

fn gen() -> impl Strategy<Value = Gen> {
    any::<u64>().prop_map(Gen)
}

fn stream() -> impl Strategy<Value = Stream> {
    prop_oneof![Just(Stream::Stdout), Just(Stream::Stderr)]
}

fn exit_status() -> impl Strategy<Value = ExitStatus> {
    prop_oneof![
        any::<i32>().prop_map(ExitStatus::Exited),
        any::<i32>().prop_map(ExitStatus::Signaled)
    ]
}

fn placement() -> impl Strategy<Value = Placement> {
    (job(), text()).prop_map(|(job, cpus)| Placement { job, cpus })
}

fn switch_report() -> impl Strategy<Value = SwitchReport> {
    let outcome = prop_oneof![
        Just(SwitchOutcome::OnTime),
        Just(SwitchOutcome::Late),
        Just(SwitchOutcome::TimedOut),
        Just(SwitchOutcome::Commanded),
    ];
    let drain = proptest::option::of(
        (any::<u64>(), any::<u64>(), any::<bool>(), any::<u64>()).prop_map(
            |(drained_bytes, drain_us, timed_out, answer_us)| FreezeReport {
                drained_bytes,
                drain_us,
                timed_out,
                answer_us,
            },
        ),
    );
    (
        gen(),
        any::<u32>(),
        any::<u64>(),
        any::<u64>(),
        outcome,
        drain,
        (any::<u64>(), any::<u64>(), any::<u64>()),
    )
        .prop_map(
            |(gen, slot, at_ns, late_us, outcome, drain, (parked_us, park_late_us, lead_us))| {
                SwitchReport {
                    gen,
                    slot,
                    at_ns,
                    late_us,
                    outcome,
                    drain,
                    parked_us,
                    park_late_us,
                    lead_us,
                }
            },
        )
}

fn from_agent() -> impl Strategy<Value = FromAgent> {
    prop_oneof![
        (any::<u32>(), text(), text()).prop_map(|(nr_cpus, housekeeping_cpus, agent_version)| {
            FromAgent::Hello {
                nr_cpus,
                housekeeping_cpus,
                agent_version,
                jobs: vec![],
                schedule: vec![],
            }
        }),
        (
            prop::collection::vec(live_job(), 0..3),
            prop::collection::vec(prop::collection::vec(placement(), 0..3), 0..3)
        )
            .prop_map(|(jobs, schedule)| FromAgent::Hello {
                nr_cpus: 2,
                housekeeping_cpus: String::new(),
                agent_version: "0.1.0".into(),
                jobs,
                schedule,
            }),
        (job(), proptest::option::of(text()))
            .prop_map(|(job, error)| FromAgent::Prepared { job, error }),
        (any::<u64>(), bytes(), any::<bool>()).prop_map(|(id, data, last)| FromAgent::TraceChunk {
            id,
            data,
            last
        }),
        prop::collection::vec(switch_report(), 0..12)
            .prop_map(|reports| FromAgent::Switched { reports }),
        (
            gen(),
            any::<u32>(),
            any::<u64>(),
            any::<u64>(),
            any::<bool>(),
            any::<u64>()
        )
            .prop_map(
                |(gen, slot, drained_bytes, drain_us, timed_out, answer_us)| FromAgent::Frozen {
                    gen,
                    slot,
                    report: FreezeReport {
                        drained_bytes,
                        drain_us,
                        timed_out,
                        answer_us,
                    },
                }
            ),
        (gen(), job()).prop_map(|(gen, job)| FromAgent::Yielded { gen, job }),
        (gen(), any::<u32>(), any::<u64>()).prop_map(|(gen, slot, switch_us)| FromAgent::Running {
            gen,
            slot,
            switch_us
        }),
        (
            job(),
            prop::collection::vec((any::<u32>(), any::<u32>()), 0..5)
        )
            .prop_map(|(job, ranks)| FromAgent::RanksStarted { job, ranks }),
        (job(), text()).prop_map(|(job, reason)| FromAgent::StartFailed { job, reason }),
        (job(), any::<u32>(), stream(), bytes()).prop_map(|(job, rank, stream, data)| {
            FromAgent::RankOutput {
                job,
                rank,
                stream,
                data,
            }
        }),
        (job(), any::<u32>(), exit_status())
            .prop_map(|(job, rank, status)| FromAgent::RankExited { job, rank, status }),
        (any::<u64>(), any::<u64>())
            .prop_map(|(seq, mono_ns)| FromAgent::Heartbeat { seq, mono_ns }),
        text().prop_map(|message| FromAgent::Error { message }),
        (any::<u64>(), any::<u64>()).prop_map(|(seq, t1)| FromAgent::ClockProbe { seq, t1 }),
        clock_report().prop_map(|report| FromAgent::ClockStatus { report }),
    ]
}

fn clock_report() -> impl Strategy<Value = ClockReport> {
    (
        prop_oneof![Just(ClockSource::Gangd), Just(ClockSource::Realtime)],
        prop_oneof![
            Just(ClockState::Unsynchronised),
            Just(ClockState::Good),
            Just(ClockState::Stepped)
        ],
        any::<i64>(),
        any::<i64>(),
        any::<u64>(),
        any::<u32>(),
        any::<u64>(),
    )
        .prop_map(
            |(source, state, offset_ns, rate_ppb, error_bound_ns, samples, steps)| ClockReport {
                source,
                state,
                offset_ns,
                rate_ppb,
                error_bound_ns,
                samples,
                steps,
            },
        )
}

/// Any map, sound or not (the wire carries both; peers.rs checks).
fn job_map() -> impl Strategy<Value = JobMap> {
    let run = (
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
        any::<u16>(),
    )
        .prop_map(|(n, c, r, k, p)| NodeRun(n, c, r, k, p));
    (any::<u32>(), prop::collection::vec(run, 0..3)).prop_map(|(size, runs)| JobMap { size, runs })
}

/// Any directory message, sound or not (directory.rs checks).
fn node_directory() -> impl Strategy<Value = ToAgent> {
    let entry = (any::<u32>(), text(), text()).prop_map(|(id, n, a)| DirEntry(NodeId(id), n, a));
    (
        prop::option::of(any::<u32>()),
        any::<bool>(),
        prop::collection::vec(entry, 0..3),
    )
        .prop_map(|(you, reset, nodes)| ToAgent::NodeDirectory {
            you: you.map(NodeId),
            reset,
            nodes,
        })
}

fn to_agent() -> impl Strategy<Value = ToAgent> {
    let start = (
        job(),
        text(),
        any::<u32>(),
        strings(),
        env(),
        text(),
        any::<u32>(),
        any::<u32>(),
    )
        .prop_map(
            |(job, name, size, argv, env, cwd, uid, gid)| ToAgent::StartJob {
                job,
                name,
                size,
                argv,
                env,
                cwd,
                uid,
                gid,
                limits: JobLimits {
                    max_pids: Some(size as u64),
                    max_memory: None,
                },
            },
        );
    let pmi_start = (
        job(),
        text(),
        env(),
        any::<u32>(),
        any::<u32>(),
        any::<u16>(),
    )
        .prop_map(
            |(job, kvsname, preset, size, node, port)| ToAgent::PmiStart {
                job,
                kvsname,
                preset,
                map: JobMap {
                    size,
                    runs: vec![NodeRun(node, 1, 0, size, port)],
                },
            },
        );
    let barrier = prop_oneof![Just(Barrier::Strict), Just(Barrier::Off)];
    prop_oneof![
        any::<u32>().prop_map(|n| ToAgent::Welcome { node_id: NodeId(n) }),
        text().prop_map(|reason| ToAgent::Refused { reason }),
        prop::collection::vec(prop::collection::vec(placement(), 0..3), 0..4)
            .prop_map(|slots| ToAgent::Schedule { slots }),
        (gen(), any::<u32>(), any::<u32>(), any::<u32>()).prop_map(
            |(gen, from_slot, to_slot, drain_timeout_ms)| {
                ToAgent::Freeze {
                    gen,
                    from_slot,
                    to_slot,
                    drain_timeout_ms,
                }
            }
        ),
        (gen(), any::<u32>(), any::<u32>()).prop_map(|(gen, slot, slot_ms)| ToAgent::Switch {
            gen,
            slot,
            slot_ms
        }),
        start,
        pmi_start,
        (job(), any::<i32>()).prop_map(|(job, signal)| ToAgent::KillJob { job, signal }),
        job().prop_map(|job| ToAgent::SuspendJob { job }),
        job().prop_map(|job| ToAgent::ResumeJob { job }),
        (
            any::<u32>(),
            any::<u32>(),
            barrier,
            any::<bool>(),
            prop_oneof![Just(ClockSource::Gangd), Just(ClockSource::Realtime)],
            any::<u32>()
        )
            .prop_map(
                |(slot_ms, drain_timeout_ms, barrier, fill, clock, clock_error_us)| {
                    ToAgent::Knobs {
                        slot_ms,
                        drain_timeout_ms,
                        barrier,
                        fill,
                        clock,
                        clock_error_us,
                    }
                }
            ),
        (any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>())
            .prop_map(|(seq, t1, t2, t3)| ToAgent::ClockEcho { seq, t1, t2, t3 }),
        any::<u64>().prop_map(|seq| ToAgent::Heartbeat { seq }),
        (any::<u64>(), any::<u64>()).prop_map(|(id, ms)| ToAgent::Trace { id, ms }),
        (job(), job_map()).prop_map(|(job, map)| ToAgent::JobPeers { job, map }),
        node_directory(),
        (job(), strings(), env(), text(), any::<u32>(), any::<u32>()).prop_map(
            |(job, argv, env, cwd, uid, gid)| ToAgent::Prepare {
                job,
                argv,
                env,
                cwd,
                uid,
                gid
            }
        ),
    ]
}

fn live_job() -> impl Strategy<Value = LiveJob> {
    (
        job(),
        text(),
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
        prop::collection::vec(any::<u32>(), 0..4),
    )
        .prop_map(|(job, name, size, uid, gid, ranks)| LiveJob {
            job,
            name,
            size,
            uid,
            gid,
            ranks,
        })
}

fn from_client() -> impl Strategy<Value = FromClient> {
    prop_oneof![
        (
            text(),
            any::<u32>(),
            any::<Option<u32>>(),
            strings(),
            env(),
            text(),
            any::<bool>(),
            any::<bool>()
        )
            .prop_map(
                |(name, ranks, per_node, argv, env, cwd, label_output, ship_executable)| {
                    FromClient::Submit {
                        name,
                        ranks,
                        per_node,
                        argv,
                        env,
                        cwd,
                        label_output,
                        ship_executable,
                        limits: JobLimits::default(),
                    }
                }
            ),
        (job(), any::<i32>()).prop_map(|(job, signal)| FromClient::Signal { job, signal }),
        job().prop_map(|job| FromClient::Kill { job }),
        job().prop_map(|job| FromClient::Suspend { job }),
        job().prop_map(|job| FromClient::Resume { job }),
        job().prop_map(|job| FromClient::Attach { job }),
        any::<u64>().prop_map(|ms| FromClient::Trace { ms }),
        Just(FromClient::Ps),
        Just(FromClient::Matrix),
    ]
}

fn job_info() -> impl Strategy<Value = JobInfo> {
    let state = prop_oneof![
        Just(JobState::Queued),
        Just(JobState::Running),
        Just(JobState::Suspended)
    ];
    (
        job(),
        text(),
        any::<u32>(),
        any::<u32>(),
        state,
        any::<Option<u32>>(),
        strings(),
        any::<u64>(),
    )
        .prop_map(
            |(job, name, uid, ranks, state, slot, nodes, elapsed_ms)| JobInfo {
                job,
                name,
                uid,
                ranks,
                state,
                slot,
                nodes,
                elapsed_ms,
            },
        )
}

fn to_client() -> impl Strategy<Value = ToClient> {
    let failure = (any::<u32>(), text(), exit_status())
        .prop_map(|(rank, node, status)| RankFailure { rank, node, status });
    prop_oneof![
        job().prop_map(|job| ToClient::Accepted { job }),
        text().prop_map(|reason| ToClient::Refused { reason }),
        Just(ToClient::Done),
        (job(), any::<u32>(), stream(), bytes()).prop_map(|(job, rank, stream, data)| {
            ToClient::Output {
                job,
                rank,
                stream,
                data,
            }
        }),
        (job(), any::<i32>(), text(), proptest::option::of(failure)).prop_map(
            |(job, exit_code, summary, failure)| ToClient::JobEnded {
                job,
                exit_code,
                summary,
                failure
            }
        ),
        prop::collection::vec(job_info(), 0..3).prop_map(|jobs| ToClient::PsReply { jobs }),
        text().prop_map(|text| ToClient::MatrixReply { text }),
        (text(), any::<i64>(), bytes(), any::<bool>()).prop_map(|(node, offset_ns, data, last)| {
            ToClient::TraceData {
                node,
                offset_ns,
                data,
                last,
            }
        }),
        strings().prop_map(|errors| ToClient::TraceEnd { errors }),
    ]
}

// --- helpers ---

fn round_trip<M: Message + PartialEq + std::fmt::Debug>(msg: &M) {
    let frame = encode(msg).unwrap();
    let mut reader = Cursor::new(&frame);
    assert_eq!(read_frame::<M>(&mut reader).unwrap().as_ref(), Some(msg));
    assert_eq!(
        read_frame::<M>(&mut reader).unwrap(),
        None,
        "clean end after the frame"
    );
    let mut decoder = FrameDecoder::<M>::new();
    assert_eq!(&decoder.feed(&frame).unwrap(), std::slice::from_ref(msg));
    assert_eq!(decoder.buffered(), 0);
    decoder.finish().unwrap();
}

/// Splits `bytes` at the given cut points and feeds the pieces one by one.
fn feed_in_chunks<M: Message>(bytes: &[u8], cuts: &[Index]) -> Result<Vec<M>, FrameError> {
    let mut at: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
    at.push(0);
    at.push(bytes.len());
    at.sort_unstable();
    let mut decoder = FrameDecoder::<M>::new();
    let mut out = Vec::new();
    for w in at.windows(2) {
        out.extend(decoder.feed(&bytes[w[0]..w[1]])?);
        assert!(decoder.buffered() <= HEADER_LEN + MAX_PAYLOAD);
    }
    decoder.finish()?;
    Ok(out)
}

fn header(version: u16, channel: u8, len: u32) -> Vec<u8> {
    let mut h = MAGIC.to_vec();
    h.extend_from_slice(&version.to_be_bytes());
    h.push(channel);
    h.extend_from_slice(&len.to_be_bytes());
    h
}

fn frame_of(channel: Channel, payload: &[u8]) -> Vec<u8> {
    let mut f = header(PROTOCOL_VERSION, channel as u8, payload.len() as u32);
    f.extend_from_slice(payload);
    f
}

/// Both decoders must give the same error for the same bytes.
fn both_fail<M: Message + std::fmt::Debug>(bytes: &[u8]) -> FrameError {
    let blocking = read_frame::<M>(&mut Cursor::new(bytes)).unwrap_err();
    let mut decoder = FrameDecoder::<M>::new();
    let incremental = match decoder.feed(bytes) {
        Err(e) => e,
        Ok(msgs) => {
            assert!(msgs.is_empty(), "{msgs:?}");
            decoder.finish().unwrap_err()
        }
    };
    assert_eq!(blocking, incremental);
    blocking
}

/// A reader that counts what was taken from it and never ends: a decoder
/// that trusted a length field would read (and store) on and on.
struct Endless {
    prefix: Vec<u8>,
    read: usize,
}

impl Read for Endless {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        for b in buf.iter_mut() {
            *b = self.prefix.get(self.read).copied().unwrap_or(b'x');
            self.read += 1;
        }
        Ok(buf.len())
    }
}

// --- examples ---

#[test]
fn every_message_type_has_a_sample_and_round_trips() {
    fn check<M: Message + PartialEq + std::fmt::Debug>(samples: &[M]) {
        let mut seen = BTreeSet::new();
        for m in samples {
            round_trip(m);
            let json: serde_json::Value = serde_json::to_value(m).unwrap();
            seen.insert(json["type"].as_str().unwrap().to_string());
        }
        let declared: BTreeSet<String> = M::TYPES.iter().map(|s| s.to_string()).collect();
        assert_eq!(seen, declared, "TYPES must list exactly the variants");
    }
    let job = JobId(7);
    let gen = Gen(9);
    check(&[
        FromAgent::Hello {
            nr_cpus: 64,
            housekeeping_cpus: "0".into(),
            agent_version: "0.1.0".into(),
            jobs: vec![LiveJob {
                job,
                name: "lu".into(),
                size: 4,
                uid: 1000,
                gid: 1000,
                ranks: vec![0, 1],
            }],
            schedule: vec![vec![Placement {
                job,
                cpus: "0-1".into(),
            }]],
        },
        FromAgent::Prepared {
            job,
            error: Some("/bin/nope: no such file".into()),
        },
        FromAgent::TraceChunk {
            id: 1,
            data: b"{}".as_slice().into(),
            last: true,
        },
        FromAgent::Frozen {
            gen,
            slot: 0,
            report: FreezeReport {
                drained_bytes: 4096,
                drain_us: 120,
                timed_out: false,
                answer_us: 300,
            },
        },
        FromAgent::Running {
            gen,
            slot: 1,
            switch_us: 40,
        },
        FromAgent::RanksStarted {
            job,
            ranks: vec![(3, 4242), (4, 4243)],
        },
        FromAgent::StartFailed {
            job,
            reason: "no peer table for job 7".into(),
        },
        FromAgent::RankOutput {
            job,
            rank: 3,
            stream: Stream::Stdout,
            data: b"\x00\xff\n".as_slice().into(),
        },
        FromAgent::RankExited {
            job,
            rank: 3,
            status: ExitStatus::Exited(0),
        },
        FromAgent::Heartbeat {
            seq: 1,
            mono_ns: 123,
        },
        FromAgent::Error {
            message: "no such gang".into(),
        },
        FromAgent::Yielded { gen, job },
        FromAgent::ClockProbe { seq: 4, t1: 99 },
        FromAgent::ClockStatus {
            report: ClockReport {
                source: ClockSource::Gangd,
                state: ClockState::Stepped,
                offset_ns: -42,
                rate_ppb: 3_000,
                error_bound_ns: 120_000,
                samples: 5,
                steps: 2,
            },
        },
        FromAgent::PmiBarrierIn {
            job,
            epoch: 0,
            ranks: vec![0, 1],
            puts: vec![PmiPut {
                rank: 1,
                key: "P1-businesscard".into(),
                value: "port#1$".into(),
            }],
        },
        FromAgent::PmiFinalized { job, rank: 1 },
        FromAgent::PmiFailed {
            job,
            rank: 0,
            exitcode: Some(3),
            reason: "rank 0 called PMI_Abort(3)".into(),
        },
        FromAgent::PmiPuts { job, puts: vec![] },
        FromAgent::PlanAck { plan_id: 3 },
        FromAgent::Switched {
            reports: vec![
                SwitchReport {
                    gen,
                    slot: 1,
                    at_ns: 5_000_000_000,
                    late_us: 120,
                    outcome: SwitchOutcome::Late,
                    drain: Some(FreezeReport {
                        drained_bytes: 4096,
                        drain_us: 900,
                        timed_out: false,
                        answer_us: 950,
                    }),
                    parked_us: 3_100,
                    park_late_us: 40,
                    lead_us: 2_500,
                },
                SwitchReport {
                    gen: Gen(gen.0 + 1),
                    slot: 0,
                    at_ns: 5_100_000_000,
                    late_us: 0,
                    outcome: SwitchOutcome::OnTime,
                    drain: None,
                    parked_us: 0,
                    park_late_us: 0,
                    lead_us: 0,
                },
            ],
        },
    ]);
    check(&[
        ToAgent::Welcome { node_id: NodeId(2) },
        ToAgent::Refused {
            reason: "expected hello".into(),
        },
        ToAgent::Schedule {
            slots: vec![
                vec![Placement {
                    job,
                    cpus: "0-3".into(),
                }],
                vec![],
            ],
        },
        ToAgent::Freeze {
            gen,
            from_slot: 0,
            to_slot: 1,
            drain_timeout_ms: 50,
        },
        ToAgent::Switch {
            gen,
            slot: 1,
            slot_ms: 50,
        },
        ToAgent::Prepare {
            job,
            argv: vec!["./lu".into()],
            env: vec![],
            cwd: "/home/u".into(),
            uid: 1000,
            gid: 1000,
        },
        ToAgent::NodeDirectory {
            you: Some(NodeId(1)),
            reset: true,
            nodes: vec![DirEntry(NodeId(0), "n0".into(), "10.0.0.1".into())],
        },
        ToAgent::JobPeers {
            job,
            map: JobMap {
                size: 4,
                runs: vec![NodeRun(0, 2, 0, 2, 20000)],
            },
        },
        ToAgent::StartJob {
            job,
            name: "lu".into(),
            size: 4,
            argv: vec!["./lu".into(), "-n".into()],
            env: vec![("OMP_NUM_THREADS".into(), "1".into())],
            cwd: "/home/u".into(),
            uid: 1000,
            gid: 1000,
            limits: JobLimits {
                max_pids: Some(512),
                max_memory: None,
            },
        },
        ToAgent::KillJob { job, signal: 9 },
        ToAgent::SuspendJob { job },
        ToAgent::ResumeJob { job },
        ToAgent::Knobs {
            slot_ms: 100,
            drain_timeout_ms: 50,
            barrier: Barrier::Strict,
            fill: true,
            clock: ClockSource::Realtime,
            clock_error_us: 20,
        },
        ToAgent::ClockEcho {
            seq: 3,
            t1: 10,
            t2: 2_000,
            t3: 2_050,
        },
        ToAgent::Heartbeat { seq: 2 },
        ToAgent::Trace { id: 1, ms: 2000 },
        ToAgent::PmiStart {
            job,
            kvsname: "kvs_7_0".into(),
            preset: vec![("PMI_process_mapping".into(), "(vector,(0,2,2))".into())],
            map: JobMap {
                size: 4,
                runs: vec![NodeRun(0, 2, 0, 2, 20000)],
            },
        },
        ToAgent::PmiBarrierOut {
            job,
            epoch: 0,
            entries: vec![("P1-businesscard".into(), "port#1$".into())],
        },
        ToAgent::PmiEntries {
            job,
            entries: vec![],
        },
        ToAgent::Plan {
            plan: gang_wire::plan::Plan {
                id: 3,
                epoch_ns: 4_000_000_000,
                slot_ms: 100,
                slots: vec![
                    gang_wire::plan::PlannedSlot { slot: 0 },
                    gang_wire::plan::PlannedSlot { slot: 1 },
                ],
                first_gen: gen,
            },
            effective_ns: 4_000_000_000,
        },
        ToAgent::Amend {
            amend: gang_wire::plan::Amend {
                plan_id: 3,
                gen,
                ends_at_ns: 4_050_000_000,
            },
        },
    ]);
    check(&[
        FromClient::Submit {
            name: "lu".into(),
            ranks: 4,
            per_node: Some(2),
            argv: vec!["./lu".into()],
            env: vec![],
            cwd: "/".into(),
            label_output: true,
            ship_executable: false,
            limits: JobLimits {
                max_pids: None,
                max_memory: Some(1 << 30),
            },
        },
        FromClient::Signal { job, signal: 2 },
        FromClient::Kill { job },
        FromClient::Suspend { job },
        FromClient::Resume { job },
        FromClient::Attach { job },
        FromClient::Trace { ms: 1500 },
        FromClient::Ps,
        FromClient::Matrix,
    ]);
    check(&[
        ToClient::Accepted { job },
        ToClient::Refused {
            reason: "no room".into(),
        },
        ToClient::Done,
        ToClient::Output {
            job,
            rank: 0,
            stream: Stream::Stderr,
            data: b"oops\n".as_slice().into(),
        },
        ToClient::JobEnded {
            job,
            exit_code: 137,
            summary: "rank 2 killed by signal 9".into(),
            failure: Some(RankFailure {
                rank: 2,
                node: "n2".into(),
                status: ExitStatus::Signaled(9),
            }),
        },
        ToClient::PsReply {
            jobs: vec![JobInfo {
                job,
                name: "lu".into(),
                uid: 1000,
                ranks: 4,
                state: JobState::Running,
                slot: Some(0),
                nodes: vec!["n1".into(), "n2".into()],
                elapsed_ms: 1500,
            }],
        },
        ToClient::MatrixReply {
            text: "slot 0: lu lu\n".into(),
        },
        ToClient::TraceData {
            node: "n1".into(),
            offset_ns: -42,
            data: b"{}".as_slice().into(),
            last: true,
        },
        ToClient::TraceEnd { errors: vec![] },
    ]);
}

#[test]
fn a_full_output_chunk_of_any_bytes_fits_in_a_frame() {
    // Every byte value, repeated: base64 does not depend on content, but a
    // regression to escaped strings would.
    let data: Vec<u8> = (0..MAX_OUTPUT_CHUNK).map(|i| i as u8).collect();
    let msg = FromAgent::RankOutput {
        job: JobId(u64::MAX),
        rank: u32::MAX,
        stream: Stream::Stderr,
        data: Bytes(data),
    };
    round_trip(&msg);
    let to_user = ToClient::Output {
        job: JobId(u64::MAX),
        rank: u32::MAX,
        stream: Stream::Stderr,
        data: Bytes(vec![0xff; MAX_OUTPUT_CHUNK]),
    };
    round_trip(&to_user);
}

#[test]
fn a_message_too_large_for_a_frame_is_refused_when_sent() {
    let msg = ToClient::MatrixReply {
        text: "x".repeat(MAX_PAYLOAD),
    };
    match encode(&msg) {
        Err(FrameError::Oversized { len, limit }) => {
            assert!(len > MAX_PAYLOAD);
            assert_eq!(limit, MAX_PAYLOAD);
        }
        other => panic!("{other:?}"),
    }
    let mut sink = Vec::new();
    assert!(write_frame(&mut sink, &msg).is_err());
    assert!(sink.is_empty(), "nothing half-written");
}

// --- every error, from both decoders ---

#[test]
fn bad_magic() {
    let mut f = encode(&FromClient::Ps).unwrap();
    f[0..4].copy_from_slice(b"GET ");
    assert_eq!(both_fail::<FromClient>(&f), FrameError::BadMagic(*b"GET "));
}

#[test]
fn unsupported_version() {
    let mut f = header(PROTOCOL_VERSION + 1, Channel::FromClient as u8, 2);
    f.extend_from_slice(b"{}");
    assert_eq!(
        both_fail::<FromClient>(&f),
        FrameError::UnsupportedVersion {
            got: PROTOCOL_VERSION + 1,
            supported: PROTOCOL_VERSION
        }
    );
    // Version 4 (reports as objects): refused, the error naming both
    // versions and what to do.
    assert_eq!(PROTOCOL_VERSION, 5);
    let mut f = header(4, Channel::ToAgent as u8, 2);
    f.extend_from_slice(b"{}");
    let e = both_fail::<ToAgent>(&f);
    assert_eq!(
        e.to_string(),
        "protocol version 4 not supported (this side speaks 5): gangd and every node agent must run the same protocol version; upgrade them together"
    );
}

#[test]
fn wrong_channel() {
    let f = encode(&FromClient::Ps).unwrap();
    assert_eq!(
        both_fail::<FromAgent>(&f),
        FrameError::WrongChannel {
            got: Channel::FromClient as u8,
            expected: Channel::FromAgent as u8
        }
    );
}

#[test]
fn oversized_length_is_refused_before_reading_the_payload() {
    for len in [MAX_PAYLOAD as u32 + 1, u32::MAX] {
        let h = header(PROTOCOL_VERSION, Channel::FromAgent as u8, len);
        let expected = FrameError::Oversized {
            len: len as usize,
            limit: MAX_PAYLOAD,
        };
        let mut endless = Endless {
            prefix: h.clone(),
            read: 0,
        };
        assert_eq!(read_frame::<FromAgent>(&mut endless).unwrap_err(), expected);
        assert_eq!(endless.read, HEADER_LEN, "not one payload byte read");

        let mut decoder = FrameDecoder::<FromAgent>::new();
        let mut stream = h.clone();
        stream.extend(std::iter::repeat_n(b'x', 4096));
        assert_eq!(decoder.feed(&stream).unwrap_err(), expected);
        assert_eq!(decoder.buffered(), HEADER_LEN, "the payload is not stored");
    }
}

#[test]
fn the_largest_allowed_payload_is_accepted() {
    let mut payload = br#"{"type":"error","message":""#.to_vec();
    let pad = MAX_PAYLOAD - payload.len() - 2;
    payload.extend(std::iter::repeat_n(b'e', pad));
    payload.extend_from_slice(br#""}"#);
    assert_eq!(payload.len(), MAX_PAYLOAD);
    let f = frame_of(Channel::FromAgent, &payload);
    let msg = read_frame::<FromAgent>(&mut Cursor::new(&f))
        .unwrap()
        .unwrap();
    assert!(matches!(msg, FromAgent::Error { message } if message.len() == pad));
}

#[test]
fn truncated_header_and_payload() {
    let f = encode(&FromAgent::Heartbeat { seq: 5, mono_ns: 0 }).unwrap();
    for cut in 1..f.len() {
        let err = both_fail::<FromAgent>(&f[..cut]);
        let needed = if cut < HEADER_LEN {
            HEADER_LEN
        } else {
            f.len()
        };
        assert_eq!(
            err,
            FrameError::Truncated { needed, got: cut },
            "cut at {cut}"
        );
    }
}

#[test]
fn garbage_json_is_malformed() {
    for payload in [
        &b"{not json"[..],
        b"",
        b"[1,2]",
        b"\xff\xfe",
        br#"{"type":"heartbeat","seq":"x"}"#,
        br#"{"seq":1}"#,
    ] {
        let err = both_fail::<FromAgent>(&frame_of(Channel::FromAgent, payload));
        assert!(
            matches!(err, FrameError::Malformed(_)),
            "{payload:?}: {err:?}"
        );
    }
}

#[test]
fn unknown_tag_is_an_unknown_message_type() {
    let f = frame_of(Channel::FromAgent, br#"{"type":"reboot","now":true}"#);
    assert_eq!(
        both_fail::<FromAgent>(&f),
        FrameError::UnknownMessageType("reboot".into())
    );
    // A tag of another direction is unknown on this one.
    let f = frame_of(Channel::FromAgent, br#"{"type":"switch","gen":1,"slot":0}"#);
    assert_eq!(
        both_fail::<FromAgent>(&f),
        FrameError::UnknownMessageType("switch".into())
    );
}

#[test]
fn io_errors_keep_their_kind() {
    struct TimesOut;
    impl Read for TimesOut {
        fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
            Err(io::Error::new(io::ErrorKind::TimedOut, "read timed out"))
        }
    }
    match read_frame::<FromAgent>(&mut TimesOut) {
        Err(FrameError::Io {
            kind: io::ErrorKind::TimedOut,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn switched_with_its_tag_elsewhere_or_twice_goes_the_generic_way() {
    let report = r#"[7,1,5,0,"on_time",null,0,0,0]"#;
    // The tag first, as the encoder writes it: the fast path.
    let first = format!(r#"{{"type":"switched","reports":[{report}],"later":1}}"#);
    let fast = FromAgent::decode_fast(first.as_bytes()).expect("the fast path");
    assert_eq!(fast, serde_json::from_str::<FromAgent>(&first).unwrap());
    // The tag last: the generic path, same message.
    let last = format!(r#"{{"reports":[{report}],"type":"switched"}}"#);
    assert_eq!(FromAgent::decode_fast(last.as_bytes()), None);
    assert_eq!(serde_json::from_str::<FromAgent>(&last).unwrap(), fast);
    // A second tag or a second list: not the fast path's to decide.
    for twice in [
        format!(r#"{{"type":"switched","type":"clock_probe","reports":[{report}]}}"#),
        format!(r#"{{"type":"switched","reports":[],"reports":[{report}]}}"#),
    ] {
        assert_eq!(FromAgent::decode_fast(twice.as_bytes()), None, "{twice}");
    }
    // Another message's tag: never the fast path.
    assert_eq!(
        FromAgent::decode_fast(br#"{"type":"clock_probe","seq":1,"t1":2}"#),
        None
    );
}

/// A report is an array on the wire (protocol 5): every element in its
/// place, the drain an array or null; an object (protocol 4's form), a
/// missing or an extra element is refused, by both paths.
#[test]
fn a_switch_report_is_an_array_of_its_fields_in_order() {
    let report = SwitchReport {
        gen: Gen(7),
        slot: 1,
        at_ns: 5_000,
        late_us: 3,
        outcome: SwitchOutcome::Late,
        drain: Some(FreezeReport {
            drained_bytes: 4096,
            drain_us: 900,
            timed_out: true,
            answer_us: 950,
        }),
        parked_us: 10,
        park_late_us: 20,
        lead_us: 30,
    };
    assert_eq!(
        serde_json::to_string(&report).unwrap(),
        r#"[7,1,5000,3,"late",[4096,900,true,950],10,20,30]"#
    );
    for bad in [
        r#"{"gen":7,"slot":1,"at_ns":5,"late_us":0,"outcome":"on_time","drain":null,"parked_us":0,"park_late_us":0,"lead_us":0}"#,
        r#"[7,1,5,0,"on_time",null,0,0]"#,
        r#"[7,1,5,0,"on_time",null,0,0,0,0]"#,
        r#"[7,1,5,0,"on_time",[1,2,false],0,0,0]"#,
        r#"[7,1,5,0,"sideways",null,0,0,0]"#,
    ] {
        let msg = format!(r#"{{"type":"switched","reports":[{bad}]}}"#);
        assert_eq!(FromAgent::decode_fast(msg.as_bytes()), None, "{bad}");
        assert!(serde_json::from_str::<FromAgent>(&msg).is_err(), "{bad}");
    }
}

// --- properties ---

proptest! {
    #[test]
    fn from_agent_round_trips(msg in from_agent()) { round_trip(&msg); }

    #[test]
    fn to_agent_round_trips(msg in to_agent()) { round_trip(&msg); }

    /// A Switched decodes the same by its fast path as by serde's generic
    /// one, and any edit of its payload (keys reordered, repeated, cut,
    /// bytes changed) that the fast path takes, the generic one takes the
    /// same way: the fast path never says more than the generic one.
    #[test]
    fn switched_decodes_the_same_by_the_fast_path(
        reports in prop::collection::vec(switch_report(), 0..40),
        edits in prop::collection::vec((any::<Index>(), any::<u8>()), 0..4),
        cut in proptest::option::of(any::<Index>()),
    ) {
        let msg = FromAgent::Switched { reports };
        let payload = serde_json::to_vec(&msg).unwrap();
        prop_assert_eq!(FromAgent::decode_fast(&payload), Some(msg.clone()));
        let mut edited = payload.clone();
        for (at, byte) in edits {
            let i = at.index(edited.len());
            edited[i] = byte;
        }
        if let Some(c) = cut {
            edited.truncate(c.index(edited.len() + 1));
        }
        if let Some(fast) = FromAgent::decode_fast(&edited) {
            let generic: FromAgent = serde_json::from_slice(&edited).unwrap();
            prop_assert_eq!(fast, generic);
        }
    }

    #[test]
    fn from_client_round_trips(msg in from_client()) { round_trip(&msg); }

    #[test]
    fn to_client_round_trips(msg in to_client()) { round_trip(&msg); }

    /// Any split of a stream of frames decodes to the same messages as the
    /// blocking reader does.
    #[test]
    fn chunking_does_not_matter(
        msgs in prop::collection::vec(from_agent(), 0..8),
        cuts in prop::collection::vec(any::<Index>(), 0..40),
    ) {
        let stream: Vec<u8> = msgs.iter().flat_map(|m| encode(m).unwrap()).collect();
        prop_assert_eq!(&feed_in_chunks::<FromAgent>(&stream, &cuts).unwrap(), &msgs);
        let mut reader = Cursor::new(&stream);
        let mut read = Vec::new();
        while let Some(m) = read_frame::<FromAgent>(&mut reader).unwrap() {
            read.push(m);
        }
        prop_assert_eq!(read, msgs);
    }

    /// Arbitrary bytes, alone or behind a valid header with any length:
    /// an error or messages, never a panic, never more than one frame held.
    #[test]
    fn the_decoder_survives_arbitrary_bytes(
        garbage in prop::collection::vec(any::<u8>(), 0..2048),
        len in any::<u32>(),
        with_header in any::<bool>(),
        cuts in prop::collection::vec(any::<Index>(), 0..16),
    ) {
        let mut stream = if with_header { header(PROTOCOL_VERSION, Channel::ToAgent as u8, len) } else { vec![] };
        stream.extend_from_slice(&garbage);
        let _ = feed_in_chunks::<ToAgent>(&stream, &cuts);
        let _ = read_frame::<ToAgent>(&mut Cursor::new(&stream));
    }

    /// A valid frame with corrupted bytes: the error is one of the framing
    /// errors and the decoders agree on it.
    #[test]
    fn corrupted_frames_are_refused_cleanly(msg in to_client(), at in any::<Index>(), byte in any::<u8>()) {
        let mut f = encode(&msg).unwrap();
        let i = at.index(f.len());
        f[i] = byte;
        let blocking = read_frame::<ToClient>(&mut Cursor::new(&f));
        let incremental = feed_in_chunks::<ToClient>(&f, &[]);
        match (blocking, incremental) {
            (Ok(Some(a)), Ok(b)) => prop_assert_eq!(vec![a], b),
            (Err(a), Err(b)) => prop_assert_eq!(a, b),
            // A shortened length field leaves bytes after the frame: the
            // blocking reader stops after one frame, the decoder reads on.
            (Ok(Some(_)), Err(_)) if (7..HEADER_LEN).contains(&i) => {}
            (a, b) => prop_assert!(false, "disagree: {a:?} vs {b:?}"),
        }
    }
}

#[test]
fn only_the_frame_in_progress_is_held() {
    // One big call carrying a whole frame and most of the next: the first is
    // decoded at once, and only the second's bytes stay.
    let big = FromAgent::Error {
        message: "m".repeat(900_000),
    };
    let mut stream = encode(&big).unwrap();
    stream.extend(header(
        PROTOCOL_VERSION,
        Channel::FromAgent as u8,
        MAX_PAYLOAD as u32,
    ));
    stream.extend(std::iter::repeat_n(b' ', 500_000));
    let mut decoder = FrameDecoder::<FromAgent>::new();
    assert_eq!(decoder.feed(&stream).unwrap(), vec![big]);
    assert_eq!(decoder.buffered(), HEADER_LEN + 500_000);
    assert_eq!(
        decoder.finish().unwrap_err(),
        FrameError::Truncated {
            needed: HEADER_LEN + MAX_PAYLOAD,
            got: HEADER_LEN + 500_000
        }
    );
}

#[test]
fn sizes_take_binary_suffixes_and_refuse_nonsense() {
    assert_eq!(parse_size("4096"), Ok(4096));
    assert_eq!(parse_size("2K"), Ok(2048));
    assert_eq!(parse_size("3m"), Ok(3 << 20));
    assert_eq!(parse_size(" 1G "), Ok(1 << 30));
    assert_eq!(parse_size("2T"), Ok(2 << 40));
    for bad in ["", "G", "1X", "-1", "1.5G", "0", "99999999999T"] {
        assert!(parse_size(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn job_limits_beyond_the_clusters_maximum_are_named() {
    let max = JobLimits {
        max_pids: Some(100),
        max_memory: Some(1 << 30),
    };
    let ask = |p, m| JobLimits {
        max_pids: p,
        max_memory: m,
    };
    assert_eq!(ask(None, None).beyond(&max), None);
    assert_eq!(ask(Some(100), Some(1 << 30)).beyond(&max), None);
    assert_eq!(
        ask(Some(101), None).beyond(&max).unwrap(),
        "--max-pids 101 is more than the cluster allows (100)"
    );
    assert!(ask(None, Some(2 << 30))
        .beyond(&max)
        .unwrap()
        .starts_with("--max-memory 2147483648 bytes is more"));
    assert_eq!(ask(Some(1 << 40), None).beyond(&JobLimits::default()), None);
}

/// Protocol 3: a job starts with one message per node, the same for every
/// node (StartJob, no rank in it), answered once per node; the old
/// per-rank messages and PmiStart's per-node fields are unknown or
/// malformed now, each a clear error.
#[test]
fn a_job_starts_with_one_message_per_node_and_the_per_rank_ones_are_gone() {
    let start = ToAgent::StartJob {
        job: JobId(3),
        name: "lu".into(),
        size: 2,
        argv: vec!["./lu".into()],
        env: vec![],
        cwd: "/".into(),
        uid: 1000,
        gid: 1000,
        limits: JobLimits::default(),
    };
    assert_eq!(
        serde_json::to_string(&start).unwrap(),
        r#"{"type":"start_job","job":3,"name":"lu","size":2,"argv":["./lu"],"env":[],"cwd":"/","uid":1000,"gid":1000,"limits":{}}"#
    );
    let started = FromAgent::RanksStarted {
        job: JobId(3),
        ranks: vec![(0, 100), (1, 101)],
    };
    assert_eq!(
        serde_json::to_string(&started).unwrap(),
        r#"{"type":"ranks_started","job":3,"ranks":[[0,100],[1,101]]}"#
    );
    let old_spawn = r#"{"type":"spawn_rank","job":3,"name":"lu","rank":1,"size":2,"argv":["./lu"],
        "env":[],"cwd":"/","uid":1000,"gid":1000,"peers":["n1:7000","n2:7000"]}"#;
    let e = serde_json::from_str::<ToAgent>(old_spawn).unwrap_err();
    assert!(
        e.to_string().contains("unknown variant `spawn_rank`"),
        "{e}"
    );
    let old_started = r#"{"type":"rank_started","job":3,"rank":1,"pid":5}"#;
    let e = serde_json::from_str::<FromAgent>(old_started).unwrap_err();
    assert!(
        e.to_string().contains("unknown variant `rank_started`"),
        "{e}"
    );
    // A version 2 PmiStart: its per-node layout, no map.
    let old_pmi = r#"{"type":"pmi_start","job":3,"kvsname":"k","size":2,"ranks":[0],
        "preset":[],"layout":[["n1",[0]],["n2",[1]]]}"#;
    let e = serde_json::from_str::<ToAgent>(old_pmi).unwrap_err();
    assert!(e.to_string().contains("missing field `map`"), "{e}");
    // A StartJob missing a field, or with a negative size, is refused.
    for bad in [
        r#"{"type":"start_job","job":3,"name":"lu","size":2,"argv":[],"env":[],"cwd":"/","uid":1,"gid":1}"#,
        r#"{"type":"start_job","job":3,"name":"lu","size":-2,"argv":[],"env":[],"cwd":"/","uid":1,"gid":1,"limits":{}}"#,
    ] {
        assert!(serde_json::from_str::<ToAgent>(bad).is_err(), "{bad}");
    }
}
