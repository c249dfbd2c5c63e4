//! The cluster half of scx_gang: places parallel jobs in space (nodes and
//! CPUs) and time (slots of the Ousterhout matrix), drives every node
//! through each slot switch, and serves the users' front end.
//!
//! Pure logic lives here and is tested on the host: the matrix and its
//! allocation policies (matrix, alloc), the slot switch (switch), the wire
//! format (proto), and the node trace format with its analysis (trace),
//! which travels on the wire when gangd merges every node's trace into one
//! cluster timeline.

pub mod alloc;
pub mod daemon;
pub mod frontend;
pub mod knobfs;
pub mod matrix;
pub mod pmi;
pub mod proto;
pub mod switch;
pub mod trace;
