//! The file readers against the inputs they meet, one test binary (one link of the crate instead
//! of three): files as the field's tools write them, damaged files, and files that claim far more
//! than they hold.

#[path = "../common/mod.rs"]
mod common;

mod files;
mod forged;
mod robustness;
