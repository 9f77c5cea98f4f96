//! The server side of the signed index: the operator's repository (`repo`: init, root
//! rotation), registered publishers and their tokens (`publishers`), the current state
//! and re-signing (`state`), checking and storing what publishers upload (`accept`,
//! `roleset`), suspension (`suspend`), static copies (`export`) and serving an
//! upstream marketplace's publishers under the local root (`upstream`).
//!
//! Layering: calls the shared trust modules and the store; acts as the built-in
//! publisher through `trust::publisher::plan`; of `trust::client` uses only the type of
//! a verified role file (`upstream`: the upstream's verification is the caller's), and
//! nothing here knows about HTTP.

pub mod accept;
pub mod export;
pub mod publishers;
pub mod repo;
pub mod roleset;
pub mod state;
pub mod suspend;
pub mod upstream;
