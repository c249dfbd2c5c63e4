// Builds the BPF programs into skeletons: the scheduler (bpf/scx_gang.bpf.c,
// OUT_DIR/bpf_skel.rs) and the PMIx servers' connect guard
// (bpf/pmix_guard.bpf.c, OUT_DIR/pmix_guard_skel.rs) and the drain's
// socket watch (bpf/sock_watch.bpf.c, OUT_DIR/sock_watch_skel.rs), and turns bpf/intf.h,
// the one home of every type shared by BPF and Rust, into Rust.
//
// scx_cargo's BpfBuilder makes one skeleton per builder, so the guard and
// the watch have a builder each (same clang, same flags, same headers); the
// scheduler's is built exactly as before.
fn main() {
    const CLANG: &str = "(is clang >= 18 installed? set BPF_CLANG=clang-19)";
    scx_cargo::BpfBuilder::new()
        .unwrap_or_else(|e| panic!("scx_cargo BpfBuilder {CLANG}: {e:#}"))
        .enable_intf("bpf/intf.h", "bpf_intf.rs")
        .enable_skel("bpf/scx_gang.bpf.c", "bpf")
        .build()
        .expect("building the BPF scheduler failed");
    scx_cargo::BpfBuilder::new()
        .unwrap_or_else(|e| panic!("scx_cargo BpfBuilder {CLANG}: {e:#}"))
        .enable_skel("bpf/pmix_guard.bpf.c", "pmix_guard")
        .build()
        .expect("building the PMIx guard (bpf/pmix_guard.bpf.c) failed");
    scx_cargo::BpfBuilder::new()
        .unwrap_or_else(|e| panic!("scx_cargo BpfBuilder {CLANG}: {e:#}"))
        .enable_skel("bpf/sock_watch.bpf.c", "sock_watch")
        .build()
        .expect("building the socket watch (bpf/sock_watch.bpf.c) failed");
}
