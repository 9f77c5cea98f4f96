// rust-embed does not notice a newly added file on its own; these make Cargo rebuild
// the binary whenever the embedded folders change. They are the script's only inputs:
// any `rerun-if-changed` naming a file the script itself writes (the descriptor set
// below) would make every build stale and recompile the crate each time.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=catalog");
    println!("cargo:rerun-if-changed=static");
    println!("cargo:rerun-if-changed=templates");
    println!("cargo:rerun-if-changed=migrations");
    println!("cargo:rerun-if-changed=proto");
    compile_protos();
}

/// Fundament's contracts, compiled from `proto/` at build time. protox parses them in
/// pure Rust (Debian's `protoc` 3.21 would do, but a build should need nothing beyond
/// cargo), and connectrpc-build turns the descriptors into message types and service
/// traits.
fn compile_protos() {
    const FILES: [&str; 6] = [
        "organization/v1/plugin.proto",
        "catalog/v1/catalog.proto",
        "registry/v1/publication.proto",
        "admin/v1/review.proto",
        "marketplace/v1/marketplace.proto",
        "google/rpc/error_details.proto",
    ];
    let descriptors = protox::compile(FILES, ["proto"]).unwrap_or_else(|e| panic!("{e:?}"));
    let dir = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let out = dir.join("fundament.fds.bin");
    write_if_changed(&out, &protox::prost::Message::encode_to_vec(&descriptors));
    connectrpc_build::Config::new()
        .files(&FILES)
        .descriptor_set(&out)
        // Its directives would name `out`, which this script writes: `proto` above is
        // the real input.
        .emit_rerun_directives(false)
        .include_file("_connectrpc.rs")
        .compile()
        .expect("generating Rust from proto/");
    // The generated docs carry usage sketches marked `rust,ignore`, which `cargo test`
    // would list as ignored doctests among ours; shown as text they read the same.
    for entry in std::fs::read_dir(&dir).expect("OUT_DIR is readable") {
        let path = entry.expect("OUT_DIR is readable").path();
        if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).expect("generated code is UTF-8");
            if text.contains("```rust,ignore") {
                write_if_changed(&path, text.replace("```rust,ignore", "```text").as_bytes());
            }
        }
    }
}

/// Leaves a file (and its modification time) alone when it already holds `bytes`.
fn write_if_changed(path: &std::path::Path, bytes: &[u8]) {
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return;
    }
    std::fs::write(path, bytes).expect("OUT_DIR is writable");
}
