//! BaSiC flat-field estimation, one test binary (one link of the crate instead of seven): the f64
//! oracle, the GPU fit, its properties, the smoothness chosen from the data, real-data
//! regression, the command line and reconstruction without white fields.

#[path = "../common/mod.rs"]
mod common;

mod cli;
mod gpu;
mod oracle;
mod properties;
mod real;
mod reconstruct;
mod smoothness;
