//! The multi-process harness lives in the `chaos` crate (`chaos::harness`), which the chaos
//! schedules share with these tests.

#![allow(unused_imports)]

pub use chaos::harness::*;
