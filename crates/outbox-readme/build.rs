//! Copies the workspace README into OUT_DIR with its unlabelled code fences
//! (the demo's output, the ASCII diagram) labelled `text`: rustdoc takes an
//! unlabelled block for Rust, while the README keeps them bare because
//! `tests/it/cli.rs` finds the demo's output by its bare fence.

use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    // In the workspace, the workspace README; in a packaged copy (`cargo
    // package` verifies one), the copy Cargo put next to the manifest.
    let readme = [dir.join("README.md"), dir.join("../../README.md")]
        .into_iter()
        .find(|p| p.exists())
        .expect("the workspace README.md");
    println!("cargo::rerun-if-changed={}", readme.display());
    let text = std::fs::read_to_string(&readme).expect("the workspace README.md");
    let mut out = String::with_capacity(text.len());
    let mut in_block = false;
    for line in text.lines() {
        if line.starts_with("```") {
            if !in_block && line == "```" {
                out.push_str("```text");
            } else {
                out.push_str(line);
            }
            in_block = !in_block;
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    std::fs::write(out_dir.join("README.md"), out).expect("write OUT_DIR/README.md");
}
