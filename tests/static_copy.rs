//! Any static copy of the index syncs: `marketplace repo export` writes `/tuf/` as plain
//! files, a plain static file server (Python's `http.server`, which knows nothing of TUF)
//! serves them with the marketplace stopped, and both the sync worker and python-tuf's
//! client verify and download everything from it. Exporting again writes only what is
//! new, and the worker picks it up.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::publishing::{Client, definition, marketplace, setup_with};
use common::worker::{Source, sync_once, write_config};
use common::{Server, output_text, python, python_tuf};

/// `python -m http.server` serving `dir` on a free loopback port; killed when dropped.
struct StaticServer {
    child: Child,
    url: String,
}

impl StaticServer {
    fn start(dir: &Path) -> StaticServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(python())
            .args([
                "-m",
                "http.server",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--directory",
            ])
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let server = StaticServer {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "http.server did not start"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        server
    }
}

impl Drop for StaticServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn export(data: &Path, dir: &Path) -> String {
    let out = marketplace(&[
        "repo",
        "export",
        "--data-dir",
        data.to_str().unwrap(),
        dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", output_text(&out));
    output_text(&out)
}

#[tokio::test]
async fn an_exported_index_syncs_from_a_plain_static_file_server() {
    let dir = tempfile::tempdir().unwrap();
    let m = setup_with(&dir.path().join("m"), &[]);
    let www = dir.path().join("www");
    let tuf = www.join("tuf");
    let first = definition("gateway", "edge", "1.0.0");
    let second = definition("gateway", "edge", "1.1.0");
    {
        let server = Server::start(&m.data);
        let c = Client::new(&server.url);
        for def in [&first, &second] {
            let (status, body) = c.publish_signed(&m.acme_token, def, &[&m.acme]).await;
            assert_eq!(status, 201, "{body}");
        }
    } // the marketplace stops: from here on only the static copy serves the index

    let report = export(&m.data, &tuf);
    assert!(report.contains("10 target files written"), "{report}");
    // The layout the TUF specification gives consistent snapshots.
    let hash = second.hash.trim_start_matches("sha256:");
    assert_eq!(
        std::fs::read(tuf.join(format!("targets/acme/edge/{hash}.1.1.0.yaml"))).unwrap(),
        second.bytes
    );
    for file in [
        "1.root.json",
        "root.json",
        "timestamp.json",
        "1.fundament.json",
        "2.acme.json",
    ] {
        assert!(tuf.join("metadata").join(file).exists(), "{file}");
    }

    let web = StaticServer::start(&www);
    let root = tuf.join("metadata/1.root.json");
    let config = write_config(
        dir.path(),
        &[Source {
            name: "copy",
            url: &web.url,
            root: &root,
            priority: 0,
        }],
    );
    let o = sync_once(&config);
    assert!(o.status.success(), "{}", output_text(&o));
    assert!(
        output_text(&o).contains("copy: 10 definitions (10 downloaded)"),
        "{}",
        output_text(&o)
    );
    let report = python_tuf(
        &web.url,
        &root,
        &dir.path().join("ngclient"),
        &[
            "acme/edge/1.0.0.yaml",
            "acme/edge/1.1.0.yaml",
            "fundament/storage/1.0.0.yaml",
        ],
    );
    assert_eq!(
        report["targets"]["acme/edge/1.1.0.yaml"]["sha256"], hash,
        "{report}"
    );

    // A new version: exporting again writes only what changed, and the worker follows.
    let third = definition("gateway", "edge", "1.2.0");
    {
        let server = Server::start(&m.data);
        let c = Client::new(&server.url);
        let (status, body) = c.publish_signed(&m.acme_token, &third, &[&m.acme]).await;
        assert_eq!(status, 201, "{body}");
    }
    let report = export(&m.data, &tuf);
    assert!(
        report.contains("1 target files written") && report.contains(" unchanged"),
        "{report}"
    );
    let o = sync_once(&config);
    assert!(
        output_text(&o).contains("copy: 11 definitions (1 downloaded)"),
        "{}",
        output_text(&o)
    );
}
