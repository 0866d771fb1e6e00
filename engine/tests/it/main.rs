//! Integration tests of the engine: the store's admission, durability and folds.

mod admission;
mod chain;
mod faults;
mod kill;
mod model;
mod roundtrip;
mod service;
mod support;
mod verify;
