//! Helpers shared by the integration tests: each test file that needs them
//! declares `mod common;` and uses the parts it needs.
#![allow(dead_code)]

pub mod counting_alloc;
pub mod ffi;
pub mod gpt;
pub mod null_context;
pub mod text;
