//! Presentation of the server-rendered catalog: view models (`views`), their askama
//! templates (`templates/`), and the embedded static files (`assets`).
//!
//! Layering: view models take what `catalog`, `store` queries and `trust` return and
//! keep presentation only; they never query and know nothing of HTTP (the handlers are
//! `api::pages`).

pub mod assets;
pub mod feed;
mod listing;
mod mirror;
mod views;

use askama::Template;

pub use listing::decorate;
pub use views::{CatalogPage, PluginPage, SignedIndexPage};

/// The page shown for an error.
#[derive(Template)]
#[template(path = "error.html")]
pub struct ErrorPage {
    pub title: String,
    pub message: String,
}
