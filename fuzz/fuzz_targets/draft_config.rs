//! The draft path of `generate` / `inspect` / `convert` on arbitrary input: `config.json` text,
//! then (after the first NUL byte) the bytes of `model.safetensors`. The text goes through both
//! JSON config readers (`DraftConfig::from_zlab_json`, `Qwen35Config::from_hf_json`); an accepted
//! config's tensor inventory, reference hyperparameters and safetensors check must follow without
//! a panic, an overflow or an absurd allocation.
#![no_main]

use flashtree::model::draft::index_zlab_safetensors;
use flashtree::model::{DraftConfig, Qwen35Config};
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let (text, weights) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    let file = Path::new("fuzz/config.json");
    if let Ok(hf) = Qwen35Config::from_hf_json(text, file) {
        let _ = hf.config.hparams();
        let _ = hf.config.tensor_inventory().len();
    }
    let Ok(cfg) = DraftConfig::from_zlab_json(text, file) else {
        return;
    };
    let _ = cfg.hparams();
    let _ = cfg.tensor_inventory().len();
    let _ = index_zlab_safetensors(weights, Path::new("fuzz/model.safetensors"), &cfg);
});
