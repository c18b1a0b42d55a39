//! Any byte string given to the safetensors header check of the DFlash draft loader yields a
//! tensor table or an error, never a panic or an absurd allocation.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    if let Ok(t) = flashtree::model::safetensors_io::read_safetensors(data, Path::new("fuzz.safetensors")) {
        for e in t.tensors() {
            let _ = t.data(&e.name);
        }
    }
});
