//! gang-plot: the one SVG toolkit of scx_gang's pictures, used by the trace
//! timelines (gang-wire: `trace/svg.rs`, `trace/cluster.rs`) and by the
//! evaluation's figures (gang-eval: `figures/`).
//!
//! Design. An SVG picture is text written in one pass; this crate holds the
//! pieces both pictures need, one of each, and no figure of its own:
//!
//! - [`doc`]: the document builder ([`Doc`]: body first, size last, so a
//!   figure may grow while it is drawn), XML escaping ([`esc`]), the number
//!   format of every coordinate ([`num`]), path data ([`PathData`]) and
//!   elements with number-formatted geometry ([`element`], [`points`]).
//! - [`axis`]: tick steps of 1, 2 or 5 × 10^k ([`nice_step`]), a range
//!   widened to whole steps ([`nice_range`]), the ticks of a range
//!   ([`ticks`]) and their labels ([`tick_label`]).
//! - [`layout`]: the text width estimate ([`text_width`]) and the flow layout
//!   of legend entries in rows ([`flow`]).
//! - [`check`]: [`well_formed`], the checker both crates' tests run on every
//!   picture they make.
//!
//! Why not the `plotters` crate: our pictures are checked by programs, not
//! only looked at. The evaluation's figures carry `data-policy`/`data-value`
//! markup on every series, bar and point, and the trace timeline draws a
//! hatched overlap pattern and merges sub-pixel segments into one `<path>`
//! per style to bound its size; plotters writes neither, so we keep these
//! few hundred lines of our own.
//!
//! Known faults: text widths are estimated from the number of characters
//! (there is no font metrics here), so a label of wide letters may overrun
//! its room; the checker accepts only the subset of XML we write (no
//! prolog, comments, CDATA or numeric character references).

pub mod axis;
pub mod check;
pub mod doc;
pub mod layout;

pub use axis::{nice_range, nice_step, tick_label, ticks};
pub use check::well_formed;
pub use doc::{element, esc, num, points, Doc, PathData, FONT};
pub use layout::{flow, text_width};
