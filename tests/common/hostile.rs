//! A hostile upstream registry: the named fake of the mirror's hardening tests. No real
//! registry misbehaves on demand (redirects to internal addresses, a manifest without
//! end, a blob one byte at a time), so this small server, written for the tests, does.
//! It serves the images a test hands it the way the distribution API does, answers a
//! Bearer challenge from its own token realm when asked to, and records every request
//! with its `Authorization` header. With [`Hostile::answer_everything`] it plays an
//! internal service that must never be reached.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;

use super::background::Background;
use super::oci::{self, OCI_MANIFEST};

/// What a path answers instead of its content.
#[derive(Clone)]
pub enum Act {
    /// `302 Found` to this URL.
    Redirect(String),
    /// `200` with this many bytes, streamed without a length and never held in memory.
    Endless(u64),
    /// The content, one byte per interval.
    Trickle(Duration),
}

#[derive(Default)]
struct Inner {
    base: Mutex<String>,
    files: Mutex<HashMap<String, (String, Bytes)>>,
    acts: Mutex<HashMap<String, Act>>,
    /// Every request: its path (with query) and `Authorization`.
    seen: Mutex<Vec<(String, Option<String>)>>,
    /// Basic credentials its token realm wants; with them, `/v2/` wants a token.
    bearer: Mutex<Option<(String, String)>>,
    /// The realm its challenge names, when not its own `/token`.
    realm: Mutex<Option<String>>,
    everything: Mutex<Option<String>>,
    /// Bytes of `Endless` bodies sent so far.
    sent: AtomicU64,
}

const TOKEN: &str = "hostile-token-1";

pub struct Hostile {
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// `http://` or `https://` and `addr`.
    pub url: String,
    inner: Arc<Inner>,
    _server: Background,
}

impl Hostile {
    /// Over plain HTTP.
    pub fn start() -> Hostile {
        Hostile::spawn(None)
    }

    /// Over HTTPS with `tls`'s certificate for 127.0.0.1.
    pub fn start_tls(tls: &oci::Tls) -> Hostile {
        Hostile::spawn(Some(tls))
    }

    fn spawn(tls: Option<&oci::Tls>) -> Hostile {
        let inner = Arc::new(Inner::default());
        let acceptor = tls.map(|t| acceptor(&t.cert, &t.key));
        let app = axum::Router::new()
            .fallback(serve)
            .with_state(inner.clone());
        let server = match acceptor {
            None => Background::axum(app),
            Some(acceptor) => Background::start(|listener, stopped| async move {
                tokio::pin!(stopped);
                loop {
                    let (tcp, _) = tokio::select! {
                        accepted = listener.accept() => accepted.unwrap(),
                        _ = &mut stopped => return,
                    };
                    let (acceptor, app) = (acceptor.clone(), app.clone());
                    tokio::spawn(async move {
                        let Ok(tls) = acceptor.accept(tcp).await else {
                            return;
                        };
                        let service = hyper_util::service::TowerToHyperService::new(app);
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                            .await;
                    });
                }
            }),
        };
        let addr = server.addr.to_string();
        let url = format!("{}://{addr}", if tls.is_some() { "https" } else { "http" });
        *inner.base.lock().unwrap() = url.clone();
        Hostile {
            addr,
            url,
            inner,
            _server: server,
        }
    }

    /// Serves `bytes` at `path` as `content_type`.
    pub fn file(&self, path: &str, content_type: &str, bytes: Vec<u8>) {
        self.inner.files.lock().unwrap().insert(
            path.to_owned(),
            (content_type.to_owned(), Bytes::from(bytes)),
        );
    }

