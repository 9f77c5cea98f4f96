// rust-embed does not notice a newly added file on its own; these make Cargo rebuild
// the binary whenever the embedded folders change.
fn main() {
    println!("cargo:rerun-if-changed=catalog");
    println!("cargo:rerun-if-changed=static");
    println!("cargo:rerun-if-changed=templates");
    println!("cargo:rerun-if-changed=migrations");
}
