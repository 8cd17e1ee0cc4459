//! # fire-conformance
//!
//! Golden vectors for FIRE generated from `fire-reference`, and a harness that checks any
//! implementation against them: in process through [`implementation::Implementation`], or as a
//! subprocess speaking the JSON-lines protocol of `spec/protocol.md`. When a FIRE case fails,
//! [`diagnose`] names the catalogued deviation the output matches.

pub mod compare;
pub mod conventions;
pub mod coverage;
pub mod diagnose;
pub mod error;
pub mod export;
pub mod families;
pub mod generate;
pub mod grade;
pub mod implementation;
pub mod implementations;
pub mod initial;
pub mod overall;
pub mod protocol;
pub mod report;
pub mod runner;
pub mod serve;
pub mod vectors;
