//! Any byte string given to the GGUF header parser yields a header or an error, never a panic,
//! an out-of-bounds slice or an absurd allocation; every tensor of an accepted header can be
//! sliced and (for supported types) its first blocks dequantized, and the qwen35 / dflash config
//! loaders accept or refuse it cleanly.
#![no_main]

use flashtree::gguf::parse_header;
use flashtree_reference::quant::dequantize;
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(h) = parse_header(data, Path::new("fuzz.gguf")) else {
        return;
    };
    for t in &h.tensors {
        let r = h.tensor_range(&t.name).expect("listed tensor has a range");
        let bytes = &data[r];
        let take = (t.ty.type_size() * 4).min(bytes.len());
        let take = take - take % t.ty.type_size();
        if t.ty.is_supported() {
            let _ = dequantize(t.ty, &bytes[..take]);
        }
    }
    let _ = flashtree::model::Qwen35Config::from_header(&h, None, false);
    let _ = flashtree::model::DraftConfig::from_dflash_header(&h);
});
