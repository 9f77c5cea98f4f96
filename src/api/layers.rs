//! Middleware. [`with_layers`] wraps a whole application (tracing, header size,
//! security headers); [`Limits::apply`] wraps one surface with its own body limit and
//! timeout, because a catalog page, a 16 MiB role upload and a multi-gigabyte image
//! blob need different ones. Errors from a surface's limits are drawn by that
//! surface's renderer, so a page gets an HTML error and the registry its own shape.

use std::sync::{Arc, Mutex};
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
/// No scripts at all. Images may come from any https origin: a publisher's listing
/// names its artwork by URL (validated as http(s) when written), and pages show it
/// over a fallback when it does not load.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; style-src 'self'; img-src 'self' https:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// How an error produced by a layer is drawn on a surface.
pub type Render = fn(HttpError) -> Response;

/// One surface's limits.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The largest request body: a declared larger `Content-Length` is refused before
    /// the handler runs, and a body without one (chunked) is cut at this size. What a
    /// handler leaves unread is drained within bounds before the answer (see
    /// [`Unread::drain`]).
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
/// sees every request, including those the limits refuse, and so do the request
/// metrics (`http`, each request under the surface `surface` names from its route).
pub fn with_layers<S: Clone + Send + Sync + 'static>(
    router: axum::Router<S>,
    http: std::sync::Arc<crate::metrics::HistogramVec>,
    surface: fn(&str) -> &'static str,
) -> axum::Router<S> {
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
        .layer(middleware::from_fn(move |req: Request, next: Next| {
            super::metrics::record(req, next, http.clone(), surface)
        }))
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
        let e = HttpError::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            ErrorCode::HeadersTooLarge,
            format!("request line and headers exceed {MAX_HEADER_BYTES} bytes"),
        );
        // This limit wraps the whole application, before any surface is chosen; the
        // registry's clients expect its error body, with only the spec's codes.
        let path = req.uri().path();
        if path == "/v2" || path.starts_with("/v2/") {
            return super::registry::render(e);
        }
        return e.into_response();
    }
    next.run(req).await
}

async fn limit_body(req: Request, next: Next, limit: usize, render: Render) -> Response {
    use http_body::Body as _;
    let declared = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        let rest = Unread {
            body: req.into_body(),
            left: declared,
        };
        return closing(rest.drain(limit).await, render(too_large(limit)));
    }
    if req.body().is_end_stream() {
        // No body (nearly every read): nothing to track, nothing to drain.
        return next.run(req).await;
    }
    let slot = Arc::new(Mutex::new(Slot {
        body: None,
        read: 0,
        ended: false,
    }));
    let req = req.map(|body| {
        slot.lock().expect("slot lock").body = Some(body);
        axum::body::Body::new(http_body_util::Limited::new(
            Tracked { slot: slot.clone() },
            limit,
        ))
    });
    let response = next.run(req).await;
    let (rest, cut) = {
        let mut slot = slot.lock().expect("slot lock");
        if slot.ended {
            return response;
        }
        let rest = Unread {
            body: slot.body.take().unwrap_or_default(),
            left: declared.map(|n| n.saturating_sub(slot.read)),
        };
        (rest, slot.read > limit as u64)
    };
    // A body cut at the limit is too large whatever the handler made of the cut: axum's
    // extractors say so, but connectrpc only sees a failed read and answers `internal`.
    let response = if cut {
        render(too_large(limit))
    } else {
        response
    };
    closing(rest.drain(limit).await, response)
}

/// An answer given before the whole request body was read: the connection is not
/// reused, and if the rest could not be drained the client may see a reset.
fn closing(drained: bool, mut response: Response) -> Response {
    if !drained {
        tracing::debug!("request body left unread");
    }
    response.headers_mut().insert(
        axum::http::header::CONNECTION,
        HeaderValue::from_static("close"),
    );
    response
}

/// The request body as a handler reads it, through a slot the middleware can take back
/// afterwards: whatever the handler left unread (an answer before reading, as for a bad
/// token, or a body cut at the limit) is drained there.
struct Tracked {
    slot: Arc<Mutex<Slot>>,
}

struct Slot {
    body: Option<axum::body::Body>,
    read: u64,
    ended: bool,
}

impl http_body::Body for Tracked {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        use std::task::Poll;
        let mut slot = self.slot.lock().expect("slot lock");
        let Some(body) = slot.body.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = std::pin::Pin::new(body).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                let n = frame.data_ref().map_or(0, |d| d.len() as u64);
                slot.read += n;
            }
            Poll::Ready(None) => slot.ended = true,
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        let slot = self.slot.lock().expect("slot lock");
        slot.ended || slot.body.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> http_body::SizeHint {
        let slot = self.slot.lock().expect("slot lock");
        slot.body
            .as_ref()
            .map_or_else(|| http_body::SizeHint::with_exact(0), |b| b.size_hint())
    }
}

