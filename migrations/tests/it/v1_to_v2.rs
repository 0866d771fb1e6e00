//! The V1 -> V2 edge (issue #5).
