//! Sending the load: one keep-alive connection in sequence, or many at once, and the
//! latency statistics of either.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::BoxError;

/// A client that keeps exactly one connection open, so `n` clients make `n` connections.
pub(crate) fn client() -> Result<reqwest::Client, BoxError> {
    Ok(reqwest::Client::builder()
        .no_proxy()
        .http1_only()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(1)
        .timeout(Duration::from_secs(30))
        .build()?)
}

/// One request of a scenario: a GET of `path`, or a Connect unary call (a POST of the
/// JSON message `json` to `path`).
#[derive(Debug, Clone)]
pub(crate) struct Req {
    pub(crate) path: String,
    pub(crate) json: Option<String>,
}

impl From<String> for Req {
    fn from(path: String) -> Req {
        Req { path, json: None }
    }
}

/// One request: wall time from send to the last body byte; the status must be 200.
pub(crate) async fn fetch(
    client: &reqwest::Client,
    base: &str,
    req: &Req,
) -> Result<(Duration, usize), String> {
    let url = format!("{base}{}", req.path);
    let (method, path) = (if req.json.is_some() { "POST" } else { "GET" }, &req.path);
    let started = Instant::now();
    let request = match &req.json {
        None => client.get(&url),
        Some(json) => client
            .post(&url)
            .header("content-type", "application/json")
            .body(json.clone()),
    };
    let response = request
        .send()
        .await
        .map_err(|e| format!("{method} {path}: {e}"))?;
    let status = response.status();
    let body = response
        .bytes()
        .await
        .map_err(|e| format!("{method} {path}: reading the body: {e}"))?;
    let elapsed = started.elapsed();
    if status != reqwest::StatusCode::OK {
        let text = String::from_utf8_lossy(&body[..body.len().min(500)]).into_owned();
        return Err(format!(
            "{method} {path}: expected 200, got {status}: {text}"
        ));
    }
    Ok((elapsed, body.len()))
}

/// Every path once, in order, over one connection.
pub(crate) async fn sequential(
    client: &reqwest::Client,
    base: &str,
    name: &'static str,
    paths: &[Req],
) -> Result<Stats, BoxError> {
    let started = Instant::now();
    let mut times = Vec::with_capacity(paths.len());
    let mut bytes = 0usize;
    for path in paths {
        let (elapsed, len) = fetch(client, base, path).await?;
        times.push(elapsed);
        bytes += len;
    }
    Ok(Stats::new(name, times, bytes, started.elapsed()))
}

/// `total` requests over `connections` keep-alive connections, each sending its next
/// request as soon as its last answer is read (a closed loop, as `wrk` does); paths are
/// taken in turn from `paths`. Every connection is opened with one untimed request before
/// the clock starts, so connection setup is not measured.
pub(crate) async fn concurrent(
    base: &str,
    name: &'static str,
    paths: &[Req],
    connections: usize,
    total: usize,
) -> Result<Stats, BoxError> {
    let paths: Arc<[Req]> = paths.into();
    let next = Arc::new(AtomicUsize::new(0));
    let ready = Arc::new(tokio::sync::Barrier::new(connections + 1));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..connections {
        let client = client()?;
        let (base, paths, next, ready) =
            (base.to_owned(), paths.clone(), next.clone(), ready.clone());
        tasks.spawn(async move {
            let opened = fetch(&client, &base, &paths[0]).await;
            ready.wait().await;
            opened?;
            let mut times = Vec::with_capacity(total / connections + 1);
            let mut bytes = 0usize;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    return Ok::<_, String>((times, bytes));
                }
                let (elapsed, len) = fetch(&client, &base, &paths[i % paths.len()]).await?;
                times.push(elapsed);
                bytes += len;
            }
        });
    }
    ready.wait().await;
    let started = Instant::now();
    let mut times = Vec::with_capacity(total);
    let mut bytes = 0usize;
    while let Some(done) = tasks.join_next().await {
        let (t, b) = done??;
        times.extend(t);
        bytes += b;
    }
    Ok(Stats::new(name, times, bytes, started.elapsed()))
}

pub(crate) struct Stats {
    pub(crate) name: &'static str,
    pub(crate) count: usize,
    pub(crate) mean: f64,
    pub(crate) p50: f64,
    pub(crate) p90: f64,
    pub(crate) p99: f64,
    pub(crate) max: f64,
    pub(crate) avg_kib: f64,
    pub(crate) wall: Duration,
}

impl Stats {
    pub(crate) fn new(
        name: &'static str,
        mut times: Vec<Duration>,
        bytes: usize,
        wall: Duration,
    ) -> Stats {
        times.sort_unstable();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let count = times.len();
        // Nearest-rank percentile.
        let pct = |p: f64| ms(times[((p * count as f64).ceil() as usize).clamp(1, count) - 1]);
        Stats {
            name,
            count,
            mean: times.iter().map(|d| ms(*d)).sum::<f64>() / count as f64,
            p50: pct(0.50),
            p90: pct(0.90),
            p99: pct(0.99),
            max: ms(times[count - 1]),
            avg_kib: bytes as f64 / count as f64 / 1024.0,
            wall,
        }
    }

    pub(crate) fn rate(&self) -> f64 {
        self.count as f64 / self.wall.as_secs_f64()
    }
}
