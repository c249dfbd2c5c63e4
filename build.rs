// Builds the BPF scheduler (bpf/scx_gang.bpf.c) into a skeleton and turns
// bpf/intf.h, the one home of every type shared by BPF and Rust, into Rust.
fn main() {
    scx_cargo::BpfBuilder::new()
        .expect("scx_cargo BpfBuilder (is clang >= 18 installed? set BPF_CLANG=clang-19)")
        .enable_intf("bpf/intf.h", "bpf_intf.rs")
        .enable_skel("bpf/scx_gang.bpf.c", "bpf")
        .build()
        .expect("building the BPF scheduler failed");
}
