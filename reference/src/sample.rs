//! Reference of `sample`.

/// Index of the largest value; ties go to the lowest index; NaN never wins; `u32::MAX` when
/// every value is NaN (or the row is empty). The same total order as the GPU kernel.
pub fn argmax(row: &[f32]) -> (u32, f32) {
    let mut best = (u32::MAX, f32::NEG_INFINITY);
    for (i, &v) in row.iter().enumerate() {
        let i = i as u32;
        if v > best.1 || (v == best.1 && i < best.0) {
            best = (i, v);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_go_to_the_lowest_index_and_nan_never_wins() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), (1, 3.0));
        assert_eq!(argmax(&[f32::NAN, 0.5, f32::NAN]), (1, 0.5));
        assert_eq!(argmax(&[f32::NEG_INFINITY, f32::NEG_INFINITY]).0, 0);
        assert_eq!(argmax(&[f32::NAN]).0, u32::MAX);
        assert_eq!(argmax(&[]).0, u32::MAX);
    }
}
