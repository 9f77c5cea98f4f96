//! End-to-end check of the server-rendered pages in a real browser.
//!
//! Starts the real `marketplace` binary on a free port with an empty data directory,
//! renders pages with headless Chromium (`--dump-dom`) and asserts on the resulting DOM,
//! then takes desktop and mobile screenshots into `target/screenshots/` for people to look at.
//!
//! Needs Debian's `chromium` package (`apt-get install chromium`). Without it the test fails
//! on purpose: a browser test that silently skips is a browser test that never runs.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const CHROMIUM_TIMEOUT: Duration = Duration::from_secs(60);
const SERVER_START_TIMEOUT: Duration = Duration::from_secs(60);

#[test]
fn pages_render_in_a_real_browser() {
    let browser = chromium();
    let catalog = read_catalog();
    assert!(
        !catalog.is_empty(),
        "no plugin definitions found in catalog/*.yaml"
    );
    let server = Server::start();

    // Catalog page: every built-in plugin, one card each, and the count heading.
    let dom = browser.dump_dom(&server.url("/"));
    let count = format!(">{} plugins<", catalog.len());
    assert!(
        dom.contains(&count),
        "catalog page lacks the heading {count:?}:\n{dom}"
    );
    for p in &catalog {
        assert!(
            dom.contains(&p.card()),
            "catalog page lacks the card {:?}:\n{dom}",
            p.card()
        );
        let name = escape_text(&p.display_name);
        assert!(
            dom.contains(&name),
            "catalog page lacks the display name {name:?}:\n{dom}"
        );
    }

    // Filtered page: plugins needing internet access or privileged containers disappear.
    let dom = browser.dump_dom(&server.url("/?no_internet=on&not_privileged=on"));
    let (hidden, shown): (Vec<&Plugin>, Vec<&Plugin>) =
        catalog.iter().partition(|p| p.internet || p.privileged);
    assert!(
        !hidden.is_empty() && !shown.is_empty(),
        "the catalog no longer exercises the requirement filters"
    );
    for p in &hidden {
        assert!(
            !dom.contains(&p.card()),
            "filtered page still shows {}:\n{dom}",
            p.name
        );
    }
    for p in &shown {
        assert!(
            dom.contains(&p.card()),
            "filtered page lost {}:\n{dom}",
            p.name
        );
    }
    let count = format!(
        ">{} plugin{} match<",
        shown.len(),
        if shown.len() == 1 { "" } else { "s" }
    );
    assert!(
        dom.contains(&count),
        "filtered page lacks the heading {count:?}:\n{dom}"
    );

    // Plugin page.
    let cert_manager = catalog
        .iter()
        .find(|p| p.name == "cert-manager")
        .expect("catalog/cert-manager.yaml");
    let dom = browser.dump_dom(&server.url("/plugins/fundament/cert-manager"));
    assert_eq!(
        h1(&dom),
        escape_text(&cert_manager.display_name),
        "plugin page h1:\n{dom}"
    );
    assert!(
        dom.contains("<code>plugin-cert-manager</code>"),
        "plugin page lacks the namespace:\n{dom}"
    );
    assert!(
        has_sha256(&dom),
        "plugin page lacks a sha256:<64 hex> definition hash:\n{dom}"
    );
    assert!(
        dom.contains(">Requires approval</h2>"),
        "plugin page lacks the 'Requires approval' section:\n{dom}"
    );
    let link = dom
        .find(">Download definition (YAML)</a>")
        .expect("plugin page lacks the download link");
    let anchor = &dom[dom[..link]
        .rfind("<a ")
        .expect("download link is not an <a>")..link];
    assert!(
        anchor.contains("href=\""),
        "download link has no href: {anchor}"
    );

    // Unknown plugin: the friendly 404 page, not a bare error.
    let dom = browser.dump_dom(&server.url("/plugins/fundament/nope"));
    assert_eq!(h1(&dom), "Page not found", "missing plugin page:\n{dom}");
    assert!(
        dom.contains("<title>Page not found"),
        "missing plugin page title:\n{dom}"
    );

    // Screenshots, for people (and a sanity check that something was painted).
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target dir")
        .join("screenshots");
    std::fs::create_dir_all(&dir).expect("create target/screenshots");
    let shots = [
        ("catalog-desktop", "/", (1280, 2000)),
        ("catalog-mobile", "/", (390, 1600)),
        (
            "catalog-filtered-desktop",
            "/?no_internet=on&not_privileged=on",
            (1280, 2000),
        ),
        (
            "plugin-desktop",
            "/plugins/fundament/cert-manager",
            (1280, 2000),
        ),
        (
            "plugin-mobile",
            "/plugins/fundament/cert-manager",
            (390, 1600),
        ),
        ("not-found-desktop", "/plugins/fundament/nope", (1280, 2000)),
    ];
    for (name, path, size) in shots {
        let file = dir.join(format!("{name}.png"));
        let _ = std::fs::remove_file(&file);
        browser.screenshot(&server.url(path), &file, size);
        let png = std::fs::read(&file)
            .unwrap_or_else(|e| panic!("screenshot {} missing: {e}", file.display()));
        assert!(
            png.starts_with(b"\x89PNG\r\n\x1a\n"),
            "{} is not a PNG",
            file.display()
        );
        assert!(
            png.len() > 10 * 1024,
            "{} is suspiciously small ({} bytes)",
            file.display(),
            png.len()
        );
        let dimension = |at: usize| u32::from_be_bytes(png[at..at + 4].try_into().unwrap());
        assert_eq!(
            (dimension(16), dimension(20)),
            size,
            "{} has the wrong size",
            file.display()
        );
        eprintln!("screenshot: {} ({} KB)", file.display(), png.len() / 1024);
    }
}

