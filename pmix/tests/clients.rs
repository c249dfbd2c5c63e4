//! The PMIx server against real PMIx clients (tests/clients/client.c,
//! linked with Debian's libpmix), all on this host as one node.
mod common;

use std::time::Duration;

use common::{
    as_user, assert_all_ok, assert_said, build, fixture, have, one_node, pmix_flags, run_ranks,
    Event, NOBODY,
};
use gang_pmix::{Proc, Server};

const LIMIT: Duration = Duration::from_secs(60);

fn client() -> std::path::PathBuf {
    build("client.c", "cc", &pmix_flags())
}

#[test]
fn ranks_put_fence_with_collection_and_get_each_others_keys() {
    if !have(false) {
        return;
    }
    let f = fixture();
    for size in [2u32, 3] {
        let ns = format!("put{size}");
        f.server.register_job(&one_node(&ns, size)).unwrap();
        let ranks: Vec<u32> = (0..size).collect();
        let outs = run_ranks(&f.server, &ns, &ranks, &client(), &["put"], &[], LIMIT);
        assert_all_ok(&outs);
        assert_said(&outs, &ranks, &format!("ok {ns}:{{r}}"));
        let ev = f.host.events_of(&ns);
        for r in 0..size {
            let p = Proc {
                nspace: ns.clone(),
                rank: Some(r),
            };
            assert!(
                ev.contains(&Event::Connected(p.clone())),
                "rank {r} connected: {ev:?}"
            );
            assert!(
                ev.contains(&Event::Finalized(p)),
                "rank {r} finalized: {ev:?}"
            );
        }
        // Every participant is on this node: libpmix completes the fence
        // itself, the host (and so gangd) is not asked.
        assert!(
            !ev.iter().any(|e| matches!(e, Event::Fence { .. })),
            "{ev:?}"
        );
        f.server.deregister_job(&ns);
    }
}

#[test]
fn two_namespaces_run_at_once_without_mixing_their_keys() {
    if !have(false) {
        return;
    }
    let f = fixture();
    f.server.register_job(&one_node("twoA", 2)).unwrap();
    f.server.register_job(&one_node("twoB", 3)).unwrap();
    let exe = client();
    let a = std::thread::spawn({
        let exe = exe.clone();
        move || {
            run_ranks(
                &fixture().server,
                "twoA",
                &[0, 1],
                &exe,
                &["put"],
                &[],
                LIMIT,
            )
        }
    });
    let b = run_ranks(&f.server, "twoB", &[0, 1, 2], &exe, &["put"], &[], LIMIT);
    assert_all_ok(&a.join().unwrap());
    assert_all_ok(&b);
    f.server.deregister_job("twoA");
    f.server.deregister_job("twoB");
}

#[test]
fn an_abort_reaches_the_host_with_its_status() {
    if !have(false) {
        return;
    }
    let f = fixture();
    f.server.register_job(&one_node("abort", 2)).unwrap();
    let _ = run_ranks(
        &f.server,
        "abort",
        &[1],
        &client(),
        &["abort", "7"],
        &[],
        LIMIT,
    );
    let got = f.host.wait_for(
        Duration::from_secs(5),
        |e| matches!(e, Event::Abort { nspace, .. } if nspace == "abort"),
    );
    match got {
        Some(Event::Abort {
            rank, status, msg, ..
        }) => {
            assert_eq!((rank, status), (1, 7));
            assert_eq!(msg, "gang-pmix test abort");
        }
        other => panic!("no abort: {other:?}"),
    }
    f.server.deregister_job("abort");
}

#[test]
fn ranks_keep_their_keys_in_the_servers_hash_store() {
    if !have(false) {
        return;
    }
    let f = fixture();
    f.server.register_job(&one_node("gds", 1)).unwrap();
    let env = f.server.fork_env("gds", 0).unwrap();
    assert!(
        env.contains(&("PMIX_GDS_MODULE".to_string(), "hash".to_string())),
        "{env:?}"
    );
    f.server.deregister_job("gds");
}

