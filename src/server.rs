//! Running the HTTP server: data directory, request limits, per-request tracing and
//! graceful shutdown.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::extract::{MatchedPath, Request};
use axum::http::{HeaderName, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;
use tracing::field::Empty;
use tracing::{Level, Span};

use crate::http::HttpError;

/// The largest request body accepted, except on the publisher write routes.
pub const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;
/// Publisher write routes (`POST /api/v1/publishers/...`) carry the publisher's whole
/// signed role, which grows with its targets (about 600 bytes each). The same cap as
/// clients apply to metadata they download (`trust::client::MAX_RESPONSE_BYTES`); those
/// handlers read the body only after checking the token.
pub const MAX_PUBLISH_BODY_BYTES: usize = 16 * 1024 * 1024;
/// Total size of all request headers.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

pub const DATABASE_FILE: &str = "marketplace.db";

/// Creates the data directory (owner-only where supported) and returns the database path.
pub fn prepare_data_dir(dir: &Path) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mut perms = std::fs::metadata(dir)?.permissions();
        if perms.mode() & 0o077 != 0 {
            perms.set_mode(0o700);
            std::fs::set_permissions(dir, perms)?;
        }
    }
    Ok(dir.join(DATABASE_FILE))
}

/// Middleware applied to every route. The last layer added runs first: tracing sees
/// every request, including those the limits refuse.
pub fn with_layers<S: Clone + Send + Sync + 'static>(router: axum::Router<S>) -> axum::Router<S> {
    let header = |name: &'static str, value: &'static str| {
        SetResponseHeaderLayer::if_not_present(
            HeaderName::from_static(name),
            HeaderValue::from_static(value),
        )
    };
    router
        // Pages use no scripts, so the policy can forbid them outright.
        .layer(header("content-security-policy", CONTENT_SECURITY_POLICY))
        .layer(header("x-content-type-options", "nosniff"))
        .layer(header("referrer-policy", "no-referrer"))
        .layer(header("x-frame-options", "DENY"))
        .layer(middleware::from_fn(limit_headers))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            REQUEST_TIMEOUT,
        ))
        .layer(middleware::from_fn(limit_body))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(make_span)
                .on_request(())
                .on_response(on_response)
                .on_failure(()),
        )
}

/// A request at least this slow is logged at warn, whatever its method.
const SLOW: Duration = Duration::from_secs(1);

/// Reads (GET, HEAD) are nearly all of the traffic (`/tuf/` files, pages, health
/// checks), so their span and their line per response are at debug: at the default
/// level they cost no formatting and no write (measured with `wrk` on
/// `/tuf/metadata/timestamp.json`: the info-level span and line cost about a third of
/// the throughput). Writes keep an info span, so the events their handlers log carry
/// method and route. `on_response` still logs failures and slow requests at warn.
fn make_span<B>(req: &axum::http::Request<B>) -> Span {
    // The matched route, not the raw path: bounded cardinality, no user input in logs.
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str);
    let method = req.method();
    if matches!(*method, Method::GET | Method::HEAD) {
        tracing::debug_span!("request", %method, route, status = Empty, latency_ms = Empty)
    } else {
        tracing::info_span!("request", %method, route, status = Empty, latency_ms = Empty)
    }
}

fn on_response<B>(res: &axum::http::Response<B>, latency: Duration, span: &Span) {
    let status = res.status().as_u16();
    let latency_ms = latency.as_secs_f64() * 1000.0;
    span.record("status", status);
    span.record("latency_ms", latency_ms);
    // Status and latency are repeated in the event: a read's span is usually disabled.
    if res.status().is_server_error() {
        tracing::warn!(status, latency_ms, "response failed");
    } else if latency >= SLOW {
        tracing::warn!(status, latency_ms, "slow response");
    } else if span.metadata().is_some_and(|m| *m.level() == Level::INFO) {
        tracing::info!("response");
    } else {
        tracing::debug!("response");
    }
}

async fn limit_headers(req: Request, next: Next) -> Response {
    let size: usize = req
        .headers()
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len() + 4)
        .sum::<usize>()
        + req.uri().to_string().len();
    if size > MAX_HEADER_BYTES {
        return HttpError::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers_too_large",
            format!("request line and headers exceed {MAX_HEADER_BYTES} bytes"),
        )
        .into_response();
    }
    next.run(req).await
}

/// Refuses a declared length over the route's limit before reading anything, and caps
/// what is read of a body without one (chunked) at the same limit.
async fn limit_body(req: Request, next: Next) -> Response {
    let limit = if req.method() == axum::http::Method::POST
        && req.uri().path().starts_with("/api/v1/publishers/")
    {
        MAX_PUBLISH_BODY_BYTES
    } else {
        MAX_BODY_BYTES
    };
    let declared = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return too_large(limit).into_response();
    }
    next.run(req.map(|b| axum::body::Body::new(http_body_util::Limited::new(b, limit))))
        .await
}

pub(crate) fn too_large(limit: usize) -> HttpError {
    HttpError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        format!("the request body exceeds {limit} bytes"),
    )
}

/// Serves until SIGINT or SIGTERM, then stops accepting and lets in-flight requests end.
pub async fn serve(listener: tokio::net::TcpListener, app: axum::Router) -> std::io::Result<()> {
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown_signal())
    .await
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutdown signal received; finishing in-flight requests");
}
