//! In-process tests of the pages and the JSON API through `app(state).oneshot(...)`.

mod common;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use common::{FUNDAMENT_STYLE, NOW, builtin_yaml, get, send, state, with_version};
use marketplace::catalog::builtin;
use marketplace::definition::Definition;

fn builtins() -> Vec<Definition> {
    builtin::definitions().unwrap()
}

fn names(v: &serde_json::Value) -> Vec<String> {
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn catalog_page_lists_every_builtin() {
    let s = state().await;
    let r = get(&s, "/").await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(
        r.headers[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let all = builtins();
    assert!(
        r.body.contains(&format!("{} plugins", all.len())),
        "count heading"
    );
    for d in &all {
        assert!(
            r.body
                .contains(&format!("data-plugin=\"fundament/{}\"", d.name())),
            "{} listed",
            d.name()
        );
    }
    assert!(r.body.contains("<main"), "main landmark");
    assert!(
        r.body.contains("<label for=\"q\">"),
        "search input is labelled"
    );
}

#[tokio::test]
async fn search_matches_name_description_and_tags() {
    let s = state().await;
    let r = get(&s, "/api/v1/plugins?q=certificates").await.json();
    assert!(names(&r).contains(&"cert-manager".to_owned()));
    assert!(!names(&r).contains(&"storage".to_owned()));
    // Every word must match; a nonsense word empties the result.
    let r = get(&s, "/api/v1/plugins?q=certificates+zzzqqq")
        .await
        .json();
    assert_eq!(r["total"], 0);
    // `%` is literal text, not a wildcard.
    assert_eq!(get(&s, "/api/v1/plugins?q=%25").await.json()["total"], 0);
    // Words match as prefixes of words: `cert` and `manag` both find cert-manager.
    for q in ["cert", "manag", "CERT-MANAGER"] {
        let r = get(&s, &format!("/api/v1/plugins?q={q}")).await.json();
        assert!(names(&r).contains(&"cert-manager".to_owned()), "{q}: {r}");
    }
    // FTS5 syntax in the query is treated as words, never as operators.
    let r = get(&s, "/api/v1/plugins?q=%22storage%22+OR+NEAR(").await;
    assert_eq!(r.status, StatusCode::OK);
    // Searching by an exact name ranks that plugin first.
    let r = get(&s, "/api/v1/plugins?q=storage").await.json();
    assert_eq!(names(&r)[0], "storage");
}

#[tokio::test]
async fn requirement_filters_exclude_what_needs_approval() {
    let s = state().await;
    let all = builtins();
    let expect: Vec<String> = {
        let mut v: Vec<String> = all
            .iter()
            .filter(|d| {
                let a = d.approval();
                !a.internet_access && !a.privileged && !a.kube_system_deployment
            })
            .map(|d| d.name().to_owned())
            .collect();
        v.sort();
        v
    };
    assert!(
        !expect.is_empty() && expect.len() < all.len(),
        "the catalog exercises the filter"
    );
    let r = get(
        &s,
        "/api/v1/plugins?no_internet=true&not_privileged=true&no_kube_system=true&sort=name",
    )
    .await
    .json();
    assert_eq!(names(&r), expect);
    // The page accepts checkbox values and keeps them checked.
    let page = get(&s, "/?no_internet=on&not_privileged=on&no_kube_system=on").await;
    assert!(
        page.body
            .contains(&format!("{} plugins match", expect.len()))
            || page
                .body
                .contains(&format!("{} plugin match", expect.len()))
    );
    assert!(page.body.contains("name=\"no_internet\" checked"));
}

#[tokio::test]
async fn tag_and_publisher_filters() {
    let s = state().await;
    let tag = "tls";
    let expect = builtins()
        .iter()
        .filter(|d| d.tags().any(|t| t == tag))
        .count();
    assert!(expect > 0);
    let r = get(&s, &format!("/api/v1/plugins?tag={tag}")).await.json();
    assert_eq!(r["total"], expect);
    assert_eq!(
        get(&s, "/api/v1/plugins?publisher=fundament").await.json()["total"],
        builtins().len()
    );
    assert_eq!(
        get(&s, "/api/v1/plugins?publisher=nobody").await.json()["total"],
        0
    );
}

#[tokio::test]
async fn paging_and_sorting() {
    let s = state().await;
    let n = builtins().len();
    let p1 = get(&s, "/api/v1/plugins?per_page=3&sort=name").await.json();
    assert_eq!(
        (
            p1["total"].as_u64().unwrap() as usize,
            names(&p1).len(),
            p1["page"].as_u64()
        ),
        (n, 3, Some(1))
    );
    let last_page = n.div_ceil(3);
    let pl = get(
        &s,
        &format!("/api/v1/plugins?per_page=3&sort=name&page={last_page}"),
    )
    .await
    .json();
    assert_eq!(names(&pl).len(), n - 3 * (last_page - 1));
    let mut sorted = names(&p1);
    sorted.sort();
    assert_eq!(names(&p1), sorted, "sort=name is alphabetical");
    let html = get(&s, "/?per_page=3&sort=name").await.body;
    assert!(
        html.replace("&#38;", "&amp;")
            .contains("rel=\"next\" href=\"/?sort=name&amp;per_page=3&amp;page=2\""),
        "next link keeps the query: {html}"
    );
    assert!(html.contains(&format!("Page 1 of {last_page}")));
}

#[tokio::test]
async fn bad_parameters_are_refused_with_the_parameter_named() {
    let s = state().await;
    for (uri, needle) in [
        ("/api/v1/plugins?page=0", "`page`"),
        ("/api/v1/plugins?per_page=1000", "`per_page`"),
        ("/api/v1/plugins?sort=random", "`sort`"),
        ("/api/v1/plugins?bogus=1", "bogus"),
        ("/api/v1/plugins?no_internet=perhaps", "`no_internet`"),
    ] {
        let r = get(&s, uri).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{uri}");
        let j = r.json();
        assert_eq!(j["error"]["code"], "bad_parameter", "{uri}");
        assert!(
            j["error"]["message"].as_str().unwrap().contains(needle),
            "{uri}: {j}"
        );
    }
    let page = get(&s, "/?page=abc").await;
    assert_eq!(page.status, StatusCode::BAD_REQUEST);
    assert!(
        page.body
            .contains("<h1 id=\"error-title\">Bad request</h1>")
    );
}

#[tokio::test]
async fn plugin_page_shows_what_an_admin_needs() {
    let s = state().await;
    let def = builtins()
        .into_iter()
        .find(|d| d.name() == "cert-manager")
        .unwrap();
    let r = get(&s, "/plugins/fundament/cert-manager").await;
    assert_eq!(r.status, StatusCode::OK);
    let b = &r.body;
    assert!(b.contains(&format!("<h1>{}</h1>", def.display_name())));
    assert!(b.contains(&def.hash), "definition hash shown");
    assert!(
        b.contains("<dt>Namespace</dt><dd><code>plugin-cert-manager</code></dd>"),
        "the namespace Fundament installs into is shown"
    );
    assert!(b.contains(&def.image.digest), "image digest shown");
    assert!(b.contains("Requires approval") && b.contains("Internet access"));
    assert!(
        b.contains("policy-engine <span class=\"badge\">not in catalog</span>"),
        "missing suggestion marked"
    );
    assert!(
        b.contains("href=\"/plugins/fundament/gateway\""),
        "suggestion links to the plugin"
    );
    assert!(b.contains(&format!(
        "/plugins/fundament/cert-manager/versions/{}/definition.yaml",
        def.version_text()
    )));
    for entry in &def.manifest.spec.menu.organization {
        assert!(b.contains(entry.crd.as_str()), "menu entry {}", *entry.crd);
    }
    // Fundament's menu entries have list and detail, nothing else.
    let menu = section(b, "<table class=\"menu\">", "</table>");
    assert!(
        menu.contains("<th scope=\"col\">Detail</th></tr>"),
        "{menu}"
    );
    assert!(!menu.contains("Edit"), "{menu}");
    assert!(!b.contains("not-installable"), "a built-in is installable");
    assert!(
        b.contains("read-write") || b.contains("admin") || b.contains(">read<"),
        "RBAC summarised"
    );
}

/// The text of the HTML element that starts at `start` up to the first `end` after it.
fn section<'a>(body: &'a str, start: &str, end: &str) -> &'a str {
    let from = body
        .find(start)
        .unwrap_or_else(|| panic!("{start} not in the page"));
    let len = body[from..].find(end).expect("element is closed");
    &body[from..from + len]
}

#[tokio::test]
async fn capabilities_count_as_requirements_on_pages_filters_and_the_api() {
    let s = state().await;
    let def = Definition::parse(FUNDAMENT_STYLE.as_bytes()).unwrap();
    assert!(def.manifest.spec.requirements.is_none());
    s.store.insert_version("example", &def, NOW).await.unwrap();

    // The plugin page lists internet access under "Requires approval".
    let page = get(&s, "/plugins/example/webhook-relay").await;
    assert_eq!(page.status, StatusCode::OK);
    let approve = section(&page.body, "id=\"approve\"", "</section>");
    assert!(
        approve.contains("<strong>Internet access</strong>"),
        "{approve}"
    );
    assert!(!approve.contains("no internet access"), "{approve}");

    // Its catalog card carries the badge.
    let catalog = get(&s, "/?q=webhook").await;
    let card = section(
        &catalog.body,
        "data-plugin=\"example/webhook-relay\"",
        "</article>",
    );
    assert!(
        card.contains("<li class=\"badge warn\">Internet access</li>"),
        "{card}"
    );

    // `no_internet` leaves it out, in the API and on the page; other filters keep it.
    let api = get(&s, "/api/v1/plugins?q=webhook").await.json();
    assert_eq!(names(&api), ["webhook-relay"]);
    assert_eq!(api["items"][0]["internet_access"], true);
    let api = get(&s, "/api/v1/plugins?q=webhook&no_internet=true")
        .await
        .json();
    assert_eq!(api["total"], 0);
    let api = get(
        &s,
        "/api/v1/plugins?q=webhook&not_privileged=true&no_kube_system=true",
    )
    .await
    .json();
    assert_eq!(names(&api), ["webhook-relay"]);
    let filtered = get(&s, "/?no_internet=on").await;
    assert_eq!(filtered.status, StatusCode::OK);
    assert!(
        !filtered
            .body
            .contains("data-plugin=\"example/webhook-relay\"")
    );
    assert!(filtered.body.contains("data-plugin=\"fundament/gateway\""));

    // The detail API states what an admin approves; `manifest` is the definition's own
    // shape, Fundament's, with nothing of the older design in it.
    let detail = get(&s, "/api/v1/plugins/example/webhook-relay")
        .await
        .json();
    assert_eq!(
        detail["requirements"],
        serde_json::json!({
            "internet_access": true, "kube_system_deployment": false, "privileged": false,
        })
    );
    assert_eq!(detail["cluster_capabilities"], serde_json::json!([]));
    assert!(detail["manifest"]["spec"].get("requirements").is_none());
    assert_eq!(
        detail["manifest"]["spec"]["permissions"]["capabilities"],
        serde_json::json!(["internet_access", "read_events"])
    );
}

#[tokio::test]
async fn reverse_dependencies_are_listed() {
    let s = state().await;
    let dependents: Vec<String> = builtins()
        .iter()
        .filter(|d| d.extras.dependencies.iter().any(|x| x == "storage"))
        .map(|d| d.name().to_owned())
        .collect();
    assert!(!dependents.is_empty());
    let j = get(&s, "/api/v1/plugins/fundament/storage").await.json();
    let required_by: Vec<&str> = j["required_by"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    let mut expected: Vec<&str> = dependents.iter().map(String::as_str).collect();
    expected.sort();
    assert_eq!(required_by, expected);
    let page = get(&s, "/plugins/fundament/storage").await.body;
    for d in &dependents {
        assert!(page.contains(&format!("href=\"/plugins/fundament/{d}\"")));
    }
}

#[tokio::test]
async fn versions_grouped_by_major_install_into_one_namespace() {
    let s = state().await;
    for v in ["v1.20.0", "v2.0.0"] {
        s.store
            .insert_version("fundament", &with_version("cert-manager", v), NOW + 10)
            .await
            .unwrap();
    }
    let j = get(&s, "/api/v1/plugins/fundament/cert-manager")
        .await
        .json();
    assert_eq!(j["latest"]["version"], "v2.0.0");
    // Fundament installs every version of a plugin into `plugin-<name>`.
    assert_eq!(j["namespace"], "plugin-cert-manager");
    let majors: Vec<u64> = j["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["major"].as_u64().unwrap())
        .collect();
    assert_eq!(majors, [2, 1]);
    assert!(j["versions"][1].get("namespace").is_none());
    let v = get(&s, "/api/v1/plugins/fundament/cert-manager/versions")
        .await
        .json();
    assert_eq!(v["items"].as_array().unwrap().len(), 3);
    let page = get(&s, "/plugins/fundament/cert-manager").await.body;
    assert!(page.contains("Major 2") && page.contains("Major 1"));
}

#[tokio::test]
async fn raw_definition_is_the_exact_bytes() {
    let s = state().await;
    let yaml = builtin_yaml("gateway");
    let def = Definition::parse(yaml.as_bytes()).unwrap();
    for uri in [
        format!(
            "/api/v1/plugins/fundament/gateway/versions/{}/definition",
            def.version_text()
        ),
        format!(
            "/plugins/fundament/gateway/versions/{}/definition.yaml",
            def.version_text()
        ),
    ] {
        let r = get(&s, &uri).await;
        assert_eq!(r.status, StatusCode::OK, "{uri}");
        assert_eq!(r.body, yaml);
        assert_eq!(
            r.headers[header::ETAG],
            format!("\"{}\"", def.hash).as_str()
        );
        assert!(
            r.headers[header::CONTENT_TYPE]
                .to_str()
                .unwrap()
                .starts_with("application/yaml")
        );
    }
    let uri = format!(
        "/api/v1/plugins/fundament/gateway/versions/{}/definition",
        def.version_text()
    );
    let req = Request::get(&uri)
        .header(header::IF_NONE_MATCH, format!("\"{}\"", def.hash))
        .body(Body::empty())
        .unwrap();
    let cached = send(&s, req).await;
    assert_eq!(cached.status, StatusCode::NOT_MODIFIED);
    assert!(cached.body.is_empty());
    let req = Request::get(&uri)
        .header(header::IF_NONE_MATCH, "\"sha256:other\"")
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&s, req).await.status, StatusCode::OK);
    let missing = get(
        &s,
        "/api/v1/plugins/fundament/gateway/versions/9.9.9/definition",
    )
    .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(missing.json()["error"]["code"], "not_found");
}

#[tokio::test]
async fn not_found_is_json_for_the_api_and_a_page_otherwise() {
    let s = state().await;
    let api = get(&s, "/api/v1/plugins/fundament/nope").await;
    assert_eq!(api.status, StatusCode::NOT_FOUND);
    assert!(
        api.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("fundament/nope")
    );
    let page = get(&s, "/plugins/fundament/nope").await;
    assert_eq!(page.status, StatusCode::NOT_FOUND);
    assert!(page.body.contains("Page not found"));
    let other = get(&s, "/no/such/page").await;
    assert_eq!(other.status, StatusCode::NOT_FOUND);
    assert!(
        other.headers[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    assert_eq!(
        get(&s, "/api/v2/whatever").await.json()["error"]["code"],
        "not_found"
    );
}

#[tokio::test]
async fn author_text_is_escaped_in_pages() {
    let s = state().await;
    let yaml = builtin_yaml("backup").replacen(
        "displayName:",
        "displayName: \"<script>alert(1)</script>\"\n  x-was-displayName:",
        1,
    );
    // Drop the original displayName line so the document stays valid.
    let yaml: String = yaml
        .lines()
        .filter(|l| !l.contains("x-was-displayName"))
        .collect::<Vec<_>>()
        .join("\n");
    let def = Definition::parse(yaml.as_bytes()).unwrap();
    s.store.insert_version("evil", &def, NOW).await.unwrap();
    let page = get(&s, "/plugins/evil/backup").await.body;
    assert!(!page.contains("<script>alert(1)</script>"));
    assert!(
        page.contains("&lt;script&gt;alert(1)&lt;/script&gt;") || page.contains("&#60;script&#62;")
    );
}

#[tokio::test]
async fn health_readiness_and_static_files() {
    let s = state().await;
    assert_eq!(get(&s, "/healthz").await.json()["status"], "ok");
    assert_eq!(get(&s, "/readyz").await.json()["status"], "ready");
    let page = get(&s, "/").await;
    let csp = page.headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("default-src 'none'") && csp.contains("style-src 'self'"),
        "{csp}"
    );
    assert_eq!(page.headers["x-content-type-options"], "nosniff");
    let css = get(&s, "/static/style.css").await;
    assert_eq!(css.status, StatusCode::OK);
    assert!(css.body.contains("prefers-color-scheme: dark"));
    assert_eq!(
        get(&s, "/static/nope.css").await.status,
        StatusCode::NOT_FOUND
    );
    s.store.close().await;
    let r = get(&s, "/readyz").await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test]
async fn oversized_headers_are_refused() {
    let s = state().await;
    let req = Request::get("/")
        .header("x-filler", "a".repeat(20_000))
        .body(Body::empty())
        .unwrap();
    let r = send(&s, req).await;
    assert_eq!(r.status, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    assert_eq!(r.json()["error"]["code"], "headers_too_large");
}

#[tokio::test]
async fn oversized_bodies_are_refused_before_they_are_read() {
    let s = state().await;
    let body = vec![b'a'; marketplace::api::MAX_BODY_BYTES + 1];
    let req = Request::post("/api/v1/plugins")
        .header(header::CONTENT_LENGTH, body.len())
        .body(Body::from(body))
        .unwrap();
    assert_eq!(send(&s, req).await.status, StatusCode::PAYLOAD_TOO_LARGE);

    // Publisher write routes take a whole signed role: a larger cap, and nothing is read
    // before the token is checked.
    let big = vec![b'a'; marketplace::api::MAX_BODY_BYTES * 2];
    let req = Request::post("/api/v1/publishers/acme/definitions")
        .header(header::CONTENT_LENGTH, big.len())
        .header(header::AUTHORIZATION, "Bearer mkt_unknown")
        .body(Body::from(big))
        .unwrap();
    assert_eq!(send(&s, req).await.status, StatusCode::UNAUTHORIZED);
    let huge = vec![b'a'; marketplace::api::MAX_PUBLISH_BODY_BYTES + 1];
    let req = Request::post("/api/v1/publishers/acme/definitions")
        .header(header::CONTENT_LENGTH, huge.len())
        .body(Body::from(huge))
        .unwrap();
    let r = send(&s, req).await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(r.json()["error"]["code"], "payload_too_large");
}

#[tokio::test]
async fn signed_index_page_before_init() {
    let s = state().await;
    let r = get(&s, "/signed-index").await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.body.contains("not initialized"));
}
