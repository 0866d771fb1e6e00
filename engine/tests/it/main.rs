//! Integration tests of the engine: the store's admission, durability and folds.

mod admission;
mod kill;
mod model;
mod roundtrip;
mod support;
mod verify;