    /// A one-platform image in `repository`, its layer `layer_bytes` of noise: the
    /// manifest's digest and the layer's.
    pub fn image(&self, repository: &str, layer_bytes: usize) -> (String, String) {
        let layer = oci::noise(repository, layer_bytes);
        let config = serde_json::json!({
            "architecture": "amd64", "os": "linux",
            "rootfs": {"type": "layers", "diff_ids": [oci::digest(&layer)]},
        })
        .to_string()
        .into_bytes();
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": oci::digest(&config), "size": config.len()},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": oci::digest(&layer), "size": layer.len()}],
        })
        .to_string()
        .into_bytes();
        let (digest, layer_digest) = (oci::digest(&manifest), oci::digest(&layer));
        for blob in [config, layer] {
            let path = format!("/v2/{repository}/blobs/{}", oci::digest(&blob));
            self.file(&path, "application/octet-stream", blob);
        }
        self.file(
            &format!("/v2/{repository}/manifests/{digest}"),
            OCI_MANIFEST,
            manifest,
        );
        (digest, layer_digest)
    }

    /// Makes `path` misbehave.
    pub fn act(&self, path: &str, act: Act) {
        self.inner.acts.lock().unwrap().insert(path.to_owned(), act);
    }

    /// `/v2/` wants a Bearer token from this server's `/token` realm, which wants
    /// `user`/`password` as Basic credentials.
    pub fn require_token(&self, user: &str, password: &str) {
        *self.inner.bearer.lock().unwrap() = Some((user.to_owned(), password.to_owned()));
    }

    /// As [`Hostile::require_token`], with the challenge naming `realm` instead.
    pub fn require_token_at(&self, realm: &str) {
        self.require_token("nobody", "nothing");
        *self.inner.realm.lock().unwrap() = Some(realm.to_owned());
    }

    /// Answers every request `200` with `body`: an internal service.
    pub fn answer_everything(&self, body: &str) {
        *self.inner.everything.lock().unwrap() = Some(body.to_owned());
    }

    /// Every request so far: path (and query) and `Authorization`.
    pub fn seen(&self) -> Vec<(String, Option<String>)> {
        self.inner.seen.lock().unwrap().clone()
    }

    /// Bytes of `Endless` answers sent so far.
    pub fn endless_sent(&self) -> u64 {
        self.inner.sent.load(Ordering::SeqCst)
    }
}

fn acceptor(cert: &Path, key: &Path) -> tokio_rustls::TlsAcceptor {
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(cert)
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(key).unwrap();
    let config = tokio_rustls::rustls::ServerConfig::builder_with_provider(Arc::new(
        tokio_rustls::rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

async fn serve(State(inner): State<Arc<Inner>>, req: Request) -> Response {
    let path = req.uri().path().to_owned();
    let authorization = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let shown = req
        .uri()
        .path_and_query()
        .map_or(path.clone(), |p| p.to_string());
    inner
        .seen
        .lock()
        .unwrap()
        .push((shown, authorization.clone()));
    if let Some(body) = inner.everything.lock().unwrap().clone() {
        return body.into_response();
    }
    let bearer = inner.bearer.lock().unwrap().clone();
    if let Some((user, password)) = bearer {
        if path == "/token" {
            let basic = format!(
                "Basic {}",
                oci::base64_encode(format!("{user}:{password}").as_bytes())
            );
            if authorization.as_deref() != Some(basic.as_str()) {
                return StatusCode::UNAUTHORIZED.into_response();
            }
            return axum::Json(serde_json::json!({ "token": TOKEN })).into_response();
        }
        if authorization.as_deref() != Some(&format!("Bearer {TOKEN}")) {
            let realm = inner
                .realm
                .lock()
                .unwrap()
                .clone()
                .unwrap_or_else(|| format!("{}/token", inner.base.lock().unwrap()));
            return Response::builder()
                .status(StatusCode::UNAUTHORIZED)
                .header(
                    header::WWW_AUTHENTICATE,
                    format!("Bearer realm=\"{realm}\",service=\"hostile\""),
                )
                .body(Body::from(r#"{"errors":[{"code":"UNAUTHORIZED"}]}"#))
                .unwrap();
        }
    }
    let act = inner.acts.lock().unwrap().get(&path).cloned();
    let file = inner.files.lock().unwrap().get(&path).cloned();
    match (act, file) {
        (Some(Act::Redirect(to)), _) => Response::builder()
            .status(StatusCode::FOUND)
            .header(header::LOCATION, to)
            .body(Body::empty())
            .unwrap(),
        (Some(Act::Endless(total)), _) => {
            let chunk = Bytes::from(vec![b' '; 64 * 1024]);
            let chunks = total.div_ceil(chunk.len() as u64);
            let state = inner.clone();
            let body = futures_util::stream::iter(0..chunks).map(move |_| {
                state.sent.fetch_add(chunk.len() as u64, Ordering::SeqCst);
                Ok::<_, std::io::Error>(chunk.clone())
            });
            Response::builder()
                .header(header::CONTENT_TYPE, OCI_MANIFEST)
                .body(Body::from_stream(body))
                .unwrap()
        }
        (Some(Act::Trickle(every)), Some((content_type, bytes))) => {
            let body = futures_util::stream::iter(bytes.to_vec()).then(move |b| async move {
                tokio::time::sleep(every).await;
                Ok::<_, std::io::Error>(Bytes::from(vec![b]))
            });
            Response::builder()
                .header(header::CONTENT_TYPE, content_type)
                .body(Body::from_stream(body))
                .unwrap()
        }
        (_, Some((content_type, bytes))) => Response::builder()
            .header(header::CONTENT_TYPE, content_type)
            .body(Body::from(bytes))
            .unwrap(),
        _ => (
            StatusCode::NOT_FOUND,
            r#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"unknown"}]}"#,
        )
            .into_response(),
    }
}
