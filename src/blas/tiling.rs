//! How a large product's C is cut into tiles for the pool: from the
//! shape alone, so every thread count runs the same tiles (see
//! `split.rs`). Plain arithmetic on the product's dimensions.

/// Products with at least this many multiply-adds are cut into tiles
/// across the pool; smaller ones gain nothing from a second thread
/// (measured: the tiny preset's 5-23 us calls).
const SPLIT_MIN_MACS: usize = 1 << 22;

/// The smallest side of a tile, rows or columns: a thinner tile repacks
/// the operand it shares with its neighbours for too little work.
const MIN_TILE_SIDE: usize = 64;
/// The least multiply-adds of a tile: each tile re-reads the operand it
/// shares with the tiles beside it, so a tile stays large enough (about a
/// quarter of a millisecond on one core) for that to be a small cost.
const MIN_TILE_MACS: usize = 1 << 23;
/// Tiles a product is cut into whenever its work allows, whatever its
/// area: 16 keeps 16 threads busy, and a power of two divides evenly
/// among 2, 4, 8 and 16.
const BASE_TILES: usize = 16;
/// The most tiles of one product: 64 threads busy.
const MAX_TILES: usize = 64;
/// Beyond [`BASE_TILES`], each tile keeps at least this many elements of C
/// (256 x 256): more, smaller tiles repack both operands more often.
const MIN_TILE_AREA: usize = 1 << 16;

/// How the product's C is cut: (row tiles, column tiles), from the shape
/// alone; small products stay whole. The count is a power of two (at most
/// [`MAX_TILES`]: [`BASE_TILES`], more when C is large, fewer when the work is
/// small), split into rows x columns, both powers of two, so that the
/// operands are re-read least: each band of rows packs op(B) again (n
/// floats per row of op(B)), each band of columns op(A) (m per column).
/// Against the 12-16 bands of rows this replaced, on a GPT-2 step's
/// products (1,024 rows, 768 wide): 4-23% less one-thread time for each
/// (27% for the LM head's forward, whose 50,257 columns each band packed
/// again), and the 16-thread step 13% shorter (more, evener tiles).
pub(crate) fn tiles(m: usize, n: usize, k: usize) -> (usize, usize) {
    let macs = m * n * k;
    if macs < SPLIT_MIN_MACS {
        return (1, 1);
    }
    let by_work = (macs / MIN_TILE_MACS).max(1);
    let by_area = (m * n / MIN_TILE_AREA).max(BASE_TILES);
    let (max_rows, max_cols) = ((m / MIN_TILE_SIDE).max(1), (n / MIN_TILE_SIDE).max(1));
    let count = by_work.min(by_area).min(MAX_TILES);
    let mut count: usize = 1 << count.ilog2();
    loop {
        let least_reread = (0..=count.trailing_zeros())
            .map(|e| (1 << e, count >> e))
            .filter(|&(rows, cols)| rows <= max_rows && cols <= max_cols)
            .min_by_key(|&(rows, cols)| rows * n + cols * m);
        // A count of 1 always fits, so the loop ends.
        match least_reread {
            Some(rc) => return rc,
            None => count /= 2,
        }
    }
}
