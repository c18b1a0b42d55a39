//! Shapes of the synthetic presets.

/// Target hyperparameters (the `qwen35.*` keys).
#[derive(Clone, Debug, PartialEq)]
pub struct SynthShape {
    pub n_layer: usize,
    pub d: usize,
    pub ff: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub rope_dims: usize,
    pub rope_sections: [i32; 4],
    pub ssm_groups: usize,
    pub ssm_state: usize,
    pub ssm_vheads: usize,
    pub ssm_vdim: usize,
    pub conv_kernel: usize,
    pub interval: usize,
    pub vocab: usize,
    pub context: usize,
    pub rope_theta: f32,
    pub eps: f32,
    /// Use the real Qwen3.5 vocabulary (needs a `.tiktoken` file) instead of the tiny BPE.
    pub real_vocab: bool,
}

impl SynthShape {
    /// Qwen3.5-27B (qwen35-architecture.md §1).
    pub fn qwen35_27b() -> SynthShape {
        SynthShape {
            n_layer: 64,
            d: 5120,
            ff: 17408,
            heads: 24,
            kv_heads: 4,
            head_dim: 256,
            rope_dims: 64,
            rope_sections: [11, 11, 10, 0],
            ssm_groups: 16,
            ssm_state: 128,
            ssm_vheads: 48,
            ssm_vdim: 128,
            conv_kernel: 4,
            interval: 4,
            vocab: 248_320,
            context: 262_144,
            rope_theta: 1.0e7,
            eps: 1e-6,
            real_vocab: true,
        }
    }

    /// A 4-layer model (3 Gated DeltaNet + 1 attention) whose every row length is a multiple of
    /// 256, so K-quants apply to every matrix as in the real model.
    pub fn tiny() -> SynthShape {
        SynthShape {
            n_layer: 4,
            d: 256,
            ff: 512,
            heads: 4,
            kv_heads: 1,
            head_dim: 64,
            rope_dims: 16,
            rope_sections: [3, 3, 2, 0],
            ssm_groups: 2,
            ssm_state: 64,
            ssm_vheads: 4,
            ssm_vdim: 64,
            conv_kernel: 4,
            interval: 4,
            vocab: 512,
            context: 4096,
            rope_theta: 1.0e7,
            eps: 1e-6,
            real_vocab: false,
        }
    }

    /// Whether layer `i` is Gated DeltaNet.
    pub fn is_recurrent(&self, i: usize) -> bool {
        (i + 1) % self.interval != 0
    }

    pub fn conv_channels(&self) -> usize {
        2 * self.ssm_groups * self.ssm_state + self.ssm_vheads * self.ssm_vdim
    }
}

/// Draft hyperparameters (z-lab `config.json`).
#[derive(Clone, Debug, PartialEq)]
pub struct DraftShape {
    pub n_layer: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub ff: usize,
    /// 0-based target layers; `None` = z-lab's default for the target's layer count.
    pub target_layer_ids: Option<Vec<usize>>,
    pub block_size: usize,
}

impl DraftShape {
    /// z-lab/Qwen3.5-27B-DFlash (dflash-draft.md §3.2).
    pub fn qwen35_27b() -> DraftShape {
        DraftShape {
            n_layer: 5,
            heads: 32,
            kv_heads: 8,
            head_dim: 128,
            ff: 17408,
            target_layer_ids: None,
            block_size: 16,
        }
    }

    pub fn tiny() -> DraftShape {
        DraftShape {
            n_layer: 2,
            heads: 4,
            kv_heads: 1,
            head_dim: 64,
            ff: 512,
            target_layer_ids: Some(vec![0, 2]),
            block_size: 16,
        }
    }
}
