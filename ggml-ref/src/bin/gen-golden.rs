//! Writes the golden vectors (see `ggml_ref::golden`) into the directory given as the
//! only argument, default `golden/`.

use std::path::PathBuf;

fn main() -> std::io::Result<()> {
    let dir = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| "golden".into()));
    std::fs::create_dir_all(&dir)?;
    for (name, bytes) in ggml_ref::golden::files() {
        std::fs::write(dir.join(&name), bytes)?;
    }
    println!("wrote golden vectors to {}", dir.display());
    Ok(())
}
