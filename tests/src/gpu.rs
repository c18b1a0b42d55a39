//! Getting the GPU in tests, or skipping visibly.
//!
//! On a machine without the NVIDIA driver every GPU test prints `skipped: no CUDA driver` to the
//! real stderr (bypassing libtest's capture, so the skip is always visible) and returns. With
//! `FLASHTREE_REQUIRE_GPU=1` (set by `.gpu-bundle/run.sh test`) a missing GPU is a failure. Any
//! other GPU error (driver present but the PTX does not load, …) fails the test: only a missing
//! driver skips.

use std::collections::HashSet;
use std::io::Write;
use std::sync::{Mutex, OnceLock};

use flashtree::gpu::{Gpu, GpuError};

static GPU: OnceLock<Result<Gpu, String>> = OnceLock::new();
static NO_DRIVER: OnceLock<bool> = OnceLock::new();
static REPORTED: Mutex<Option<HashSet<String>>> = Mutex::new(None);

/// The shared GPU, or `None` after printing the skip line for `test`.
pub fn gpu_or_skip(test: &str) -> Option<&'static Gpu> {
    let g = GPU.get_or_init(|| match Gpu::try_new() {
        Ok(g) => Ok(g),
        Err(GpuError::NoDriver) => {
            let _ = NO_DRIVER.set(true);
            Err(GpuError::NoDriver.to_string())
        }
        Err(e) => Err(e.to_string()),
    });
    match g {
        Ok(g) => Some(g),
        Err(e) if NO_DRIVER.get().copied().unwrap_or(false) => {
            if std::env::var("FLASHTREE_REQUIRE_GPU").is_ok_and(|v| v == "1") {
                panic!("FLASHTREE_REQUIRE_GPU=1 but {e}");
            }
            // Once per test (proptests call this for every case).
            let mut reported = REPORTED.lock().unwrap_or_else(|p| p.into_inner());
            if reported.get_or_insert_with(HashSet::new).insert(test.to_string()) {
                let _ = writeln!(std::io::stderr(), "skipped: no CUDA driver ({test})");
            }
            None
        }
        Err(e) => panic!("GPU present but unusable: {e}"),
    }
}
