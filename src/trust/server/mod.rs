//! The server side of the signed index: the operator's repository (`repo`: init, root
//! rotation), registered publishers and their tokens (`publishers`), the current state
//! and re-signing (`state`), checking and storing what publishers upload (`accept`,
//! `roleset`), suspension (`suspend`) and static copies (`export`).
//!
//! Layering: calls the shared trust modules and the store; acts as the built-in
//! publisher through `trust::publisher::plan`; never calls `trust::client`, and nothing
//! here knows about HTTP.

pub mod accept;
pub mod export;
pub mod publishers;
pub mod repo;
pub mod roleset;
pub mod state;
pub mod suspend;