#[test]
fn the_plugin_page_fits_its_window_whatever_its_install_box_says() {
    // A first start without internet: every built-in's image fails to mirror, and the
    // Install box quotes the whole `repo:sha256:<64 hex>` reference, an unbreakable
    // word. ghcr.io's images are pulled from a closed loopback port, so the test stays
    // on loopback and the failure comes at once.
    let dir = tempfile::tempdir().unwrap();
    let upstreams = dir.path().join("upstreams.yaml");
    std::fs::write(
        &upstreams,
        "otherHosts: skip\nupstreams:\n  - host: 127.0.0.1:9\n    insecure: true\n  - host: ghcr.io\n    endpoint: 127.0.0.1:9\n",
    )
    .unwrap();
    let browser = chromium();
    let server = Server::start_with(
        &[("MARKETPLACE_MIRROR", "on")],
        &["--upstreams", upstreams.to_str().unwrap()],
    );
    let page = server.url("/plugins/fundament/cert-manager");
    let deadline = Instant::now() + Duration::from_secs(60);
    let dom = loop {
        let dom = browser.dump_dom(&page);
        if dom.contains("mirror-failed") {
            break dom;
        }
        assert!(Instant::now() < deadline, "the mirror never failed:\n{dom}");
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(dom.contains("Mirror failed: 127.0.0.1:9/fundament-oss/plugins/cert-manager"));

    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target dir")
        .join("screenshots");
    std::fs::create_dir_all(&dir).expect("create target/screenshots");
    for (name, size) in [
        ("plugin-mirror-failed-desktop", (1280, 1600)),
        ("plugin-mirror-failed-mobile", (390, 2400)),
    ] {
        let file = dir.join(format!("{name}.png"));
        let _ = std::fs::remove_file(&file);
        browser.screenshot(&page, &file, size);
        let shot = Screenshot::read(&file);
        assert_eq!((shot.width, shot.height), size, "{}", file.display());
        // Nothing is painted in the page's right margin below the site header (which
        // spans the window, two lines tall on a phone): content wider than the window
        // would be, cut off where the scrollbar is hidden.
        let (width, height) = size;
        let margin = if width >= 1280 { 24 } else { 8 };
        let below_header = (0..200)
            .find(|&y| shot.pixel(width - 1, y) == [255, 255, 255])
            .expect("the site header ends within 200 pixels");
        for y in below_header..height {
            for x in width - margin..width {
                assert_eq!(
                    shot.pixel(x, y),
                    [255, 255, 255],
                    "{} paints at ({x}, {y}), in the right margin: something is wider than the window",
                    file.display()
                );
            }
        }
        eprintln!("screenshot: {}", file.display());
    }
}

/// A screenshot, decoded to 8-bit RGB(A).
struct Screenshot {
    width: u32,
    height: u32,
    channels: usize,
    pixels: Vec<u8>,
}

impl Screenshot {
    fn read(file: &Path) -> Screenshot {
        let mut decoder = png::Decoder::new(std::io::BufReader::new(
            std::fs::File::open(file).expect("screenshot written"),
        ));
        decoder.set_transformations(png::Transformations::normalize_to_color8());
        let mut reader = decoder.read_info().expect("a PNG");
        let mut pixels = vec![0; reader.output_buffer_size().expect("a sane size")];
        let info = reader.next_frame(&mut pixels).expect("one frame");
        Screenshot {
            width: info.width,
            height: info.height,
            channels: info.color_type.samples(),
            pixels,
        }
    }

    fn pixel(&self, x: u32, y: u32) -> [u8; 3] {
        let at = (y as usize * self.width as usize + x as usize) * self.channels;
        [self.pixels[at], self.pixels[at + 1], self.pixels[at + 2]]
    }
}

// ---------------------------------------------------------------------------------------------
// The server under test

/// The real binary, listening on a free port; killed when dropped.
struct Server {
    child: Child,
    base: String,
    _data: tempfile::TempDir,
}

impl Server {
    fn start() -> Server {
        // The built-ins pin images on the internet: tests stay on loopback, so the
        // mirror is off unless a test turns it on with its own upstreams.
        Server::start_with(&[("MARKETPLACE_MIRROR", "off")], &[])
    }

    fn start_with(env: &[(&str, &str)], args: &[&str]) -> Server {
        let data = tempfile::tempdir().expect("temp data dir");
        let mut child = Command::new(env!("CARGO_BIN_EXE_marketplace"))
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data.path())
            .args(args)
            .env("MARKETPLACE_LOG", "warn")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the marketplace binary");

        // Read the one stdout line on a thread, so a server that hangs cannot hang the test.
        let stdout = child.stdout.take().expect("child stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let mut server = Server {
            child,
            base: String::new(),
            _data: data,
        };
        let line = rx.recv_timeout(SERVER_START_TIMEOUT).unwrap_or_default();
        let Some(base) = line.trim().strip_prefix("marketplace listening on ") else {
            let status = server.child.try_wait().ok().flatten();
            panic!(
                "server did not announce its address (got {line:?}, exit status {status:?}); see its stderr above"
            );
        };
        server.base = base.trim_end_matches('/').to_owned();
        server
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------------------------
// Headless Chromium

struct Chromium(PathBuf);

/// Finds Debian's chromium, or fails the test saying how to install it.
fn chromium() -> Chromium {
    let found = std::env::var_os("CHROMIUM")
        .map(PathBuf::from)
        .into_iter()
        .chain(["/usr/bin/chromium", "/usr/bin/chromium-browser"].map(PathBuf::from))
        .find(|p| p.is_file());
    match found {
        Some(path) => Chromium(path),
        None => panic!(
            "headless Chromium is required for this test but was not found at /usr/bin/chromium.\n\
             Install it with `apt-get install chromium` (Debian), or set CHROMIUM=/path/to/chromium."
        ),
    }
}

impl Chromium {
    /// The DOM after the page has loaded, serialized as HTML.
    fn dump_dom(&self, url: &str) -> String {
        let out = self.run(&["--dump-dom", url]);
        assert!(
            out.contains("</html>"),
            "chromium --dump-dom {url} printed no document:\n{out}"
        );
        out
    }

    fn screenshot(&self, url: &str, file: &Path, (width, height): (u32, u32)) {
        let shot = format!("--screenshot={}", file.display());
        let size = format!("--window-size={width},{height}");
        self.run(&[&shot, &size, "--hide-scrollbars", url]);
    }

    /// Runs one headless session in a fresh profile; returns stdout. Killed after a timeout.
    fn run(&self, args: &[&str]) -> String {
        let profile = tempfile::tempdir().expect("temp chromium profile");
        let mut child = Command::new(&self.0)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
            ])
            .args([
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.0.display()));
        let stdout = drain(child.stdout.take().expect("chromium stdout"));
        let stderr = drain(child.stderr.take().expect("chromium stderr"));

        let deadline = Instant::now() + CHROMIUM_TIMEOUT;
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for chromium") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("chromium {args:?} took longer than {CHROMIUM_TIMEOUT:?}; killed it");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let (stdout, stderr) = (stdout.join().unwrap(), stderr.join().unwrap());
        assert!(
            status.success(),
            "chromium {args:?} failed with {status}:\n{stderr}"
        );
        stdout
    }
}

