//! Stream-K partition of a `qmm_*` product, proven on the host; **no kernel uses it**. The
//! sixteenth engine session ran it in the Q4_K/Q6_K kernels (one or two items per block, the
//! last-arriving piece adding the partials) and measured it slower than the split plans in the
//! engine — the kernels' extra code cost the default path 0.44 ms per 22-node verify, and the
//! stream launches' reduction more than the balance saved — so the kernels were reverted
//! (docs/perf/qmatmul.md, "Sixteenth engine session"). The patch in
//! `docs/perf/archive/2026-11-26-qmm-stream-k/` holds everything that attempt added, including
//! the 32-bit per-item form the kernels need and the partition's piece count.
//!
//! The product's work is `U = row_blocks · blocks_per_row` units (one unit: one weight block of
//! K for one 128-row block), ordered row block major. Block `g` of a grid of `grid` blocks takes
//! the contiguous units `lo(g) .. lo(g + 1)`, `lo(g) = ⌊g·U / grid⌋`, so no block has more than
//! `⌈U / grid⌉` units — where a K split gives some blocks whole row blocks and leaves slots idle
//! (the 27B's 40-row-block layer shapes: 200 or 240 blocks on 264 slots) or a second wave (the
//! fused gate/up's 272 row blocks). A block's range crosses at most one row-block boundary when
//! `⌈U / grid⌉ ≤ blocks_per_row + 1` ([`qmm_stream_fits`]: a half-open range of that length holds
//! at most one boundary strictly inside it), so it has one or two items (row block, K range). A row block is then covered by `pieces` consecutive blocks, piece `p` the `p`-th
//! lowest K range — the split order of the K-split reduction, so a column's sum is
//! `((0 + P_0) + P_1) + …` in piece order, and the partition depends on the shape and the grid
//! only, never on the number of columns (a column's bits are the same at every n).

/// One item of a stream-K block: weight blocks `b0 .. b1` of row block `row_block`, which is
/// piece `piece` of that row block's `pieces` (in K order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QmmStreamItem {
    pub row_block: u32,
    pub b0: u32,
    pub b1: u32,
    pub piece: u32,
    pub pieces: u32,
}

/// First unit of block `g`: `⌊g·units / grid⌋` (`g ≤ grid`).
pub const fn qmm_stream_lo(g: u32, grid: u32, units: u64) -> u64 {
    (g as u64 * units) / grid as u64
}

/// The block whose range holds unit `u` (`u < units`): the largest `g` with `lo(g) ≤ u`, i.e.
/// `⌈(u + 1)·grid / units⌉ − 1`.
pub const fn qmm_stream_block_of(u: u64, grid: u32, units: u64) -> u32 {
    (((u + 1) * grid as u64 - 1) / units) as u32
}

/// Whether the stream-K partition of `row_blocks × blocks_per_row` units over `grid` blocks
/// gives every block at least one unit and at most two items: `grid ≤ U` and `⌈U / grid⌉ ≤
/// blocks_per_row + 1`.
pub const fn qmm_stream_fits(row_blocks: u32, blocks_per_row: u32, grid: u32) -> bool {
    let units = row_blocks as u64 * blocks_per_row as u64;
    grid > 0 && blocks_per_row > 0 && grid as u64 <= units && units.div_ceil(grid as u64) <= blocks_per_row as u64 + 1
}

/// Most units one block of the partition takes: `⌈U / grid⌉`.
pub const fn qmm_stream_max_units(row_blocks: u32, blocks_per_row: u32, grid: u32) -> u32 {
    let units = row_blocks as u64 * blocks_per_row as u64;
    units.div_ceil(if grid == 0 { 1 } else { grid as u64 }) as u32
}

/// `(first block, pieces)` of row block `rb`: the blocks `first .. first + pieces` cover it.
pub const fn qmm_stream_pieces(rb: u32, blocks_per_row: u32, grid: u32, units: u64) -> (u32, u32) {
    let u0 = rb as u64 * blocks_per_row as u64;
    let first = qmm_stream_block_of(u0, grid, units);
    let last = qmm_stream_block_of(u0 + blocks_per_row as u64 - 1, grid, units);
    (first, last - first + 1)
}

