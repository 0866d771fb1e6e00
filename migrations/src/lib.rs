//! Adjacent version edges of the dsh session-log format (vN -> vN+1).
//!
//! Each edge is a pure, streaming transform from one version's typed events to the next
//! version's. The edges arrive with the migration issues; until then this crate only fixes
//! the place they will live, between `format` and `engine`.

pub use sessionlog_format::FormatVersion;
