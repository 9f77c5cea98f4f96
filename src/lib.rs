//! Fundament plugin marketplace.
//!
//! Layering, top to bottom: `cli` (and `server`, which runs a router) calls `api`, the
//! HTTP layer; `api` calls the domain modules (`catalog`, `web`, `trust`, `sync`,
//! `mirror`, `registry`); those call `store`, `blob` and `definition`; `store` calls only
//! `definition`, `blob` nothing. Nothing below `api` knows about requests or responses.
//! docs/ARCHITECTURE.md has the rule of each module.

pub mod admin;
pub mod api;
pub mod blob;
pub mod bundle;
pub mod catalog;
pub mod cli;
pub mod clock;
pub mod db;
pub mod definition;
pub mod ids;
pub mod metrics;
pub mod mirror;
pub mod proto;
pub mod ratelimit;
pub mod registry;
pub mod review;
pub mod server;
pub mod store;
pub mod sync;
pub mod token;
pub mod trust;
pub mod upstream;
pub mod web;

pub use api::{AppState, app};
