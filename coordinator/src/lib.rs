//! The cluster half of scx_gang: places parallel jobs in space (nodes and
//! CPUs) and time (slots of the Ousterhout matrix), drives every node
//! through each slot switch, and serves the users' front end.
//!
//! Pure logic lives here and is tested on the host: the matrix and its
//! allocation policies (matrix, alloc), the slot switch (switch: the
//! rotation and the barrier) and the cluster's knob values (knobs). What gangd and the nodes must agree on (the
//! agent protocol, PMI, the trace format, the knob file system) is the
//! gang-wire crate, shared with the node.

pub mod alloc;
pub mod daemon;
pub mod frontend;
pub mod knobs;
pub mod matrix;
pub mod switch;
