//! The checked-in golden vectors are exactly what the live ggml produces now.

#[test]
fn golden_is_current() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../golden");
    let mut stale = Vec::new();
    for (name, bytes) in ggml_ref::golden::files() {
        match std::fs::read(dir.join(&name)) {
            Ok(on_disk) if on_disk == bytes => {}
            Ok(_) => stale.push(format!("{name} differs")),
            Err(e) => stale.push(format!("{name}: {e}")),
        }
    }
    assert!(
        stale.is_empty(),
        "golden/ is stale; run `cargo run -p ggml-ref --bin gen-golden`:\n{}",
        stale.join("\n")
    );
}