/// What is left of a request body once its answer is known.
struct Unread {
    body: axum::body::Body,
    /// Bytes still to come, when the client declared a length.
    left: Option<u64>,
}

impl Unread {
    /// Closing a socket with unread data makes the kernel send a reset, and a client
    /// that is still writing its body (curl and reqwest do not wait for `100 Continue`)
    /// then loses the answer and reports a broken pipe instead of, say, "too large" or
    /// "bad token". nginx avoids this with its lingering close; we read the rest and
    /// throw it away first, but at most [`drain_cap`] bytes and for at most
    /// [`DRAIN_TIME`], so a hostile client cannot make us read without bound. True when
    /// the body was read to its end.
    async fn drain(self, limit: usize) -> bool {
        use http_body_util::BodyExt;
        let cap = drain_cap(limit);
        if self.left.is_some_and(|n| n > cap) {
            return false;
        }
        let mut body = self.body;
        let drain = async {
            let mut seen = 0u64;
            while let Some(frame) = body.frame().await {
                let Ok(frame) = frame else { return false };
                seen += frame.data_ref().map_or(0, |d| d.len() as u64);
                if seen > cap {
                    return false;
                }
            }
            true
        };
        tokio::time::timeout(DRAIN_TIME, drain)
            .await
            .unwrap_or(false)
    }
}

/// The most of an unwanted request body read and discarded: four times the surface's
/// limit, at least 1 MiB and at most 64 MiB.
fn drain_cap(limit: usize) -> u64 {
    (limit as u64)
        .saturating_mul(4)
        .clamp(1024 * 1024, 64 * 1024 * 1024)
}

const DRAIN_TIME: Duration = Duration::from_secs(5);

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
            )
            // Answers without reading the body, as a handler refusing a token does.
            .route("/refuse", post(|| async { StatusCode::UNAUTHORIZED }))
            // Takes any failed read for its own failure, as connectrpc does.
            .route(
                "/strict",
                post(|body: Body| async move {
                    match axum::body::to_bytes(body, usize::MAX).await {
                        Ok(b) => b.len().to_string().into_response(),
                        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
                    }
                }),
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

        // Without a declared length the body is cut at the limit; whatever the handler
        // made of the cut, the answer is the surface's own "too large".
        for path in ["/echo", "/strict"] {
            let r = app
                .clone()
                .oneshot(
                    Request::post(path)
                        .body(Body::from(vec![b'a'; 11]))
                        .unwrap(),
                )
                .await
                .unwrap();
            assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE, "{path}");
            assert_eq!(body_text(r).await, "teapot:payload_too_large", "{path}");
        }

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

    /// Over a real socket: a client that sends its whole body before reading (as
    /// reqwest and curl do) gets the answer every time, instead of a reset, whether the
    /// body is over the limit as declared, over it without a declared length, or not
    /// read at all by the handler.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_answer_before_the_body_is_read_reaches_the_client() {
        let app = surface(Limits {
            body_bytes: 1024 * 1024,
            timeout: Duration::from_secs(30),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move { axum::serve(listener, app).await });
        let client = reqwest::Client::new();
        let chunked = || {
            let chunks = (0..48).map(|_| Ok::<_, std::io::Error>(vec![b'#'; 64 * 1024]));
            reqwest::Body::wrap_stream(futures_util::stream::iter(chunks))
        };
        for attempt in 0..30 {
            let cases = [
                (
                    "/echo",
                    reqwest::Body::from(vec![b'#'; 3 * 1024 * 1024]),
                    413,
                ),
                ("/echo", chunked(), 413),
                ("/refuse", reqwest::Body::from(vec![b'#'; 900 * 1024]), 401),
            ];
            for (path, body, status) in cases {
                let r = client
                    .post(format!("{url}{path}"))
                    .body(body)
                    .send()
                    .await
                    .unwrap_or_else(|e| panic!("attempt {attempt}, {path}: {e:?}"));
                assert_eq!(r.status().as_u16(), status, "{path}");
                assert_eq!(r.headers()["connection"], "close", "{path}");
            }
        }
        // A body read to its end keeps the connection open, as before.
        let r = client
            .post(format!("{url}/echo"))
            .body("four")
            .send()
            .await
            .unwrap();
        assert!(r.headers().get("connection").is_none());
        assert_eq!(r.text().await.unwrap(), "4");
        server.abort();
    }

    #[test]
    fn oversized_bodies_are_drained_only_up_to_a_bound() {
        assert_eq!(drain_cap(0), 1024 * 1024);
        assert_eq!(drain_cap(1024 * 1024), 4 * 1024 * 1024);
        assert_eq!(drain_cap(16 * 1024 * 1024), 64 * 1024 * 1024);
        assert_eq!(drain_cap(usize::MAX), 64 * 1024 * 1024);
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
