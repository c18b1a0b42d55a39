//! `cargo xtask gpu-bundle` (filled in below).
pub fn run(_args: &[String]) -> Result<(), String> {
    Err("gpu-bundle: not written yet".into())
}