fn drain(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = pipe.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    })
}

// ---------------------------------------------------------------------------------------------
// The built-in catalog, read with a line scan (enough for these flat, hand-written files)

struct Plugin {
    name: String,
    display_name: String,
    internet: bool,
    privileged: bool,
}

impl Plugin {
    /// The opening tag of this plugin's card on the catalog page.
    fn card(&self) -> String {
        format!(
            "<li class=\"card\" data-plugin=\"fundament/{}\">",
            self.name
        )
    }
}

fn read_catalog() -> Vec<Plugin> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("catalog");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("catalog entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        // `NAME.extras.yaml`: a companion document, not a definition.
        .filter(|p| !p.to_string_lossy().ends_with(".extras.yaml"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|file| {
            let text = std::fs::read_to_string(file).expect("read catalog file");
            let field = |key: &str| {
                text.lines()
                    .find_map(|l| {
                        l.trim_start()
                            .strip_prefix(key)?
                            .strip_prefix(':')
                            .map(yaml_scalar)
                    })
                    .unwrap_or_else(|| panic!("{} has no `{key}:`", file.display()))
            };
            // A capability name appears in these files only in
            // `spec.permissions.capabilities`, as a list item or in a flow list.
            let capability = |name: &str| {
                text.lines().any(|l| {
                    let code = l.split('#').next().unwrap_or_default();
                    code.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .any(|word| word == name)
                })
            };
            Plugin {
                name: field("name"),
                display_name: field("displayName"),
                internet: capability("internet_access"),
                privileged: capability("privileged"),
            }
        })
        .collect()
}

/// A plain or quoted one-line YAML scalar, without a trailing comment.
fn yaml_scalar(raw: &str) -> String {
    let v = raw.split(" #").next().unwrap_or("").trim();
    let unquoted = v.strip_prefix('"').and_then(|s| s.strip_suffix('"'));
    let unquoted = unquoted.or_else(|| v.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')));
    unquoted.unwrap_or(v).to_owned()
}

// ---------------------------------------------------------------------------------------------
// Small DOM helpers (Chromium's serializer is predictable enough for string matching)

/// Text as Chromium serializes it inside an element.
fn escape_text(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The inner HTML of the first `<h1>`.
fn h1(dom: &str) -> String {
    let start = dom.find("<h1").expect("page has no <h1>");
    let inner = &dom[start..];
    let inner = &inner[inner.find('>').expect("unterminated <h1") + 1..];
    inner[..inner.find("</h1>").expect("unclosed <h1>")]
        .trim()
        .to_owned()
}

fn has_sha256(dom: &str) -> bool {
    dom.match_indices("sha256:").any(|(i, m)| {
        let hex = &dom.as_bytes()[i + m.len()..];
        hex.len() >= 64
            && hex[..64]
                .iter()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    })
}
