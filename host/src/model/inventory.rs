//! Expected tensors (name, `ne` shape, allowed types) and their check against a file's table.

use super::error::ModelError;
use crate::gguf::GgmlType;
use std::path::Path;

/// What a tensor is for, which decides the types it may have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TensorRole {
    /// A matrix multiplied by activations (or an embedding table): any type with a dequantizer.
    Matrix,
    /// A vector or small parameter (norm weights, `ssm_a`, `ssm_dt.bias`, conv kernels): floats.
    Vector,
}

impl TensorRole {
    /// Types a tensor of this role may have.
    pub fn allowed(self) -> &'static [GgmlType] {
        match self {
            TensorRole::Matrix => &[
                GgmlType::F32,
                GgmlType::F16,
                GgmlType::BF16,
                GgmlType::Q8_0,
                GgmlType::Q4_0,
                GgmlType::Q4_K,
                GgmlType::Q5_K,
                GgmlType::Q6_K,
            ],
            TensorRole::Vector => &[GgmlType::F32, GgmlType::F16, GgmlType::BF16],
        }
    }
}

/// One expected tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct ExpectedTensor {
    pub name: String,
    /// `ne` order (contiguous dimension first).
    pub dims: Vec<u64>,
    pub role: TensorRole,
    /// Whether the file may omit it.
    pub optional: bool,
    /// Which hyperparameters the shape comes from (for error messages).
    pub why: String,
}

impl ExpectedTensor {
    pub fn new(
        name: impl Into<String>,
        dims: &[u64],
        role: TensorRole,
        why: impl Into<String>,
    ) -> Self {
        ExpectedTensor {
            name: name.into(),
            dims: dims.to_vec(),
            role,
            optional: false,
            why: why.into(),
        }
    }

    pub fn optional(mut self) -> Self {
        self.optional = true;
        self
    }
}

/// Checks every expected tensor against `lookup(name) -> Option<(dims, type)>`.
pub fn validate<'a>(
    file: &Path,
    expected: &[ExpectedTensor],
    lookup: impl Fn(&str) -> Option<(&'a [u64], GgmlType)>,
) -> Result<(), ModelError> {
    for e in expected {
        let Some((dims, ty)) = lookup(&e.name) else {
            if e.optional {
                continue;
            }
            return Err(ModelError::MissingTensor {
                file: file.to_path_buf(),
                name: e.name.clone(),
                expected: e.dims.clone(),
            });
        };
        if dims != e.dims.as_slice() {
            return Err(ModelError::WrongShape {
                file: file.to_path_buf(),
                name: e.name.clone(),
                found: dims.to_vec(),
                expected: e.dims.clone(),
                why: e.why.clone(),
            });
        }
        if !e.role.allowed().contains(&ty) {
            return Err(ModelError::WrongType {
                file: file.to_path_buf(),
                name: e.name.clone(),
                found: ty.name().to_string(),
                expected: e
                    .role
                    .allowed()
                    .iter()
                    .map(|t| t.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
    }
    Ok(())
}
