//! The V0 -> V1 edge (issue #5).
