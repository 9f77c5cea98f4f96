//! A marketplace mirror the test controls: a real HTTP server on loopback that forwards
//! to a real marketplace and records what it served, and can instead serve a frozen
//! recording or substituted bytes. This is the named fake of the sync tests: it causes
//! what a real marketplace never does on its own (replayed, frozen, tampered or
//! foreign-signed metadata), the way a hostile or broken mirror would.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;

pub type Files = HashMap<String, Vec<u8>>;

#[derive(Default)]
struct Inner {
    upstream: String,
    /// Serve only `recorded` (and overrides); 404 for anything else.
    frozen: Mutex<bool>,
    recorded: Mutex<Files>,
    overrides: Mutex<Files>,
    target_requests: AtomicUsize,
    target_delay: Mutex<Duration>,
    /// Every answer waits this long first.
    delay: Mutex<Duration>,
    /// Paths whose body is sent one byte at a time, this far apart.
    trickle: Mutex<HashMap<String, Duration>>,
}

pub struct Mirror {
    pub url: String,
    inner: Arc<Inner>,
    _server: super::background::Background,
}

impl Mirror {
    /// Starts forwarding to `upstream` (e.g. `http://127.0.0.1:1234`).
    pub fn start(upstream: &str) -> Mirror {
        let inner = Arc::new(Inner {
            upstream: upstream.trim_end_matches('/').to_owned(),
            ..Inner::default()
        });
        let app = axum::Router::new()
            .fallback(serve)
            .with_state(inner.clone());
        let server = super::background::Background::axum(app);
        Mirror {
            url: format!("http://{}", server.addr),
            inner,
            _server: server,
        }
    }

    /// Everything served so far, by path.
    pub fn recorded(&self) -> Files {
        self.inner.recorded.lock().unwrap().clone()
    }

    /// Serves only `files` (plus overrides) from now on, like a mirror that stopped
    /// syncing at the moment they were recorded.
    pub fn freeze(&self, files: Files) {
        *self.inner.recorded.lock().unwrap() = files;
        *self.inner.frozen.lock().unwrap() = true;
    }

    /// Back to forwarding to the marketplace, without overrides.
    pub fn thaw(&self) {
        *self.inner.frozen.lock().unwrap() = false;
        self.inner.overrides.lock().unwrap().clear();
    }

    /// Serves `bytes` at `path` instead of what the marketplace has.
    pub fn set(&self, path: &str, bytes: Vec<u8>) {
        self.inner
            .overrides
            .lock()
            .unwrap()
            .insert(path.to_owned(), bytes);
    }

    /// Requests for target files seen so far.
    pub fn target_requests(&self) -> usize {
        self.inner.target_requests.load(Ordering::SeqCst)
    }

    /// Slows every target download by `delay`, to stretch a round out.
    pub fn delay_targets(&self, delay: Duration) {
        *self.inner.target_delay.lock().unwrap() = delay;
    }

    /// Makes every answer wait `delay` before it starts (a slow link).
    pub fn delay_all(&self, delay: Duration) {
        *self.inner.delay.lock().unwrap() = delay;
    }

    /// Stops trickling.
    pub fn set_trickle_off(&self) {
        self.inner.trickle.lock().unwrap().clear();
    }

    /// Sends the body at `path` one byte per `every` (a server that trickles bytes).
    pub fn trickle(&self, path: &str, every: Duration) {
        self.inner
            .trickle
            .lock()
            .unwrap()
            .insert(path.to_owned(), every);
    }
}

async fn serve(State(inner): State<Arc<Inner>>, req: Request) -> Response {
    let path = req.uri().path().to_owned();
    let delay = *inner.delay.lock().unwrap();
    tokio::time::sleep(delay).await;
    let trickle = inner.trickle.lock().unwrap().get(&path).copied();
    if let Some(every) = trickle {
        let bytes = vec![b' '; 64 * 1024];
        let body = futures_util::stream::iter(bytes).then(move |b| async move {
            tokio::time::sleep(every).await;
            Ok::<_, std::io::Error>(axum::body::Bytes::from(vec![b]))
        });
        return Body::from_stream(body).into_response();
    }
    if path.starts_with("/tuf/targets/") {
        inner.target_requests.fetch_add(1, Ordering::SeqCst);
        let delay = *inner.target_delay.lock().unwrap();
        tokio::time::sleep(delay).await;
    }
    if let Some(bytes) = inner.overrides.lock().unwrap().get(&path) {
        return bytes.clone().into_response();
    }
    if *inner.frozen.lock().unwrap() {
        return match inner.recorded.lock().unwrap().get(&path) {
            Some(bytes) => bytes.clone().into_response(),
            None => StatusCode::NOT_FOUND.into_response(),
        };
    }
    let upstream = format!("{}{path}", inner.upstream);
    let Ok(resp) = reqwest::get(&upstream).await else {
        return StatusCode::BAD_GATEWAY.into_response();
    };
    let status = resp.status();
    let Ok(bytes) = resp.bytes().await else {
        return StatusCode::BAD_GATEWAY.into_response();
    };
    if status.is_success() {
        inner.recorded.lock().unwrap().insert(path, bytes.to_vec());
    }
    Response::builder()
        .status(status.as_u16())
        .body(Body::from(bytes))
        .unwrap()
}
