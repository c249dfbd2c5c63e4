mod bpf_intf;
mod bpf_skel;
fn main() {}