/// The items of block `g` (`g < grid`, [`qmm_stream_fits`]): `(items, count)`, count 1 or 2, in
/// K-then-row order (the second item, if any, starts the next row block at K block 0).
pub const fn qmm_stream_items(g: u32, row_blocks: u32, blocks_per_row: u32, grid: u32) -> ([QmmStreamItem; 2], u32) {
    let bpr = blocks_per_row as u64;
    let units = row_blocks as u64 * bpr;
    let (lo, hi) = (qmm_stream_lo(g, grid, units), qmm_stream_lo(g + 1, grid, units));
    let none = QmmStreamItem { row_block: 0, b0: 0, b1: 0, piece: 0, pieces: 0 };
    let mut items = [none, none];
    let mut count = 0u32;
    let mut at = lo;
    while at < hi && count < 2 {
        let rb = at / bpr;
        let end = if (rb + 1) * bpr < hi { (rb + 1) * bpr } else { hi };
        let (first, pieces) = qmm_stream_pieces(rb as u32, blocks_per_row, grid, units);
        items[count as usize] = QmmStreamItem {
            row_block: rb as u32,
            b0: (at - rb * bpr) as u32,
            b1: (end - rb * bpr) as u32,
            piece: g - first,
            pieces,
        };
        count += 1;
        at = end;
    }
    (items, count)
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec;

    /// Every unit in exactly one item; each row block's pieces are its blocks in order, with
    /// contiguous ascending K ranges from 0 to `blocks_per_row`; at most two items per block.
    fn check(row_blocks: u32, bpr: u32, grid: u32) {
        assert!(qmm_stream_fits(row_blocks, bpr, grid));
        let units = row_blocks as u64 * bpr as u64;
        let mut seen = vec![false; units as usize];
        // Per row block: the next K block its next piece must start at, and the next piece index.
        let mut next_k = vec![0u32; row_blocks as usize];
        let mut next_piece = vec![0u32; row_blocks as usize];
        let mut most = 0u64;
        for g in 0..grid {
            let (items, count) = qmm_stream_items(g, row_blocks, bpr, grid);
            assert!((1..=2).contains(&count), "{row_blocks}×{bpr} on {grid}: block {g} has {count} items");
            let mut len = 0u64;
            for it in &items[..count as usize] {
                let rb = it.row_block as usize;
                assert!(it.b0 < it.b1 && it.b1 <= bpr);
                assert_eq!(it.b0, next_k[rb], "{row_blocks}×{bpr} on {grid}: block {g}, row block {rb}");
                assert_eq!(it.piece, next_piece[rb]);
                let (first, pieces) = qmm_stream_pieces(it.row_block, bpr, grid, units);
                assert_eq!((first + it.piece, pieces), (g, it.pieces));
                next_k[rb] = it.b1;
                next_piece[rb] += 1;
                for b in it.b0..it.b1 {
                    let u = (it.row_block as u64 * bpr as u64 + b as u64) as usize;
                    assert!(!seen[u]);
                    seen[u] = true;
                }
                len += (it.b1 - it.b0) as u64;
            }
            most = most.max(len);
        }
        assert!(seen.iter().all(|&s| s));
        for rb in 0..row_blocks as usize {
            assert_eq!(next_k[rb], bpr);
            assert_eq!(next_piece[rb], qmm_stream_pieces(rb as u32, bpr, grid, units).1);
        }
        assert_eq!(most, qmm_stream_max_units(row_blocks, bpr, grid) as u64);
    }

    #[test]
    fn every_unit_once_and_each_row_blocks_pieces_in_k_order() {
        for row_blocks in 1..24u32 {
            for bpr in 1..30u32 {
                for grid in 1..80u32 {
                    if qmm_stream_fits(row_blocks, bpr, grid) {
                        check(row_blocks, bpr, grid);
                    }
                }
            }
        }
    }

    /// The 27B's shapes on nvidia-h200's 264 slots (docs/perf/spec.md, fifteenth session).
    #[test]
    fn the_27b_layer_shapes_balance_over_264_slots() {
        // Q4_K 17408 → 5120 (68 super-blocks per row): 14 units in the 5-split plan's busiest block.
        check(40, 68, 264);
        assert_eq!(qmm_stream_max_units(40, 68, 264), 11);
        // Q4_K 6144 → 5120: 5 → 4.
        check(40, 24, 264);
        assert_eq!(qmm_stream_max_units(40, 24, 264), 4);
        // The fused gate/up (272 row blocks of 20): 20 + a second wave of 2 → 21 in one wave.
        check(272, 20, 264);
        assert_eq!(qmm_stream_max_units(272, 20, 264), 21);
        // More units per block than a row holds: not a two-item partition.
        assert!(!qmm_stream_fits(272, 20, 100));
        assert!(!qmm_stream_fits(2, 4, 9));
    }
}