#[test]
fn a_client_of_an_unregistered_namespace_is_refused() {
    if !have(false) {
        return;
    }
    let f = fixture();
    f.server.register_job(&one_node("known", 1)).unwrap();
    let env: Vec<(String, String)> = f
        .server
        .fork_env("known", 0)
        .unwrap()
        .into_iter()
        .map(|(k, v)| {
            if k == "PMIX_NAMESPACE" {
                (k, "unknown".to_string())
            } else {
                (k, v)
            }
        })
        .collect();
    let out = std::process::Command::new(client())
        .arg("init")
        .envs(env)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "PMIx_Init must fail: {out:?}");
    assert!(
        !f.host
            .events_of("unknown")
            .iter()
            .any(|e| matches!(e, Event::Connected(_))),
        "no connection of an unregistered namespace"
    );
    // A rank that is not local is refused too.
    f.server.deregister_job("known");
}

#[test]
fn publish_and_lookup_between_ranks() {
    if !have(false) {
        return;
    }
    let f = fixture();
    f.server.register_job(&one_node("pub", 2)).unwrap();
    let outs = run_ranks(
        &f.server,
        "pub",
        &[0, 1],
        &client(),
        &["publish"],
        &[],
        LIMIT,
    );
    assert_all_ok(&outs);
    f.server.deregister_job("pub");
}

#[test]
fn a_value_over_the_bound_is_refused_not_kept() {
    if !have(false) {
        return;
    }
    let f = fixture();
    f.server.register_job(&one_node("big", 1)).unwrap();
    let outs = run_ranks(&f.server, "big", &[0], &client(), &["big"], &[], LIMIT);
    assert_all_ok(&outs);
    f.server.deregister_job("big");
}

#[test]
fn a_fence_blob_over_the_bound_is_refused_before_the_host() {
    if !have(false) {
        return;
    }
    let f = fixture();
    // Rank 1 is on another node: the fence would go to the host.
    let mut spec = one_node("huge", 2);
    spec.nodes.push("elsewhere".into());
    spec.ranks_by_node = vec![vec![0], vec![1]];
    f.server.register_job(&spec).unwrap();
    let outs = run_ranks(&f.server, "huge", &[0], &client(), &["huge"], &[], LIMIT);
    assert_all_ok(&outs);
    let ev = f.host.events_of("huge");
    assert!(
        !ev.iter().any(|e| matches!(e, Event::Fence { .. })),
        "{ev:?}"
    );
    f.server.deregister_job("huge");
}

#[test]
fn a_second_server_in_the_process_is_an_error() {
    if !have(false) {
        return;
    }
    let f = fixture();
    let dir = std::env::temp_dir();
    let second = Server::start(&dir, f.host.clone());
    assert!(second.is_err(), "libpmix is a singleton");
}

#[test]
fn a_fence_the_host_fails_fails_the_clients_fence() {
    if !have(false) {
        return;
    }
    let f = fixture();
    // Rank 1 is on another node: the fence goes to the host.
    let mut spec = one_node("failfence", 2);
    spec.nodes.push("elsewhere".into());
    spec.ranks_by_node = vec![vec![0], vec![1]];
    f.server.register_job(&spec).unwrap();
    f.host.hold_fences("failfence");
    let exe = client();
    let runner = std::thread::spawn(move || {
        run_ranks(
            &fixture().server,
            "failfence",
            &[0],
            &exe,
            &["put"],
            &[],
            LIMIT,
        )
    });
    let held = f.host.take_held("failfence", 1, LIMIT);
    let (blob, done) = held.into_iter().next().unwrap();
    assert!(!blob.is_empty(), "rank 0's put is in the node's blob");
    drop(done); // the host gave up: the client must see an error
    let outs = runner.join().unwrap();
    for o in &outs {
        assert_eq!(o.status.code(), Some(1), "{o:?}");
        let ev = f.host.events_of("failfence");
        assert!(
            ev.iter()
                .any(|e| matches!(e, Event::Fence { collect: true, .. })),
            "{ev:?}"
        );
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("Fence"),
            "{o:?}"
        );
    }
    f.server.deregister_job("failfence");
}

#[test]
fn ranks_of_another_user_than_the_server_connect_fence_and_get() {
    if !have(false) {
        return;
    }
    if unsafe { libc::getuid() } != 0 {
        eprintln!("SKIPPED: needs root to start ranks as another user");
        return;
    }
    let outs = as_user("user", NOBODY, NOBODY, &client());
    assert_all_ok(&outs);
    assert_said(&outs, &[0, 1], "ok user:{r}");
}
