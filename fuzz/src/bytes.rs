//! Reading an input as a stream of small decisions.

/// Reads the input; past its end every read gives zeros.
pub struct Bytes<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Bytes<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Bytes { data, pos: 0 }
    }
    pub fn done(&self) -> bool {
        self.pos >= self.data.len()
    }
    pub fn u8(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }
    pub fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    pub fn u64(&mut self) -> u64 {
        (self.u32() as u64) | ((self.u32() as u64) << 32)
    }
    /// Up to `n` bytes (fewer at the end of the input).
    pub fn take(&mut self, n: usize) -> &'a [u8] {
        let start = self.pos.min(self.data.len());
        let end = start.saturating_add(n).min(self.data.len());
        self.pos = start + n.max(end - start);
        &self.data[start..end]
    }
    /// An f32 that is usually interesting for hyper-parameters.
    pub fn f32(&mut self) -> f32 {
        const V: [f32; 20] = [
            1e-3,
            0.9,
            0.999,
            1e-8,
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.5,
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MIN_POSITIVE,
            1e-45,
            f32::MAX,
            2.0,
            1e30,
            -1e-3,
            0.01,
            0.1,
        ];
        let b = self.u8();
        if b >= 240 {
            f32::from_bits(self.u32())
        } else {
            V[b as usize % V.len()]
        }
    }
    /// A small count or index, sometimes a huge one.
    pub fn small_usize(&mut self) -> usize {
        const HUGE: [usize; 8] = [
            usize::MAX,
            1 << 32,
            1 << 31,
            u32::MAX as usize,
            64,
            1000,
            usize::MAX / 4 + 1,
            isize::MAX as usize,
        ];
        let b = self.u8();
        if b >= 240 {
            HUGE[b as usize % HUGE.len()]
        } else {
            b as usize % 8
        }
    }
    pub fn axis(&mut self) -> i32 {
        const ODD: [i32; 4] = [i32::MIN, i32::MAX, 6, -7];
        let b = self.u8();
        if b >= 240 {
            ODD[b as usize % 4]
        } else {
            (b % 16) as i32 - 8
        }
    }
}
