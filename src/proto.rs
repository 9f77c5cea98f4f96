//! Fundament's Connect contracts (`organization.v1`, `catalog.v1`, `registry.v1`,
//! `admin.v1`, `marketplace.v1`)
//! and the standard `google.rpc.BadRequest` error detail, generated at build time from
//! `proto/` by `build.rs`: message types with binary and proto3-JSON codecs, and one
//! service trait per service.
//!
//! Layering: generated types only; the services are implemented in `api::connect`.

connectrpc::include_generated!();
