//! Middleware. [`with_layers`] wraps a whole application (tracing, header size,
//! security headers); [`Limits::apply`] wraps one surface with its own body limit and
//! timeout, because a catalog page, a 16 MiB role upload and a multi-gigabyte image
//! blob need different ones. Errors from a surface's limits are drawn by that
//! surface's renderer, so a page gets an HTML error and the registry its own shape.

use std::time::Duration;

use axum::extract::{MatchedPath, Request};
use axum::http::{HeaderName, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::trace::TraceLayer;
use tracing::field::Empty;
use tracing::{Level, Span};

use super::error::{ErrorCode, HttpError};

/// The request body a surface accepts unless it says otherwise. Read-only surfaces
/// take no body; the cap only bounds what a hostile client can make us read.
pub const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;
/// Total size of the request line and all request headers.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// How an error produced by a layer is drawn on a surface.
pub type Render = fn(HttpError) -> Response;

/// One surface's limits.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The largest request body: a declared larger `Content-Length` is refused before
    /// anything is read, and a body without one (chunked) is cut at this size.
    pub body_bytes: usize,
    /// The longest a request may take, answered with 503 `timeout`.
    pub timeout: Duration,
}

impl Limits {
    /// Wraps every route of `router` (and its 405 answers) in these limits.
    pub fn apply<S: Clone + Send + Sync + 'static>(
        self,
        router: axum::Router<S>,
        render: Render,
    ) -> axum::Router<S> {
        let Limits {
            body_bytes,
            timeout,
        } = self;
        router
            .layer(middleware::from_fn(move |req: Request, next: Next| {
                time_limit(req, next, timeout, render)
            }))
            .layer(middleware::from_fn(move |req: Request, next: Next| {
                limit_body(req, next, body_bytes, render)
            }))
    }
}

/// Middleware applied to a whole application. The last layer added runs first: tracing
/// sees every request, including those the limits refuse.
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
            ErrorCode::HeadersTooLarge,
            format!("request line and headers exceed {MAX_HEADER_BYTES} bytes"),
        )
        .into_response();
    }
    next.run(req).await
}

async fn limit_body(req: Request, next: Next, limit: usize, render: Render) -> Response {
    let declared = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return render(too_large(limit));
    }
    next.run(req.map(|b| axum::body::Body::new(http_body_util::Limited::new(b, limit))))
        .await
}

async fn time_limit(req: Request, next: Next, limit: Duration, render: Render) -> Response {
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(response) => response,
        Err(_) => render(HttpError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::Timeout,
            format!("the request took longer than {} s", limit.as_secs()),
        )),
    }
}

/// 413 for a body over `limit` bytes.
pub fn too_large(limit: usize) -> HttpError {
    HttpError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        ErrorCode::PayloadTooLarge,
        format!("the request body exceeds {limit} bytes"),
    )
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::Request;
    use axum::routing::{get, post};
    use tower::ServiceExt;

    use super::*;

    fn teapot(e: HttpError) -> Response {
        // A surface's own shape: the status is kept, the body says which code.
        (e.status, format!("teapot:{}", e.code)).into_response()
    }

    async fn body_text(r: Response) -> String {
        let bytes = axum::body::to_bytes(r.into_body(), usize::MAX)
            .await
            .unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    fn surface(limits: Limits) -> axum::Router {
        let routes = axum::Router::new()
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    "late"
                }),
            )
            .route(
                "/echo",
                post(|body: axum::body::Bytes| async move { body.len().to_string() }),
            );
        limits.apply(routes, teapot)
    }

    #[tokio::test]
    async fn a_surface_draws_its_own_limit_errors() {
        let app = surface(Limits {
            body_bytes: 10,
            timeout: Duration::from_millis(50),
        });
        let r = app
            .clone()
            .oneshot(Request::get("/slow").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body_text(r).await, "teapot:timeout");

        let r = app
            .clone()
            .oneshot(
                Request::post("/echo")
                    .header("content-length", "11")
                    .body(Body::from(vec![b'a'; 11]))
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(body_text(r).await, "teapot:payload_too_large");

        let r = app
            .oneshot(
                Request::post("/echo")
                    .body(Body::from(vec![b'a'; 10]))
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(body_text(r).await, "10");
    }

    #[tokio::test]
    async fn two_surfaces_keep_their_own_limits() {
        let small = surface(Limits {
            body_bytes: 4,
            timeout: Duration::from_secs(5),
        });
        let large = axum::Router::new().nest(
            "/large",
            surface(Limits {
                body_bytes: 64,
                timeout: Duration::from_secs(5),
            }),
        );
        let app = small.merge(large);
        let post = |path: &str| {
            Request::post(path)
                .body(Body::from(vec![b'a'; 32]))
                .unwrap()
        };
        let r = app.clone().oneshot(post("/echo")).await.unwrap();
        assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let r = app.oneshot(post("/large/echo")).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(body_text(r).await, "32");
    }
}
